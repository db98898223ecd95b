"""One replica (tp GPUs serving one model copy): an FCFS queue and continuous batching.

The unit of simulated work is one batch iteration, never one token of one request:

- At each iteration boundary, requests that emitted their last token leave and free their KV;
  then waiting requests are admitted strictly FCFS (stop at the first that does not fit) while
  the batch has fewer than max_batch_size sequences, the request's KV reservation
  ((prompt + output) tokens * kv_bytes_per_token, held until it finishes, so nothing is ever
  preempted) fits the free KV, and the iteration's prefill tokens stay within
  max_batched_tokens. The first prefill of an iteration is always allowed, whatever its length,
  so a prompt longer than max_batched_tokens is still served (alone) and never starves.
- Admitted requests are prefilled in that iteration and emit their first token at its end;
  requests already running decode one token each. A request with output_tokens = n finishes
  at the end of its prefill iteration plus n - 1 decode iterations.
- With nothing running and nothing waiting the replica sleeps until a request is routed to it.

Two processes implement this and must give bit-identical records:

- reference (``fast=False``): one SimPy event per iteration, boundary = previous + cost.
- fast: a run of iterations in which the batch cannot change (tripath/simulator/loop/run.py: no finish
  before its end, and no admission possible) is advanced in one event. Its boundaries are a
  cumulative sum of the same per-iteration costs (added left to right: the same float
  additions as repeated ``now + cost``). A run ends at the first finish. While the queue is
  empty and the batch has room, an arrival could join at any boundary: the replica the router
  would pick now ends its run at the first boundary at or after the next arrival to the
  cluster; any other replica runs on, and if a request is routed to it after all, the router
  interrupts it and the run is cut at its first boundary at or after that instant — in both
  cases exactly the boundary where the reference admits the request. Runs that may be cut are
  evaluated at most _HORIZON iterations ahead, which bounds the work an interrupt wastes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Any

import numpy as np
import simpy

from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.clock import Clock
from tripath.simulator.loop.run import Run
from tripath.simulator.paths.seqpar import SpPhysics

_NEVER = 1 << 62  # more iterations than any run: "no finish pending"
# Iterations evaluated at once while watching for an arrival, at most: the first chunk is the iterations to the
# arrival at the first decode's cost and a few more (``_watch_chunk``), so one chunk mostly suffices and few are
# evaluated unused; a chunk that falls short is followed by one twice its size.
_FIRST_CHUNK = 256
_CHUNK_MARGIN = 4
# Longest run evaluated ahead when an interrupt may cut it: bounds the work an arrival wastes.
# Ending a run where nothing changes is harmless: the next run continues with the same floats.
_HORIZON = 2048


@dataclass(frozen=True)
class ReplicaConfig:
    """Batching limits and the KV budget of one replica."""

    max_batch_size: int
    max_batched_tokens: int
    kv_capacity_bytes: int
    kv_bytes_per_token: int

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_batched_tokens", "kv_bytes_per_token"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.kv_capacity_bytes < 0:
            raise ValueError(f"kv_capacity_bytes must be >= 0, got {self.kv_capacity_bytes}")


class Ledger:
    """Per-request lengths and the times the replicas fill in, indexed by position in the workload."""

    def __init__(self, prompts: Sequence[int], outputs: Sequence[int], kv_bytes_per_token: int,
                 merge: bool = False) -> None:
        n = len(prompts)
        self.prompt = list(prompts)
        self.output = list(outputs)
        self.reserve = [(p + o) * kv_bytes_per_token for p, o in zip(prompts, outputs, strict=True)]
        self.replica = [-1] * n
        self.admitted = [float("nan")] * n
        self.first_token = [float("nan")] * n
        self.finish = [float("nan")] * n
        self.merge_s = [0.0] * n if merge else None  # SP merge seconds over each request's iterations
        # told of every finish (closed-loop arrivals: tripath/simulator/loop/cluster.py); None: nobody listens
        self.on_finish: Callable[[int, float], None] | None = None

    def finished(self, request: int, end: float) -> None:
        """Record that ``request`` emitted its last token at ``end``, and tell whoever listens."""
        self.finish[request] = end
        if self.on_finish is not None:
            self.on_finish(request, end)


class Replica:
    """Continuous batching on one replica; the router calls ``enqueue`` and reads ``outstanding``."""

    def __init__(self, env: Clock, index: int, config: ReplicaConfig, cost: IterationCost, ledger: Ledger,
                 next_arrival: Callable[[], float], expects_next_arrival: Callable[[int], bool],
                 fast: bool = True, merge_ms: Callable[[Any, Any], Any] | None = None,
                 prefill_merge_ms: Callable[[Any], Any] | None = None) -> None:
        self.env = env
        # sequence parallelism's merge model (ms at a total context, elementwise over arrays, and the batch): its
        # time is already inside the cost model's prices; this only books it to the requests, like the loop does.
        # merge_ms prices a decode iteration's merge; prefill_merge_ms a prompt's (default: the same model)
        self._merge_ms = merge_ms
        self._prefill_merge_ms = prefill_merge_ms if prefill_merge_ms is not None else merge_ms
        self.index = index
        self.config = config
        self.cost = cost
        self.ledger = ledger
        self._next_arrival = next_arrival
        self._expects_next_arrival = expects_next_arrival
        self.queue: deque[int] = deque()
        self._running: list[tuple[int, int]] = []  # heap of (iteration count at which it finishes, request)
        self._iteration = 0  # iterations completed so far
        self._context = 0  # tokens held by the running sequences (prompt + generated so far)
        # padded decode attention (cost.block_tokens, the engine): the longest context prices a step. A
        # sequence admitted in iteration a holds prompt + (i - a) tokens at iteration i, so per request
        # prompt - a is kept and the longest is i + the largest of those (found once per run, O(batch)).
        self._pads = cost.block_tokens is not None
        self._offset: dict[int, int] = {}
        self.kv_used = 0
        self.peak_kv = 0
        self.routed = 0
        self.retired = 0
        self.busy_s = 0.0
        self.wakeups = 0
        self.runs = 0  # events waited on for iterations: one per iteration (reference) or per run (fast)
        self._busy_since: float | None = None
        self._wakeup: simpy.Event | None = None
        self._run: Run | None = None  # the fast path's current run, while an arrival may cut it short
        self._process = env.process(self._serve_fast() if fast else self._serve_reference())

    @property
    def outstanding(self) -> int:
        """Requests routed here and not yet finished (waiting or running)."""
        return self.routed - self.retired

    @property
    def iterations(self) -> int:
        return self._iteration

    def enqueue(self, request: int) -> None:
        self.queue.append(request)
        self.routed += 1
        if self._wakeup is not None:
            self._wakeup.succeed()  # at this instant, after the arrivals (URGENT) of the same instant
            self._wakeup = None
        elif self._run is not None:
            self._run = None
            self._process.interrupt()  # URGENT: the run stops at its first boundary at or after now

    def _serve_reference(self) -> Generator[simpy.Event, None, None]:
        """The plain model: one SimPy event per iteration."""
        while True:
            if not self._running and not self.queue:
                yield from self._sleep()
            start = self.env.now
            admitted = self._admit(start)
            keys = self._keys()
            if admitted:
                cost = self.cost.mixed_s([self.ledger.prompt[i] for i in admitted], len(self._running), keys)
            else:
                cost = self.cost.decode_s(len(self._running), np.array([keys]))[0]
                self.cost.count_decodes(len(self._running), keys, 1)
            end = float(start + cost)
            self.runs += 1
            yield self.env.at(end)
            self._complete(admitted, 1, end, end)

    def _serve_fast(self) -> Generator[simpy.Event, None, None]:
        """The same model advancing a whole run of unchanging iterations per event."""
        while True:
            if not self._running and not self.queue:
                yield from self._sleep()
            start = self.env.now
            admitted = self._admit(start)
            run = self._plan_run(start, admitted)
            self.runs += 1
            self._run = run if run.cuttable else None
            try:
                yield self.env.at(run.end)
            except simpy.Interrupt:  # a request was routed here mid-run: stop where it can join
                run.cut(self.env.now)
                yield self.env.at(run.end)
            self._run = None
            self.cost.count_run(run.batch, run.decode_context, run.decode_longest, run.iterations - run.mixed)
            self._complete(admitted, run.iterations, run.first_end, run.end)

    def _longest(self) -> int:
        """The largest context among the running sequences now (0 when none, or when nothing pads)."""
        if not self._pads or not self._running:
            return 0
        offset = self._offset
        return self._iteration + max(offset[request] for _, request in self._running)

    def _keys(self) -> int:
        """The S the running sequences' next decode step is priced at (IterationCost.keys)."""
        if not self._pads:
            return self._context
        return self.cost.keys(len(self._running), self._context, self._longest())

    def _sleep(self) -> Generator[simpy.Event, None, None]:
        if self._busy_since is not None:
            self.busy_s += self.env.now - self._busy_since
        self._wakeup = self.env.event()
        yield self._wakeup
        self._busy_since = self.env.now
        self.wakeups += 1

    def _admit(self, now: float) -> list[int]:
        """Admit waiting requests FCFS at this boundary; returns them in admission order."""
        queue = self.queue
        if not queue:
            return []
        ledger, config = self.ledger, self.config
        room = config.max_batch_size - len(self._running)
        free = config.kv_capacity_bytes - self.kv_used
        admitted: list[int] = []
        tokens = 0
        while queue and len(admitted) < room:
            request = queue[0]
            need = ledger.reserve[request]
            prompt = ledger.prompt[request]
            if need > free or (admitted and tokens + prompt > config.max_batched_tokens):
                break  # strict FCFS: nobody overtakes the head
            queue.popleft()
            free -= need
            tokens += prompt
            admitted.append(request)
            ledger.admitted[request] = now
        self.kv_used = config.kv_capacity_bytes - free
        self.peak_kv = max(self.peak_kv, self.kv_used)
        return admitted

    def _plan_run(self, start: float, admitted: list[int]) -> Run:
        """The run that starts now: up to the first finish, or where an arrival could join."""
        ledger, config, cost = self.ledger, self.config, self.cost
        running = self._running
        batch_before = len(running)
        batch = batch_before + len(admitted)
        limit = running[0][0] - self._iteration if running else _NEVER  # iterations to the first finish
        for request in admitted:
            limit = min(limit, ledger.output[request])
        open_to_arrivals = False
        if self.queue:
            fits = ledger.reserve[self.queue[0]] <= config.kv_capacity_bytes - self.kv_used
            if batch < config.max_batch_size and fits:
                limit = 1  # held back only by this iteration's token budget: admitted at the next boundary
        else:
            open_to_arrivals = batch < config.max_batch_size  # an arrival could join at any boundary
        # The replica the router would pick now stops at the next arrival; any other runs on and is
        # interrupted by the router if a request does come its way (Replica.enqueue).
        watch = open_to_arrivals and self._expects_next_arrival(self.index)
        next_arrival = self._next_arrival() if watch else math.inf
        longest = self._longest()
        run = Run(start, batch, self._context, longest)
        if admitted:
            prompts = [ledger.prompt[i] for i in admitted]
            growth = batch_before + sum(prompts) + len(admitted)  # a token per decode; prompt + first token
            keys = cost.keys(batch_before, self._context, longest) if self._pads else self._context
            # after it: the running ones hold a token more, the admitted ones prompt + their first token
            after = max(longest + 1 if batch_before else 0, max(prompts) + 1) if self._pads else 0
            run.add_mixed(cost.mixed_s(prompts, batch_before, keys), growth, after)
            if limit == 1 or run.end >= next_arrival:
                return run
        if not watch:
            limit = min(limit, run.iterations + _HORIZON)
        chunk = self._watch_chunk(run, next_arrival) if watch else limit - run.iterations
        while True:
            count = min(chunk, limit - run.iterations)
            if run.add_decodes(cost, count, next_arrival) or run.iterations == limit:
                run.cuttable = open_to_arrivals and not watch and run.iterations > 1
                return run
            chunk *= 2

    def _watch_chunk(self, run: Run, next_arrival: float) -> int:
        """Decodes to evaluate first while watching for ``next_arrival``: as many as fit before it at the first
        decode's cost (decode costs grow with the context, so rarely fewer than needed), a few more, at most
        _FIRST_CHUNK. Only how much is evaluated at once: the boundaries are the same floats whatever the chunks."""
        first_s = self.cost.decode_one_s(run.batch, run.decode_context)
        if not first_s > 0.0:
            return _FIRST_CHUNK
        gap = (next_arrival - run.end) / first_s
        return _FIRST_CHUNK if not gap < _FIRST_CHUNK else max(int(gap), 0) + _CHUNK_MARGIN

    def _complete(self, admitted: list[int], iterations: int, first_end: float, end: float) -> None:
        """Apply a finished run: first tokens, context growth, then retire whoever finished at ``end``."""
        ledger, running = self.ledger, self._running
        if self._merge_ms is not None:
            self._book_merge(admitted, iterations)
        start_iteration = self._iteration
        grown = len(running) * iterations
        for request in admitted:
            ledger.first_token[request] = first_end
            heappush(running, (start_iteration + ledger.output[request], request))
            grown += ledger.prompt[request] + iterations  # prompt + first token, then one per decode
            if self._pads:
                self._offset[request] = ledger.prompt[request] - start_iteration
        self._iteration = now_iteration = start_iteration + iterations
        self._context += grown
        while running and running[0][0] == now_iteration:
            _, request = heappop(running)
            ledger.finished(request, end)
            self.kv_used -= ledger.reserve[request]
            self._context -= ledger.prompt[request] + ledger.output[request]
            self._offset.pop(request, None)
            self.retired += 1
        if running and running[0][0] < now_iteration:
            # A planning bug, not bad input: a run must stop at its first finish.
            raise AssertionError(f"replica {self.index}: a run overshot a finish")

    def _book_merge(self, admitted: list[int], iterations: int) -> None:
        """Add the SP merge time of these iterations to every request in them (before _complete moves on).

        The same merge terms the transformed cost model priced: merge(S) per decode iteration at its total
        context S, merge(prompt) per admitted prompt. The loop adds them to a request iteration by
        iteration; here a run's sum is added once, so the two agree to float rounding, not bit for bit.
        """
        ledger, merge = self.ledger, self._merge_ms
        assert merge is not None and ledger.merge_s is not None
        before = [request for _, request in self._running]
        context = self._context
        total_ms = 0.0
        decodes = iterations
        if admitted:
            decodes -= 1
            if before:
                total_ms += float(merge(context, len(before)))
            prompts = [ledger.prompt[r] for r in admitted]
            prefill_merge = self._prefill_merge_ms
            assert prefill_merge is not None
            total_ms += sum(float(prefill_merge(p)) for p in prompts)
            context += len(before) + sum(prompts) + len(admitted)  # as Run.add_mixed's growth
        batch = len(before) + len(admitted)
        if decodes > 0:
            total_ms += float(np.sum(merge(np.arange(context, context + batch * decodes, batch), batch)))
        seconds = total_ms / 1000.0
        for request in (*before, *admitted):
            ledger.merge_s[request] += seconds


def fast_replicas(env: Clock, count: int, config: ReplicaConfig, cost: IterationCost, ledger: Any,
                  next_arrival: Callable[[], float], expects_next_arrival: Callable[[int], bool], fast: bool = True,
                  sp: SpPhysics | None = None) -> list[Replica]:
    """``count`` Replicas on one clock and ledger (a Ledger, or the streamed cluster's, used by request index), as
    both clusters build them; ``sp``: the SP physics inside an SP-transformed ``cost``, whose merge time the
    replicas book to the requests (decode merges at a total context, prefill merges per prompt)."""
    merge = None if sp is None else sp.decode_merge_array
    prefill_merge = None if sp is None else sp.merge_array
    return [Replica(env, i, config, cost, ledger, next_arrival, expects_next_arrival, fast, merge, prefill_merge)
            for i in range(count)]
