"""How a cluster configures its Steppers (tripath/simulator/loop/stepper.py): preemption, swap cost, physics, policy."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tripath.simulator.loop.batching import BatchPolicy
    from tripath.simulator.step_model import StepModel

PREEMPTION_MODES = ("none", "recompute", "swap")


@dataclass(frozen=True)
class StepperConfig:
    """What the loop needs besides the policy: preemption mode and the cost of swapping KV bytes."""

    preemption: str = "none"
    swap_s: Callable[[int], float] | None = None  # seconds to move this many KV bytes one way (swap only)

    def __post_init__(self) -> None:
        if self.preemption not in PREEMPTION_MODES:
            raise ValueError(f"preemption must be one of {PREEMPTION_MODES}, got {self.preemption!r}")
        if self.preemption == "swap" and self.swap_s is None:
            raise ValueError("preemption = 'swap' needs swap_s (the device_host paging cost)")


@dataclass(frozen=True)
class StepperSetup:
    """How a cluster builds its Steppers: per-replica physics and policy (each may keep state)."""

    model_for: Callable[[int], StepModel]
    policy_for: Callable[[int], BatchPolicy]
    config: StepperConfig = StepperConfig()
    task_names: tuple[str, ...] = ()  # PrefillChunk/DecodeBatch tasks index these; others numbered after
    timeseries_interval_s: float | None = None

    def __post_init__(self) -> None:
        interval = self.timeseries_interval_s
        if interval is not None and not (math.isfinite(interval) and interval > 0):
            raise ValueError(f"timeseries_interval_s must be > 0, got {interval}")

    def task_indexes(self, tasks: Sequence[str]) -> list[int]:
        index = {name: i for i, name in enumerate(self.task_names)}
        for name in tasks:
            index.setdefault(name, len(index))
        return [index[name] for name in tasks]
