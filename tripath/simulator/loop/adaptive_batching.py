"""Adaptive batching: AIMD on the batch size and the wait window, steered by the tail latency against the SLA.

The policy forms groups as the dynamic batcher does (tripath/simulator/loop/batching.py: Windowed, joining a
running batch), with a batch size and wait window that the controller moves:

- it keeps the latencies (TTFT, TPOT, end-to-end: the terms the SLA names) of the last
  ``window`` finished requests of its replica;
- every ``every`` finished requests it compares each term's P99 over that window with the
  term's target: when any is over, both limits shrink multiplicatively (x ``decrease``, batch
  size at least 1) and the window of observations restarts, so the requests served under the
  old limits do not trigger a second cut; when every term is below ``margin`` x target, the
  batch size grows by ``batch_step`` and the wait window by ``wait_step_s``, up to the
  configured maxima; in between nothing changes.

This is the AIMD rule of TCP congestion control as Clipper (Crankshaw et al., NSDI 2017)
applies it to batch sizes: additive growth probes for throughput, multiplicative decrease backs
off fast when the tail breaks the SLA. A larger batch raises every decode iteration's cost
(TPOT) and a longer window raises queueing (TTFT), so shrinking both pulls the tail down.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from tripath.core.metrics import TERMS
from tripath.simulator.loop.batching import Windowed
from tripath.simulator.loop.stepper import Stepper


@dataclass(frozen=True)
class AimdSettings:
    """The controller's constants; targets in seconds per SLA term (at least one)."""

    max_batch_size: int
    max_wait_s: float
    targets: tuple[tuple[str, float], ...]
    window: int = 200
    every: int = 20
    margin: float = 0.8
    decrease: float = 0.5
    batch_step: int = 1
    wait_step_s: float = 0.001

    def __post_init__(self) -> None:
        if not self.targets:
            raise ValueError("adaptive batching needs at least one SLA target (sla.*_p99_ms)")
        for term, target in self.targets:
            if term not in TERMS or not (math.isfinite(target) and target > 0):
                raise ValueError(f"bad SLA target {term} = {target}")
        if self.max_batch_size < 1 or self.window < 1 or self.every < 1 or self.batch_step < 1:
            raise ValueError("max_batch_size, window, every and batch_step must be >= 1")
        if not (0 < self.decrease < 1 and 0 < self.margin <= 1 and self.max_wait_s >= 0 and self.wait_step_s >= 0):
            raise ValueError("need 0 < decrease < 1, 0 < margin <= 1, max_wait_s >= 0, wait_step_s >= 0")


class AimdController:
    """Current limits, moved by the finished requests' latencies; ``history`` lists every change."""

    def __init__(self, settings: AimdSettings) -> None:
        self.settings = settings
        self.batch_size = settings.max_batch_size  # start at the configured limits and back off
        self.wait_s = settings.max_wait_s
        self._seen = {term: deque(maxlen=settings.window) for term, _ in settings.targets}
        self._since = 0
        self.history: list[tuple[float, int, float]] = []  # (time, batch size, wait s) after each change

    def observe(self, latencies: dict[str, float], now: float) -> None:
        """One finished request's latency per term (seconds; a term may be missing, e.g. TPOT of 1 token)."""
        for term, seen in self._seen.items():
            value = latencies.get(term)
            if value is not None:
                seen.append(value)
        self._since += 1
        if self._since >= self.settings.every:
            self._since = 0
            self._adjust(now)

    def p99_ratio(self) -> float:
        """Max over SLA terms of windowed P99 / target (0 when nothing observed yet)."""
        ratio = 0.0
        for term, target in self.settings.targets:
            seen = self._seen[term]
            if seen:
                ratio = max(ratio, float(np.percentile(np.fromiter(seen, float), 99.0)) / target)
        return ratio

    def _adjust(self, now: float) -> None:
        s = self.settings
        ratio = self.p99_ratio()
        if ratio > 1.0:
            self.batch_size = max(1, int(self.batch_size * s.decrease))
            self.wait_s = self.wait_s * s.decrease
            for seen in self._seen.values():
                seen.clear()
        elif ratio < s.margin:
            batch = min(s.max_batch_size, self.batch_size + s.batch_step)
            wait = min(s.max_wait_s, self.wait_s + s.wait_step_s)
            if (batch, wait) == (self.batch_size, self.wait_s):
                return
            self.batch_size, self.wait_s = batch, wait
        else:
            return
        self.history.append((now, self.batch_size, self.wait_s))


class Adaptive(Windowed):
    """Dynamic group formation under the controller's current batch size and wait window."""

    def __init__(self, controller: AimdController) -> None:
        super().__init__(controller.settings.max_batch_size, controller.settings.max_wait_s, joins=True)
        self.controller = controller

    def limits(self) -> tuple[int, float]:
        return self.controller.batch_size, self.controller.wait_s

    def observe(self, stepper: Stepper, request: int, finish: float) -> None:
        ledger = stepper.ledger
        arrival, first = ledger.arrival[request], ledger.first_token[request]
        latencies = {"ttft": first - arrival, "e2e": finish - arrival}
        if ledger.output[request] >= 2:
            latencies["tpot"] = (finish - first) / (ledger.output[request] - 1)
        self.controller.observe(latencies, finish)
