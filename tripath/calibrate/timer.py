"""Timing one callable: warm-up runs, then repetitions, each measured after the device is idle.

On CUDA each repetition is bracketed by CUDA events on the current stream and read after a
synchronize, so the time is the device's, not the launch queue's. On CPU the clock is either
``wall`` (perf_counter) or ``thread``: the CPU time of the calling thread (time.thread_time).
With one torch thread all the work runs on the calling thread, so its CPU time is what the step
costs on an idle core; other processes on a shared machine inflate it far less than wall time, but
still through shared caches and memory bandwidth (docs/fidelity.md, "Machine noise"): calibrate on a
quiet machine.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TimerConfig:
    """Warm-up runs (not recorded) and recorded repetitions per point."""

    warmup: int = 1
    reps: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"TimerConfig.warmup: must be an integer >= 0, got {self.warmup!r}")
        if isinstance(self.reps, bool) or not isinstance(self.reps, int) or self.reps < 1:
            raise ValueError(f"TimerConfig.reps: must be an integer >= 1, got {self.reps!r}")


@dataclass(frozen=True)
class Timing:
    """Repetition times of one point, in ms."""

    times_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.times_ms))

    @property
    def min_ms(self) -> float:
        return min(self.times_ms)

    @property
    def max_ms(self) -> float:
        return max(self.times_ms)


CLOCKS = ("wall", "thread")


def time_call(fn: Callable[[], object], config: TimerConfig, device: torch.device, clock: str = "wall") -> Timing:
    """Run ``fn`` config.warmup times untimed, then config.reps times timed (``clock``: CPU only)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock: must be one of {CLOCKS}, got {clock!r}")
    for _ in range(config.warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(config.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(float(start.elapsed_time(end)))  # ms
    else:
        now = time.perf_counter if clock == "wall" else time.thread_time
        for _ in range(config.reps):
            t0 = now()
            fn()
            times.append((now() - t0) * 1e3)
    return Timing(tuple(times))
