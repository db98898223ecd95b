"""The contract between the iteration loop and the physics of the optimization paths.

The loop (simulator/stepper.py) owns time, queues, batching policy, admission and preemption.
A ``StepModel`` owns what one iteration costs and what it yields: given the prefill chunks and
the decoding sequences the loop put into an iteration, it returns the iteration's seconds and,
per decoding sequence, how many tokens it emitted (1 without speculation; 1..K+1 with it), plus
the per-path quantities the records and time series carry (draft rounds, accepted tokens,
paging stall and bytes per link, merge time).

Memory is counted in tokens by the loop and converted by the model: ``kv_bytes_per_token`` is
what one token occupies on the device after compression, ``device_kv_tokens`` what fits on the
device, ``kv_capacity_tokens`` what may be admitted in all tiers (device only without tiering).

``BaselineStep`` is the plain model: the same float operations as simulator/costs.py's
IterationCost in simulator/replica.py, so the loop driven by it reproduces the fast replica's
records bit for bit (the test of "all options off equals the baseline").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from simulator.costs import IterationCost
from simulator.records import Extrapolations


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """Part (or all) of one request's prompt processed in this iteration."""

    request: int
    task: int  # index into the scenario's task names (workload.tasks order)
    new_tokens: int  # prompt tokens processed now
    context_before: int  # prompt tokens already cached before this chunk (0 for the first chunk)
    last: bool  # the prompt completes in this chunk: its first token is emitted at the iteration's end


@dataclass(frozen=True, slots=True)
class Decode:
    """One running sequence that decodes in this iteration."""

    request: int
    task: int
    context: int  # tokens it holds before this iteration (prompt + tokens emitted so far)
    remaining: int  # output tokens it still has to emit (>= 1)


@dataclass
class StepResult:
    """What one iteration cost and yielded; arrays are aligned with the ``decodes`` passed in."""

    seconds: float
    emitted: np.ndarray  # int64 per decode, each in [1, remaining]
    accepted: np.ndarray | None = None  # draft tokens accepted per decode (None: no speculation)
    rounds: np.ndarray | None = None  # speculative rounds per decode, 0 or 1 (None: no speculation)
    paging_s: float = 0.0  # seconds of this iteration spent stalled on paging (included in seconds)
    paging_bytes: dict[str, int] = field(default_factory=dict)  # bytes moved per link ("device_host", ...)
    merge_s: float = 0.0  # seconds of sequence-parallel merge in this iteration (included in seconds)


class StepModel(Protocol):
    """Physics of one replica's iterations; one instance per replica (it may keep state, e.g. tiers)."""

    kv_bytes_per_token: int  # device bytes per token after compression
    device_kv_tokens: int  # tokens that fit on the device
    kv_capacity_tokens: int  # tokens that may be admitted (device + host + SSD with tiering)
    gpus: int  # GPUs one replica occupies (tp x sequence-parallel degree)

    def step(self, prefills: Sequence[PrefillChunk], decodes: Sequence[Decode], live_tokens: int) -> StepResult:
        """Cost and yield of one iteration; ``live_tokens`` = KV tokens held by every admitted sequence."""
        ...

    def tier_bytes(self) -> dict[str, int]:
        """KV bytes resident per tier now ("device", and "host", "ssd" with tiering): for time series."""
        ...

    def extrapolations(self) -> Extrapolations:
        """Cost-model queries outside the measured domain so far."""
        ...


class BaselineStep:
    """No optimization path: one token per decode, costs from IterationCost exactly as replica.py uses them."""

    def __init__(self, cost: IterationCost, kv_bytes_per_token: int, kv_capacity_bytes: int, gpus: int = 1) -> None:
        self.cost = cost
        self.kv_bytes_per_token = kv_bytes_per_token
        self.device_kv_tokens = kv_capacity_bytes // kv_bytes_per_token
        self.kv_capacity_tokens = self.device_kv_tokens
        self.gpus = gpus
        self._live = 0

    def step(self, prefills: Sequence[PrefillChunk], decodes: Sequence[Decode], live_tokens: int) -> StepResult:
        self._live = live_tokens
        batch = len(decodes)
        context = sum(d.context for d in decodes)
        if prefills:
            if any(p.context_before for p in prefills):
                seconds = self._chunked_s(prefills, batch, context)
            else:
                seconds = self.cost.mixed_s([p.new_tokens for p in prefills], batch, context)
        else:
            # replica.py's expression for a decode-only iteration, operation for operation
            seconds = self.cost.decode_s(batch, np.array([context]))[0]
            self.cost.count_decodes(batch, context, 1)
        return StepResult(float(seconds), np.ones(batch, dtype=np.int64))

    def _chunked_s(self, prefills: Sequence[PrefillChunk], batch: int, context: int) -> float:
        """A mixed iteration where some chunks continue a prompt: each adds prefill(T, ctx) - prefill(0, 0)."""
        return self.cost.chunked_s([(c.new_tokens, c.context_before) for c in prefills], batch, context)

    def tier_bytes(self) -> dict[str, int]:
        return {"device": self._live * self.kv_bytes_per_token}

    def extrapolations(self) -> Extrapolations:
        return self.cost.extrapolations()
