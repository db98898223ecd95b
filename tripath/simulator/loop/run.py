"""A run: consecutive iterations of one replica in which the batch does not change.

No request finishes before the run's last iteration and none can be admitted before it ends,
so the exact fast path (tripath/simulator/loop/stepper.py: ``Stepper.fast_forward``) advances the whole
run in one SimPy event. Its first
iteration may prefill newly admitted requests (a mixed iteration, costed by IterationCost.mixed_s);
the rest are decodes of the same ``batch`` sequences, whose total context grows by ``batch`` per
iteration (and whose longest context by 1: IterationCost.run_keys prices either). Boundaries are a
cumulative sum of per-iteration costs: itertools.accumulate adds left to right from the run's end so far, so
each boundary is the same float the reference reaches by repeated ``now + cost`` (on a Python list: for the
few hundred iterations a run evaluates at once, numpy's cumsum and searchsorted cost more in call overhead than
they save).

A run can be cut short: when a request is routed to its replica mid-run, it ends at its first
boundary at or after that instant (``cut``), exactly where the reference would admit the request.
``wait`` is how a replica's process sits out a run that the router may interrupt.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Generator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np
import simpy

from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.clock import Clock


class Run:
    """Boundaries and counts of one run; built by ``add_mixed`` / ``add_decodes``, maybe ``cut``."""

    __slots__ = ("batch", "cuttable", "decode_context", "decode_longest", "end", "first_end", "iterations", "mixed",
                 "start", "_bounds", "_context", "_longest", "_offset")

    def __init__(self, start: float, batch: int, context: int, longest: int = 0) -> None:
        self.start = start
        self.batch = batch  # sequences decoding in every iteration after a mixed first one
        self.decode_context = context  # total context S at the run's first decode iteration
        self.mixed = 0  # 1 when the first iteration prefills newly admitted requests
        self.first_end = start
        self.end = start
        self.iterations = 0
        self.cuttable = False  # set when an arrival routed here must interrupt the run
        self._context = context  # S of the next decode iteration to evaluate
        # the longest context at the first decode / the next one to evaluate (used when attention is padded)
        self.decode_longest = self._longest = longest
        self._bounds: list[float] = []  # boundaries of the last evaluated chunk of decodes
        self._offset = 0  # iterations before that chunk

    def add_mixed(self, cost_s: float, context_growth: int, longest_after: int = 0) -> None:
        """The first iteration prefills the admitted requests while the others decode; ``longest_after``: the
        longest context at the decode after it."""
        self.end = self.first_end = float(self.start + cost_s)
        self.mixed = 1
        self.iterations = 1
        self.decode_context += context_growth
        self._context = self.decode_context
        self.decode_longest = self._longest = longest_after

    def add_decodes(self, cost: IterationCost, count: int, next_arrival: float) -> bool:
        """Append up to ``count`` decodes, stopping at the first boundary >= next_arrival (then True)."""
        return self.add_costs(decode_costs(cost, self.batch, self._context, self._longest, count).tolist(),
                              next_arrival)

    def add_costs(self, costs: list[float], next_arrival: float) -> bool:
        """Append decodes of ``costs`` seconds each (``add_decodes``'s, or a lockstep group's: the slowest rank's
        per iteration), stopping at the first boundary >= next_arrival (then True)."""
        batch, context, count = self.batch, self._context, len(costs)
        # iteration boundaries, added left to right like now + cost (end + c0 is c0 + end: + commutes exactly)
        bounds = list(accumulate(costs, initial=self.end))
        del bounds[0]
        used = count
        arrived = bounds[count - 1] >= next_arrival
        if arrived:
            used = bisect_left(bounds, next_arrival) + 1  # the first boundary >= next_arrival (costs are > 0)
            del bounds[used:]
        if self.iterations == 0:
            self.first_end = bounds[0]
        self._bounds, self._offset = bounds, self.iterations
        self.iterations += used
        self.end = bounds[used - 1]
        self._context = context + batch * used
        self._longest += used
        return arrived

    def cut(self, now: float) -> None:
        """End the run at its first boundary at or after ``now`` (now <= end: the run is in progress)."""
        if self.mixed and self.first_end >= now:
            self.iterations, self.end = 1, self.first_end
            return
        index = bisect_left(self._bounds, now)
        self.iterations = self._offset + index + 1
        self.end = float(self._bounds[index])

    def wait(self, env: Clock) -> Generator[simpy.Event, None, None]:
        """Wait for the run's end; when a request routed here interrupts the waiting process, cut the run at that
        instant (``cut``) and wait for the boundary it now ends at."""
        try:
            yield env.at(self.end)
        except simpy.Interrupt:  # a request was routed here mid-run: stop where it can join
            self.cut(env.now)
            yield env.at(self.end)


@dataclass(frozen=True)
class RunBooking:
    """The Stepper's exact fast path for the baseline and its deterministic transforms (tripath/simulator/loop/
    stepper.py: ``Stepper.fast_forward``), chosen by the cluster: every event is a run planned from the
    continuous-batching limits (a mixed first iteration, the arrival watch), booked as one event in ``runs`` and,
    with sequence parallelism, one addition of the run's merge sum per request (``merge_s``).

    ``next_arrival`` / ``expects``: the cluster's next arrival and whether the router would pick this replica for
    it now (the arrival watch); ``max_batch_size`` / ``max_batched_tokens``: continuous batching's limits;
    ``single``: one iteration per run (the one-event-per-iteration reference);
    ``merge_ms`` / ``prefill_merge_ms``: SP's merge of a decode step at a total context and batch, and of a prompt
    (elementwise over arrays), None without SP.
    """

    next_arrival: Callable[[], float]
    expects: Callable[[int], bool]
    max_batch_size: int
    max_batched_tokens: int
    single: bool = False
    merge_ms: Callable[[Any, Any], Any] | None = None
    prefill_merge_ms: Callable[[Any], Any] | None = None

    def merge_s(self, context: int, before: int, prompts: list[int], iterations: int) -> float:
        """Seconds of SP merge in a run of ``iterations`` from a total context ``context`` of ``before`` running
        sequences, its first iteration prefilling ``prompts`` (none: decodes only). The same merge terms the
        transformed cost priced: merge(S) per decode iteration at its total context S, merge(prompt) per prompt;
        a run's sum, so it agrees with per-iteration booking to float rounding, not bit for bit."""
        merge, prefill_merge = self.merge_ms, self.prefill_merge_ms
        assert merge is not None and prefill_merge is not None
        total_ms = 0.0
        decodes = iterations
        if prompts:
            decodes -= 1
            if before:
                total_ms += float(merge(context, before))
            total_ms += sum(float(prefill_merge(p)) for p in prompts)
            context += before + sum(prompts) + len(prompts)  # as Run.add_mixed's growth
        batch = before + len(prompts)
        if decodes > 0:
            total_ms += float(np.sum(merge(np.arange(context, context + batch * decodes, batch), batch)))
        return total_ms / 1000.0


def decode_costs(cost: IterationCost, batch: int, context: int, longest: int, count: int) -> np.ndarray:
    """Seconds of ``count`` decodes of ``batch`` sequences from total context ``context`` (longest ``longest``,
    used when attention is padded): each step's S grows by ``batch`` (IterationCost.run_keys)."""
    return cost.decode_s(batch, cost.run_keys(batch, context, longest, count))
