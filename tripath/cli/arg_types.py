"""argparse value types shared by every tripath subcommand parser (bounds: tripath/core/limits.py)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from tripath.core.limits import (
    MAX_INT,
    MAX_RATE_PER_S,
    MAX_REPLICAS,
    MAX_REPLICATIONS,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_SIMULATED_S,
    MAX_SPECULATIVE_K,
    MAX_THREADS,
    MAX_TIME_SCALE,
    MAX_TOKENS,
    MAX_USD_PER_GPU_HOUR,
    MAX_WORKERS,
    MIN_RATE_PER_S,
    MIN_TIME_SCALE,
)


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one stderr line and exit 2 (EXIT_INPUT), like every other input error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


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


def _float(text: str) -> float:
    """A finite number (nan and inf are not a count, a rate or a time)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text[:40]!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text[:40]}")
    return value


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high`` (a bound of tripath/core/limits.py)."""

    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer from {low:,} to {high:,}, got {value:,}")
        return value

    return parse


def float_in(low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number from ``low`` (excluded when ``low_open``) to ``high``."""

    def parse(text: str) -> float:
        value = _float(text)
        if not (low < value if low_open else low <= value) or value > high:
            raise argparse.ArgumentTypeError(f"must be {'>' if low_open else '>='} {low:g} and <= {high:g}, "
                                             f"got {text[:40]}")
        return value

    return parse


non_negative_int = int_in(0, MAX_INT)
request_count = int_in(1, MAX_REQUESTS)  # requests per replication
batch_size = int_in(1, MAX_REQUESTS)  # sequences in flight: at most a run's requests
replica_count = int_in(1, MAX_REPLICAS)  # a capacity search's bound
worker_count = int_in(1, MAX_WORKERS)
thread_count = int_in(0, MAX_THREADS)  # 0: torch's default
positive_thread_count = int_in(1, MAX_THREADS)
timed_layers = int_in(2, MAX_INT)  # calibrate: >= 2, the per-layer cost is the difference from 1 layer
speculative_k = int_in(1, MAX_SPECULATIVE_K)
port = int_in(1, 65535)
rate_per_s = float_in(MIN_RATE_PER_S, MAX_RATE_PER_S)  # --qps, serve --rate
tokens = float_in(0.0, MAX_TOKENS, low_open=True)  # a context length
seconds = float_in(0.0, MAX_SIMULATED_S, low_open=True)  # a simulated duration or window
milliseconds = float_in(0.0, MAX_SIMULATED_S * 1000.0, low_open=True)  # an SLA target
usd_per_gpu_hour = float_in(0.0, MAX_USD_PER_GPU_HOUR, low_open=True)
gib = float_in(0.0, float(1 << 20), low_open=True)  # a memory size in GiB, up to 1 PiB
fraction_threshold = float_in(0.0, 100.0, low_open=True)  # an error threshold as a fraction (100 = 10,000 %)


def load_step(text: str) -> tuple[float, float]:
    """``FACTOR@SECONDS`` (whatif --load-step): the arrival rate times FACTOR from SECONDS of simulated time on.
    FACTOR scales inter-arrival times (by 1 / FACTOR), so it has time_scale's bounds; SECONDS is a time."""
    factor, sep, at = text.partition("@")
    if not sep:
        raise argparse.ArgumentTypeError(f"want FACTOR@SECONDS (e.g. 2@600), got {text[:40]!r}")
    try:
        factor_f = float_in(MIN_TIME_SCALE, MAX_TIME_SCALE)(factor)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"FACTOR {err}") from None
    try:
        at_f = float_in(0.0, MAX_SIMULATED_S)(at)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"SECONDS {err}") from None
    return factor_f, at_f


def gpu_types(text: str) -> tuple[str, ...]:
    """A comma-separated list of GPU types the shipped profiles name (tripath/profile/catalog.py GPUS)."""
    from tripath.profile.catalog import GPUS

    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    unknown = [n for n in names if n not in GPUS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown GPU type(s) {', '.join(unknown) or repr(text[:40])}; "
                                         f"known: {', '.join(GPUS)}")
    return names


MAX_BATCH_SIZES = 8  # each size is one more sizing search per (layout, candidate) row


def batch_sizes(text: str) -> tuple[int, ...]:
    """A comma-separated list of max batch sizes (each >= 1), at most MAX_BATCH_SIZES; 'none' is the empty list."""
    if text.strip().lower() == "none":
        return ()
    sizes = tuple(dict.fromkeys(batch_size(t.strip()) for t in text.split(",") if t.strip()))
    if not sizes:
        raise argparse.ArgumentTypeError(f"must be integers >= 1, comma-separated, or 'none'; got {text[:40]!r}")
    if len(sizes) > MAX_BATCH_SIZES:
        raise argparse.ArgumentTypeError(f"at most {MAX_BATCH_SIZES} sizes, got {len(sizes)}")
    return sizes
