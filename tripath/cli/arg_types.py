"""argparse value types shared by every tripath subcommand parser (bounds: tripath/core/limits.py)."""

from __future__ import annotations

import argparse
import math

from tripath.core.limits import MAX_INT, MAX_REPLICATIONS, MAX_SEED


def _int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text[:40]!r}") from None
    if abs(value) > MAX_INT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_INT:,}, got {text[:40]}")
    return value


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def replications(text: str) -> int:
    value = positive_int(text)
    if value > MAX_REPLICATIONS:
        raise argparse.ArgumentTypeError(f"must be <= {MAX_REPLICATIONS:,}, got {value:,}")
    return value


def seed(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be in [0, {MAX_SEED:,}], got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text[:40]!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text[:40]}")
    return value


def gpu_types(text: str) -> tuple[str, ...]:
    """A comma-separated list of GPU types the shipped profiles name (tripath/profile/catalog.py GPUS)."""
    from tripath.profile.catalog import GPUS

    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    unknown = [n for n in names if n not in GPUS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown GPU type(s) {', '.join(unknown) or repr(text[:40])}; "
                                         f"known: {', '.join(GPUS)}")
    return names
