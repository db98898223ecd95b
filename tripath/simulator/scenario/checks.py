"""Checks the scenario dataclasses run when built: each failure is an InputError naming the field.

The TOML reader (tripath/simulator/scenario/toml_reader.py) adds the file path and the dotted section prefix.
"""

from __future__ import annotations

import math

from tripath.core.errors import InputError
from tripath.core.limits import MAX_SIMULATED_S


def fail(field: str, problem: str) -> None:
    raise InputError(None, field, problem)


def check_kind(kind: str, allowed: tuple[str, ...]) -> None:
    if kind not in allowed:
        fail("kind", f"must be one of {', '.join(allowed)}, got {kind!r}")


def positive(field: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        fail(field, f"must be > 0, got {value}")


def wait_ms(field: str, value: float) -> None:
    """A wait in milliseconds: finite, >= 0 and within the simulated time a float clock keeps to the ms."""
    if not (math.isfinite(value) and 0 <= value <= MAX_SIMULATED_S * 1000.0):
        fail(field, f"must be >= 0 and <= {MAX_SIMULATED_S * 1000.0:g} ms, got {value}")


def at_least(field: str, value: int | None, low: int) -> None:
    if value is not None and value < low:
        fail(field, f"must be >= {low}, got {value}")


def at_most(field: str, value: int | None, high: int) -> None:
    if value is not None and value > high:
        fail(field, f"must be <= {high:,}, got {value:,}")


def only_for(spec: object, owners: dict[str, tuple[str, ...]]) -> None:
    """Parameters that belong to another kind are errors, not silently ignored."""
    kind = spec.kind
    for field, kinds in owners.items():
        if getattr(spec, field) is not None and kind not in kinds:
            fail(field, f"only valid for kind = {' | '.join(kinds)}, not {kind!r}")
