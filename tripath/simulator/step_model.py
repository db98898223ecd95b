"""The contract between the iteration loop and the physics of the optimization paths.

The loop (tripath/simulator/loop/stepper.py) owns time, queues, batching policy, admission and preemption.
A ``StepModel`` owns what one iteration costs and what it yields: given the prefill chunks and
the decoding sequences the loop put into an iteration (a ``DecodeBatch``: parallel lists, not an
object per sequence), it returns the iteration's seconds and,
per decoding sequence, how many tokens it emitted (1 without speculation; 1..K+1 with it), plus
the per-path quantities the records and time series carry (draft rounds, accepted tokens,
paging stall and bytes per link, merge time).

Memory is counted in tokens by the loop and converted by the model: ``kv_bytes_per_token`` is
what one token occupies on the device after compression, ``device_kv_tokens`` what fits on the
device, ``kv_capacity_tokens`` what may be admitted in all tiers (device only without tiering).

``BaselineStep`` is the plain model: the same float operations as tripath/simulator/costs.py's
IterationCost on the exact fast path (tripath/simulator/loop/stepper.py: RunBooking), so the loop driven by it
reproduces the fast path's records bit for bit (the test of "all options off equals the baseline").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from tripath.core.records import Extrapolations
from tripath.simulator.costs import IterationCost


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


@dataclass(slots=True)
class DecodeBatch:
    """The decoding sequences of one iteration as parallel lists, one entry per sequence in the loop's order.

    The loop hands the model this instead of one ``Decode`` object per sequence: a frozen object per
    sequence per iteration would dominate the loop's cost at large batches (docs/batching.md,
    Performance). ``total_context`` is the sum of ``contexts`` (the S priced unless the cost model pads
    attention to the longest context: IterationCost.keys). Iterating or indexing gives
    ``Decode`` views, for callers (tests, scripts) that think in sequences.
    """

    requests: list[int]
    tasks: list[int]
    contexts: list[int]  # tokens each holds before this iteration (prompt + emitted so far)
    remaining: list[int]  # output tokens each still has to emit (>= 1)
    total_context: int

    def __len__(self) -> int:
        return len(self.requests)

    def __getitem__(self, i: int) -> Decode:
        return Decode(self.requests[i], self.tasks[i], self.contexts[i], self.remaining[i])

    def __iter__(self) -> Iterator[Decode]:
        return (self[i] for i in range(len(self.requests)))

    @classmethod
    def of(cls, decodes: Sequence[Decode]) -> DecodeBatch:
        contexts = [d.context for d in decodes]
        return cls([d.request for d in decodes], [d.task for d in decodes], contexts,
                   [d.remaining for d in decodes], sum(contexts))


_ONES = np.ones(0, dtype=np.int64)


def ones(n: int) -> np.ndarray:
    """A read-only int64 array of n ones (one token per decode), sliced from a shared array, so no
    iteration pays for allocating one (a measurable part of the loop's per-iteration cost)."""
    global _ONES
    if n > len(_ONES):
        _ONES = np.ones(max(n, 2 * len(_ONES), 256), dtype=np.int64)
        _ONES.flags.writeable = False
    return _ONES[:n]


def as_batch(decodes: DecodeBatch | Sequence[Decode]) -> DecodeBatch:
    """The models accept a DecodeBatch (the loop's) or a sequence of Decode (tests, scripts)."""
    return decodes if isinstance(decodes, DecodeBatch) else DecodeBatch.of(decodes)


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


class Tiers(Protocol):
    """What the loop and its prefix cache read of a tiered model's KV tiers (tripath/simulator/paths/tiered.py:
    TierPhysics): the tier sizes, the engine's device residency rule and the links' costs."""

    device_tokens: int
    host_tokens: int

    def device_fits(self, lengths: list[int]) -> bool:
        """Whether live sequences holding these many tokens each fit the device residency rule."""
        ...

    def link_ms(self, link: str, nbytes: int) -> float:
        """Milliseconds to move ``nbytes`` over ``link`` ("device_host", "host_ssd")."""
        ...


class StepModel(Protocol):
    """Physics of one replica's iterations; one instance per replica (it may keep state, e.g. tiers)."""

    cost: IterationCost  # the iteration cost model it prices with (its extrapolation counters: shared or not)
    kv_bytes_per_token: int  # device bytes per token after compression
    device_kv_tokens: int  # tokens that fit on the device
    kv_capacity_tokens: int  # tokens that may be admitted (device + host + SSD with tiering)
    gpus: int  # GPUs one replica occupies (tp x sequence-parallel degree)
    tiers: Tiers | None  # the KV tiers with tiering on (their residency rule also bounds admission), else None

    def step(self, prefills: Sequence[PrefillChunk], decodes: DecodeBatch | Sequence[Decode],
             live_tokens: int) -> StepResult:
        """Cost and yield of one iteration; ``live_tokens`` = KV tokens held by every admitted sequence.
        The loop passes a DecodeBatch; a sequence of Decode is accepted too (``as_batch``)."""
        ...

    def tier_bytes(self) -> dict[str, int]:
        """KV bytes resident per tier now ("device", and "host", "ssd" with tiering): for time series."""
        ...

    def extrapolations(self) -> Extrapolations:
        """Cost-model queries outside the measured domain so far."""
        ...


class BaselineStep:
    """No optimization path: one token per decode, costs from IterationCost exactly as the exact fast path uses them.

    ``deterministic``: an iteration is a pure function of what the loop passes (no random draw, no state carried
    to the next iteration but the cost counters and the live tokens ``ran_decodes`` sets), and a decode-only one
    costs ``cost.decode_one_s`` at the priced S, one token per sequence. The loop may then advance a run of
    decode-only iterations of a fixed batch at once (tripath/simulator/loop/stepper.py, fast-forward): their costs
    from ``cost.decode_s`` over the run's S values (tripath/simulator/loop/run.py), their merge time from
    ``decode_merge_s``, their accounting from ``ran_decodes``. A subclass that overrides ``step`` is not
    deterministic unless it says so in its own body (its step may draw, emit more tokens or keep state).
    """

    deterministic = True
    tiers: Tiers | None = None  # the device only: no tiering on the baseline and its transforms

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__ and "deterministic" not in cls.__dict__:
            cls.deterministic = False

    def __init__(self, cost: IterationCost, kv_bytes_per_token: int, kv_capacity_bytes: int, gpus: int = 1) -> None:
        self.cost = cost
        self.kv_bytes_per_token = kv_bytes_per_token
        self.device_kv_tokens = kv_capacity_bytes // kv_bytes_per_token
        self.kv_capacity_tokens = self.device_kv_tokens
        self.gpus = gpus
        self._live = 0

    def step(self, prefills: Sequence[PrefillChunk], decodes: DecodeBatch | Sequence[Decode],
             live_tokens: int) -> StepResult:
        self._live = live_tokens
        decodes = as_batch(decodes)
        batch = len(decodes)
        context = decodes.total_context
        if batch and self.cost.block_tokens is not None:  # the engine: attention padded to the longest
            context = self.cost.keys(batch, context, max(decodes.contexts))
        if prefills:
            if any(p.context_before for p in prefills):
                seconds = self._chunked_s(prefills, batch, context)
            else:
                seconds = self.cost.mixed_s([p.new_tokens for p in prefills], batch, context)
        else:
            # the fast path's decode-only iteration: the same float operations, on a scalar
            seconds = self.cost.decode_one_s(batch, context)
            self.cost.count_decodes(batch, context, 1)
        return StepResult(float(seconds), ones(batch))

    def decode_merge_s(self, batch: int, total_contexts: np.ndarray) -> np.ndarray | None:
        """The merge seconds ``step`` reports for decode-only iterations of ``batch`` sequences, one per Σ context
        in ``total_contexts`` (elementwise the same floats); None where it reports none (no merge here)."""
        return None

    def ran_decodes(self, batch: int, total_context: int, longest: int, iterations: int) -> None:
        """Account for ``iterations`` decode-only iterations of a fixed batch advanced at once, from Σ contexts
        ``total_context`` and longest context ``longest``, as ``step`` would have one by one: the decode queries
        (IterationCost.count_run, the padded keys where the cost pads) and the live tokens of the last one."""
        self.cost.count_run(batch, total_context, longest, iterations)
        self._live = total_context + batch * (iterations - 1)

    def _chunked_s(self, prefills: Sequence[PrefillChunk], batch: int, context: int) -> float:
        """A mixed iteration where some chunks continue a prompt: each adds prefill(T, ctx) - prefill(0, 0)."""
        return self.cost.chunked_s([(c.new_tokens, c.context_before) for c in prefills], batch, context)

    def tier_bytes(self) -> dict[str, int]:
        return {"device": self._live * self.kv_bytes_per_token}

    def extrapolations(self) -> Extrapolations:
        return self.cost.extrapolations()
