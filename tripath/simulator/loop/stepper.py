"""The simulator's one replica loop: any batching policy, preemption, any path physics, and the exact fast path.

Every replica of both clusters (tripath/simulator/loop/cluster.py, streaming.py) is a Stepper. Without a
RunBooking it advances one SimPy event per iteration (and fast-forwards decode-only stretches, below):

- At each iteration boundary the batching policy (tripath/simulator/loop/batching.py) admits waiting requests
  FCFS and chooses each prefill chunk; sequences whose prompt is complete decode.
- The StepModel (tripath/simulator/step_model.py; the paths' physics in tripath/simulator/paths/step.py) says
  what the iteration costs and how many tokens each decode emitted; a request finishes at the
  end of the iteration in which it emitted its output_tokens-th token.
- Memory is counted in tokens, by a memory policy (tripath/simulator/loop/memory.py), never a mode flag. With
  preemption = "none" a request reserves prompt + output at
  admission, so nothing is ever evicted. Otherwise it reserves only what it
  holds (prompt + emitted + the token the next iteration writes); when the next iteration would
  not fit, the most recently admitted sequence is evicted: "recompute" drops its KV and re-queues
  it at the head to re-prefill prompt + generated tokens; "swap" moves its KV to host memory over
  the device_host link and back in when re-admitted, the transfers stalling those iterations.

With the continuous policy, preemption "none" and BaselineStep, this loop performs the same
admissions and the same float operations as the fast path's reference (a RunBooking with ``single``), so its
records are bit for bit the fast path's (tests/simulator/loop/test_stepper_equivalence.py).

The exact fast path (``fast_forward``, with a RunBooking from tripath/simulator/loop/run.py; the clusters choose it
for the baseline and its compression / sequence-parallel cost transforms, continuous batching, preemption
"none"): every event is a run of iterations in which the batch cannot change, planned at its first boundary
(``_plan_run``): admissions first (a mixed first iteration, prefilling them while the others decode), then decodes
up to the first finish; with a request waiting that only this iteration's token budget held back, one iteration.
While the queue is empty and the batch has room an arrival could join at any boundary: the replica the router
would pick now (``RunBooking.expects``) stops at the first boundary at or after the cluster's next arrival; any
other runs on, and a request routed to it after all interrupts it, cutting the run at its first boundary at or
after that instant — in both cases where one event per iteration would admit it. A run counts one event in
``runs``, and with sequence parallelism its merge sum is added once per request (``RunBooking.merge_s``), so SP
records differ in the last bits from the per-iteration loop's (the records guard pins each mode). This path also
runs when someone listens to finishes (a closed loop), where the plain fast-forward below does not.

Fast-forward (StepperConfig.fast_forward, on by default): when nothing is queued and every running sequence
decodes, the policy has nothing to schedule (BatchPolicy), so with preemption "none" (nothing is ever evicted)
and no prefix cache the next iterations are decodes of the same batch until the first finish or until a request
is routed here. With a deterministic step model (BaselineStep.deterministic: the baseline and the compression /
sequence-parallel transformed ones; never speculation or tiering, which draw or keep tier state per iteration)
such a stretch is advanced in one SimPy event, as the exact fast path does: boundaries are a cumulative sum
of the same per-iteration costs (tripath/simulator/loop/run.py), the run ends at the first finish, and a request
routed here mid-run interrupts it, cutting it at the first boundary at or after that instant — where the
iteration-by-iteration loop would admit it. Per-request sums (merge time) are added iteration by iteration in
order, counters and ``runs`` advance by the run's iterations, so records and replica stats are bit for bit those
of the loop without it (tests/simulator/loop/test_stepper_fast_forward.py). Not with time series (a sample
could fall inside a run and read the live tokens of an iteration not yet stepped), and not when someone listens
to finishes (``Ledger.on_finish``: a closed loop's users, tripath/simulator/loop/cluster.py). A user may then send
a request at the very instant of a finish, routed while that instant's iteration boundaries are being handled
one replica after another: whether it sees a replica's boundary at that instant as passed (and which replicas
have retired their finishes) follows SimPy's order of same-instant events, which a run's single event does not
keep — the exact fast path differs from its reference there when boundaries tie exactly.

Admission (``admit_fcfs``) applies four rules in order, each its own check: batch room, KV (the memory policy's
need against the free tokens, or the prefix cache's blocks: ``_fit``), the iteration's token budget, and with
tiering the engine's device residency (``_device_admits``, through the StepModel's ``tiers``). An iteration's end
(``_complete``) is applied in steps: progress and emitted tokens (``_emit_speculative`` with speculation), the
per-request sums (``_book_sums``), first tokens (``_first_tokens``), reservations that grew (the memory policy),
retirements.

Beside the Stepper: its bookkeeping (PathLedger per request; SeqState per sequence, in
tripath/simulator/loop/sequence.py), the contract a
batching policy meets (BatchPolicy), and how a cluster configures its Steppers (StepperConfig: preemption
and swap cost; StepperSetup: per-replica physics and policy).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from heapq import heappop, heappush
from typing import Any, NamedTuple, Protocol

import numpy as np
import simpy

from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.clock import Clock
from tripath.simulator.loop.memory import Memory, memory_for
from tripath.simulator.loop.replica import Ledger
from tripath.simulator.loop.run import Run, RunBooking, decode_costs
from tripath.simulator.loop.sequence import Chunks, SeqState
from tripath.simulator.paths.prefix import PrefixCache, PrefixSetup
from tripath.simulator.scenario.scenario import PREEMPTION_MODES
from tripath.simulator.step_model import BaselineStep, DecodeBatch, PrefillChunk, StepModel, StepResult

# Fast-forward a stretch only when it is at least this many iterations: a run's numpy calls and bookkeeping cost
# about what 3-5 plain iterations do (~14 us each on bench_chunked's case), so shorter stretches are stepped one by
# one (either way the records are the same).
_MIN_RUN = 4
# Iterations evaluated ahead at once: a request routed here mid-run wastes at most this many; a stretch longer
# than this ends after it and the next run continues with the same floats.
_HORIZON = 2048
_NEVER = 1 << 62  # more iterations than any run: "no finish pending"
# A watched run evaluates at most this many decodes first: the iterations to the arrival at the first decode's cost
# and a few more (``_watch_chunk``), so one chunk mostly suffices; a chunk that falls short is followed by one
# twice its size.
_FIRST_CHUNK = 256
_CHUNK_MARGIN = 4


class PathLedger(Ledger):
    """The Ledger plus the per-path sums the records carry (tripath/core/records.py)."""

    def __init__(self, prompts: Sequence[int], outputs: Sequence[int], kv_bytes_per_token: int,
                 tasks: Sequence[int]) -> None:
        super().__init__(prompts, outputs, kv_bytes_per_token)
        n = len(prompts)
        self.task = list(tasks)
        self.arrival = [math.nan] * n  # when it was routed (its arrival): policies' wait windows start here
        self.draft_rounds = [0] * n
        self.accepted = [0] * n
        self.paging_s = [0.0] * n
        self.merge_s = [0.0] * n
        self.preemptions = [0] * n


class Iteration(NamedTuple):
    """An iteration ``Stepper.begin`` started: its prefill chunks, decodes, the model's answer, swap / load stall
    seconds, and its length in seconds (the model's plus the stall)."""

    prefills: Chunks
    decodes: list[SeqState]
    result: StepResult
    swap_s: float
    seconds: float


class Stretch(NamedTuple):
    """A fast-forwarded stretch as ``Stepper.open_stretch`` found it: the sequences decoding (the running ones, in
    order), their Σ context and longest context (0 unless attention is padded), and the cost that prices them."""

    decodes: list[SeqState]
    total: int
    longest: int
    cost: IterationCost

    def costs(self, count: int) -> np.ndarray:
        """Seconds of the stretch's first ``count`` iterations (tripath/simulator/loop/run.py: decode_costs)."""
        return decode_costs(self.cost, len(self.decodes), self.total, self.longest, count)


class BatchPolicy(Protocol):
    """Which waiting requests join at an iteration boundary, and each prefill chunk
    (tripath/simulator/loop/batching.py has the policies).

    With nothing queued and every running sequence decoding, ``schedule`` must return no chunks and change
    nothing: fast-forward skips calling it at the boundaries inside a run (module docstring).
    """

    def schedule(self, stepper: Stepper, now: float) -> Chunks:
        """Admit through ``stepper.admit_fcfs`` and return this iteration's prefill chunks."""
        ...

    def next_look(self, stepper: Stepper, now: float) -> float:
        """With nothing to run: when a wait window expires (inf: only an arrival changes anything)."""
        ...

    def observe(self, stepper: Stepper, request: int, finish: float) -> None:
        """A request finished at ``finish``."""
        ...


@dataclass(frozen=True)
class StepperConfig:
    """What the loop needs besides the policy: preemption mode, the cost of swapping KV bytes, and whether
    decode-only stretches may be advanced in one event where that is exact (module docstring: fast-forward;
    off, every iteration is its own event: the reference the tests compare it with)."""

    preemption: str = "none"
    swap_s: Callable[[int], float] | None = None  # seconds to move this many KV bytes one way (swap only)
    fast_forward: bool = True

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
    prefix: PrefixSetup | None = None  # prefix caching (tripath/simulator/paths/prefix.py): a cache per replica

    def __post_init__(self) -> None:
        interval = self.timeseries_interval_s
        if interval is not None and not (math.isfinite(interval) and interval > 0):
            raise ValueError(f"timeseries_interval_s must be > 0, got {interval}")
        if interval is not None and self.config.fast_forward:  # samples read state between any two boundaries
            object.__setattr__(self, "config", replace(self.config, fast_forward=False))

    def task_indexes(self, tasks: Sequence[str]) -> list[int]:
        index = {name: i for i, name in enumerate(self.task_names)}
        for name in tasks:
            index.setdefault(name, len(index))
        return [index[name] for name in tasks]


class Stepper:
    """One replica; the router calls ``enqueue`` and reads ``outstanding``."""

    def __init__(self, env: Clock, index: int, model: StepModel, policy: BatchPolicy, ledger: PathLedger,
                 config: StepperConfig | None = None, prefix: PrefixCache | None = None,
                 booking: RunBooking | None = None, wake_group: Callable[[], None] | None = None) -> None:
        self.env = env
        self.index = index
        self.model = model
        self.policy = policy
        self.ledger = ledger
        self.config = config or StepperConfig()
        self.memory: Memory = memory_for(self.config.preemption)  # what a sequence reserves; whether it is evicted
        self.capacity = model.kv_capacity_tokens
        self.tiers = model.tiers  # tiered KV: the engine's device residency rule also bounds who runs
        self.queue: deque[int] = deque()  # requests waiting (preempted ones at the head)
        self.waiting: dict[int, SeqState] = {}  # preempted sequences by request, while queued
        self.running: list[SeqState] = []  # in admission order
        self.used = 0  # KV tokens reserved by the running sequences
        self.peak_tokens = 0
        self.routed = self.retired = self.wakeups = self.runs = self.preempted = 0
        self.busy_s = 0.0
        self.batch_size = 0  # sequences in the iteration in progress (time series)
        self.paging_bytes: dict[str, int] = {}  # cumulative bytes per link (time series)
        # prefix caching: admission and memory by its block index (preemption "none" only: stepper_setup checks)
        self.prefix = prefix
        self._iteration = 0
        self._admit_count = 0
        self._busy_since: float | None = None
        self._wakeup: simpy.Event | None = None
        # a lockstep rank (tripath/simulator/loop/lockstep.py): its group runs its iterations (``begin`` / ``end``,
        # or a fast-forwarded stretch: ``open_stretch`` / ``close_stretch``) and is woken by a routed request; it has
        # no process of its own
        self._wake_group = wake_group
        if wake_group is not None and booking is not None:
            raise ValueError("a lockstep rank's group steps it: no RunBooking")
        self._fast_path(booking)
        if wake_group is None:
            self._process = env.process(self._serve() if self._booking is None else self.fast_forward())

    def _fast_path(self, booking: RunBooking | None) -> None:
        """Fast-forward's state: the model whose runs may be advanced at once (None: never), the exact fast path's
        booking policy (RunBooking: every event a planned run, the clusters' baseline) and its running totals (Σ
        context; finishes as a heap of (iteration, admission, sequence); with padded attention each sequence's
        prompt - admission iteration, its context being that + the iteration), the run in progress (while a routed
        request may cut it), and how many decode-only runs and iterations fast-forward advanced."""
        model = self.model
        exact = (self.config.fast_forward and not self.memory.evicts and self.prefix is None) or booking is not None
        runs = exact and isinstance(model, BaselineStep) and model.deterministic
        self._runs: BaselineStep | None = model if runs and isinstance(model, BaselineStep) else None
        self._booking = booking if self._runs is not None else None
        self._held = 0
        self._finishes: list[tuple[int, int, SeqState]] = []
        self._offsets: dict[SeqState, int] = {}
        self._pads = self._runs is not None and self._runs.cost.block_tokens is not None
        self._run: Run | None = None
        self.forward_runs = self.forwarded = 0

    @property
    def outstanding(self) -> int:
        return self.routed - self.retired

    @property
    def iterations(self) -> int:
        return self._iteration

    @property
    def busy(self) -> bool:
        return self._busy_since is not None

    @property
    def peak_kv(self) -> int:
        """Peak KV bytes reserved on this replica (ReplicaStats.peak_kv_bytes)."""
        return self.peak_tokens * self.model.kv_bytes_per_token

    def enqueue(self, request: int) -> None:
        self.queue.append(request)
        self.ledger.arrival[request] = self.env.now
        self.routed += 1
        self._wake()

    def _wake(self) -> None:
        if self._wake_group is not None:
            self._wake_group()
        elif self._wakeup is not None:
            self._wakeup.succeed()  # at this instant, after the arrivals (URGENT) of the same instant
            self._wakeup = None
        elif self._run is not None:
            self._run = None
            self._process.interrupt()  # URGENT: the run stops at its first boundary at or after now

    # ---- admission, used by the policies -------------------------------------------------------

    def sequence_for(self, request: int) -> SeqState:
        """The waiting request's progress (a preempted one keeps its emitted tokens)."""
        seq = self.waiting.get(request)
        if seq is None:
            ledger = self.ledger
            seq = SeqState(request, ledger.prompt[request], ledger.output[request], ledger.task[request])
        return seq

    def need_tokens(self, seq: SeqState) -> int:
        """KV tokens admitting ``seq`` reserves now (the memory policy's rule)."""
        return self.memory.need(seq)

    def free_tokens(self) -> int:
        """KV tokens an admission may take now, after the running sequences' next writes."""
        return self.capacity - self.used - self.memory.next_writes(self.running)

    def admit_fcfs(self, now: float, room: int, token_budget: float, first_always: bool = True) -> list[SeqState]:
        """Pop waiting requests FCFS while there is room, KV fits and their prefill stays within the budget.

        The first prefill is always allowed by the budget (``first_always``), so a
        prompt longer than the budget is served alone rather than starving. Strict FCFS: nobody
        overtakes a head that does not fit. Four rules, each its own check: batch room (``room``), KV
        (``_fit``: the memory policy's need against the free tokens, or the prefix cache's blocks), the token
        budget, and with tiering the engine's device residency (``_device_admits``).
        """
        queue, admitted = self.queue, []
        free = self.free_tokens()
        tokens = 0
        while queue and len(admitted) < room:
            seq = self.sequence_for(queue[0])
            need = self.memory.need(seq)
            fit = self._fit(seq, need, free)
            if fit is None:
                break
            prefill, plan = fit
            if tokens + prefill > token_budget and (admitted or not first_always):
                break
            if self.tiers is not None and not self._device_admits(need):
                break
            self._take(seq, need, plan, now)
            free -= need
            tokens += prefill
            admitted.append(seq)
        held = self.used if self.prefix is None else self.prefix.occupied_tokens()  # shared blocks counted once
        self.peak_tokens = max(self.peak_tokens, held)
        return admitted

    def _fit(self, seq: SeqState, need: int, free: int) -> tuple[int, Any] | None:
        """(prompt tokens ``seq`` prefills this iteration, its prefix-cache plan or None) when its KV fits, else None.

        Without a prefix cache it fits when ``need`` <= ``free``; with one, its blocks decide (PrefixCache.plan,
        which changes nothing) and a hit's prefill is only the uncached suffix. A swapped-in sequence prefills
        nothing: its KV comes back whole.
        """
        prefill = 0 if seq.swapped else seq.target
        if self.prefix is None:
            return (prefill, None) if need <= free else None
        plan = self.prefix.plan(seq.request, seq.prompt, need)
        if plan is None:
            return None
        return prefill - plan.start_tokens, plan

    def _device_admits(self, need: int) -> bool:
        """Tiered KV: whether the running sequences plus one reserving ``need`` keep the engine's device residency
        rule (tripath/simulator/paths/tiered.py: TierPhysics.device_fits); always without tiers."""
        tiers = self.tiers
        return tiers is None or tiers.device_fits([s.reserved for s in self.running] + [need])

    def _take(self, seq: SeqState, need: int, plan: Any, now: float) -> None:
        """Admit the queue's head ``seq``: it reserves ``need`` tokens (its prefix ``plan`` committed) and runs."""
        self.queue.popleft()
        self.waiting.pop(seq.request, None)
        if plan is not None:
            assert self.prefix is not None
            seq.prefilled = self.prefix.commit(seq.request, seq.prompt, plan)
        seq.reserved = need
        self._admit_count += 1
        seq.admit_order = self._admit_count
        if math.isnan(self.ledger.admitted[seq.request]):  # a re-admitted (preempted) one keeps its first
            self.ledger.admitted[seq.request] = now
        self.used += need
        self.running.append(seq)

    # ---- the loop ------------------------------------------------------------------------------

    def _serve(self) -> Generator[simpy.Event, None, None]:
        env = self.env
        while True:
            if not self.running and not self.queue:
                yield from self._idle(math.inf)
            start = env.now
            if self._runs is not None:
                stretch = self.stretch()
                if stretch >= _MIN_RUN:
                    yield from self._fast_forward(start, stretch)
                    continue
            iteration = self.begin(start)
            if iteration is None:
                yield from self._idle(self.policy.next_look(self, start))
                continue
            end = float(start + iteration.seconds)
            yield env.at(end)
            self.end(iteration, end)

    def begin(self, start: float) -> Iteration | None:
        """Start the iteration at boundary ``start``: preempt where memory runs out, admit and chunk (the policy),
        swap and prefix loads, and ask the model what it costs; None when nothing runs (a wait window, or a queue
        whose head does not fit yet)."""
        evicts = self.memory.evicts
        swap_s = self._preempt() if evicts else 0.0
        prefills = self.policy.schedule(self, start)
        if not self.running:
            self.batch_size = 0
            return None
        if evicts:
            swap_s += self._swap_in()
        if self.prefix is not None:
            swap_s += self._prefix_loads()
        decodes, result = self._step(prefills)
        seconds = result.seconds
        if swap_s:
            seconds = seconds + swap_s
        self.runs += 1
        self.batch_size = len(prefills) + len(decodes)
        return Iteration(prefills, decodes, result, swap_s, seconds)

    def end(self, iteration: Iteration, end: float) -> None:
        """Apply the iteration ``begin`` started, which ended at ``end``."""
        self._iteration += 1
        self._complete(iteration.prefills, iteration.decodes, iteration.result, iteration.swap_s, end)

    def _step(self, prefills: Chunks) -> tuple[list[SeqState], StepResult]:
        """Ask the model for this iteration: the chunks, every prefilled sequence's decode, live tokens."""
        chunks = [PrefillChunk(s.request, s.task, n, s.prefilled, s.prefilled + n >= s.target)
                  for s, n in prefills.items()]
        if self.prefix is not None:  # the chunks' full blocks are findable from this iteration on
            for s, n in prefills.items():
                self.prefix.scheduled(s.request, s.prefilled + n)
        # The loop's hot spot: one pass, no property calls, no object per sequence (a DecodeBatch of lists;
        # a single loop beats one comprehension per field at the small batches most iterations have).
        decodes: list[SeqState] = []
        requests: list[int] = []
        tasks: list[int] = []
        contexts: list[int] = []
        remaining: list[int] = []
        total = live = 0
        for s in self.running:
            if s.prefilled >= s.target:
                context = s.prompt + s.emitted
                decodes.append(s)
                requests.append(s.request)
                tasks.append(s.task)
                contexts.append(context)
                remaining.append(s.output - s.emitted)
                total += context
            else:
                live += s.prefilled
        batch = DecodeBatch(requests, tasks, contexts, remaining, total)
        return decodes, self.model.step(chunks, batch, live + total)

    def stretch(self) -> int:
        """Decode-only iterations fast-forward may advance from this boundary, up to the first finish (module
        docstring); 0 where it may not (a model it cannot advance, a queue, a sequence still prefilling, someone
        listening to finishes); more than any run (``_NEVER``) with nothing running."""
        if self._runs is None or self.queue or self.ledger.on_finish is not None:
            return 0
        return self._decode_stretch()

    def _decode_stretch(self) -> int:
        """Iterations to the first finish when every running sequence decodes (0 when one still prefills).

        Looked for from the end: a sequence still prefilling is most often among the latest admitted.
        """
        running = self.running
        for s in reversed(running):
            if s.prefilled < s.target:
                return 0
        return min([s.output - s.emitted for s in running], default=_NEVER)

    def _fast_forward(self, start: float, stretch: int) -> Generator[simpy.Event, None, None]:
        """Advance the decode-only iterations up to the first finish (``stretch`` away) in one event, or fewer
        when a request is routed here meanwhile (module docstring), then book them as one by one."""
        opened = self.open_stretch()
        run = Run(start, len(opened.decodes), opened.total, opened.longest)
        run.add_decodes(opened.cost, min(stretch, _HORIZON), math.inf)
        self._run = run
        yield from run.wait(self.env)
        self._run = None
        self.close_stretch(opened, run.iterations, run.end)

    def open_stretch(self) -> Stretch:
        """Start a fast-forwarded stretch (``stretch`` > 0): the running sequences, all decoding, as it finds them."""
        model = self._runs
        assert model is not None
        decodes = list(self.running)
        contexts = [s.prompt + s.emitted for s in decodes]
        longest = max(contexts) if model.cost.block_tokens is not None else 0
        self.batch_size = len(decodes)
        return Stretch(decodes, sum(contexts), longest, model.cost)

    def close_stretch(self, stretch: Stretch, n: int, end: float) -> None:
        """Book the stretch's first ``n`` iterations, ended at ``end``, as one by one: counters, the model's
        accounting, merge sums, emitted tokens, then retire whoever finished."""
        model = self._runs
        assert model is not None
        decodes, total, longest = stretch.decodes, stretch.total, stretch.longest
        batch = len(decodes)
        self.runs += n  # one per iteration, as without fast-forward: ReplicaStats do not depend on it
        self._iteration += n
        self.forward_runs += 1
        self.forwarded += n
        model.ran_decodes(batch, total, longest, n)
        merges = model.decode_merge_s(batch, np.arange(total, total + batch * n, batch))
        if merges is not None:
            self._book_merges(decodes, merges)
        for s in decodes:
            s.emitted += n
        self._retire([s for s in decodes if s.emitted >= s.output], end)

    def fast_forward(self) -> Generator[simpy.Event, None, None]:
        """The exact fast path's loop (a RunBooking), the Stepper's process in place of ``_serve``: at each boundary
        admit, plan the run that starts now (``_plan_run``), wait for its end (cut short where a request routed here
        can join: Run.cut) and book it as one event (``_book_run``). One generator, the wait inline: a frame fewer
        per event than delegating to ``_serve`` or ``Run.wait``."""
        env, model = self.env, self._runs
        assert model is not None
        while True:
            if not self.running and not self.queue:
                yield from self._idle(math.inf)
            start = env.now
            before, held = len(self.running), self._held
            admitted = self._admit_whole(start) if self.queue else []
            run = self._plan_run(start, before, held, admitted)
            self.runs += 1
            self.batch_size = run.batch
            self._run = run if run.cuttable else None
            try:
                yield env.at(run.end)
            except simpy.Interrupt:  # a request was routed here mid-run: stop where it can join
                run.cut(env.now)
                yield env.at(run.end)
            self._run = None
            model.ran_decodes(run.batch, run.decode_context, run.decode_longest, run.iterations - run.mixed)
            self._book_run(before, held, admitted, run)

    def _admit_whole(self, now: float) -> list[SeqState]:
        """``admit_fcfs`` for the exact fast path (continuous batching, preemption "none", no prefix cache, no tiers):
        the same rules in the same order — room, prompt + output within the free KV tokens, the token budget with the
        first prompt always allowed — on the ledger's lengths, a SeqState made only for whom it admits."""
        booking, ledger, queue = self._booking, self.ledger, self.queue
        assert booking is not None
        prompts, outputs = ledger.prompt, ledger.output
        room = booking.max_batch_size - len(self.running)
        free = self.capacity - self.used
        admitted: list[SeqState] = []
        tokens = 0
        while queue and len(admitted) < room:
            request = queue[0]
            prompt = prompts[request]
            need = prompt + outputs[request]
            if need > free or (admitted and tokens + prompt > booking.max_batched_tokens):
                break  # strict FCFS: nobody overtakes the head
            seq = SeqState(request, prompt, outputs[request], 0)
            self._take(seq, need, None, now)
            free -= need
            tokens += prompt
            admitted.append(seq)
        self.peak_tokens = max(self.peak_tokens, self.used)
        return admitted

    def _plan_run(self, start: float, before: int, held: int, admitted: list[SeqState]) -> Run:
        """The run that starts now: up to the first finish, or where an arrival could join (RunBooking's rules)."""
        booking, cost = self._booking, self.model.cost
        assert booking is not None
        limit, watch, open_to_arrivals = self._run_limit(admitted)
        next_arrival = booking.next_arrival() if watch else math.inf
        pads = self._pads
        longest = self._iteration + max(self._offsets.values()) if pads and before else 0
        run = Run(start, len(self.running), held, longest)
        if admitted:
            prompts = [s.prompt for s in admitted]
            keys = cost.keys(before, held, longest) if pads else held
            # after it: the running ones hold a token more, the admitted ones prompt + their first token
            after = max(longest + 1 if before else 0, max(prompts) + 1) if pads else 0
            run.add_mixed(cost.mixed_s(prompts, before, keys), before + sum(prompts) + len(admitted), after)
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

    def _run_limit(self, admitted: list[SeqState]) -> tuple[int, bool, bool]:
        """(iterations to the first finish, or 1 where the queue's head waits only for this iteration's token
        budget; whether to stop at the cluster's next arrival: open to it, and the router would pick this one;
        whether an arrival could join at any boundary: nothing queued and room in the batch)."""
        booking = self._booking
        assert booking is not None
        if booking.single:
            return 1, False, False
        finishes = self._finishes
        limit = finishes[0][0] - self._iteration if finishes else _NEVER
        for s in admitted:
            limit = min(limit, s.output)
        room = len(self.running) < booking.max_batch_size
        if self.queue:
            head, ledger = self.queue[0], self.ledger  # its need: prompt + output (preemption "none")
            if room and ledger.prompt[head] + ledger.output[head] <= self.capacity - self.used:
                limit = 1  # held back only by this iteration's token budget: admitted at the next boundary
            return limit, False, False
        return limit, room and booking.expects(self.index), room

    def _watch_chunk(self, run: Run, next_arrival: float) -> int:
        """Decodes to evaluate first while watching for ``next_arrival``: as many as fit before it at the first
        decode's cost, a few more, at most _FIRST_CHUNK (only how much is evaluated at once: the same floats)."""
        first_s = self.model.cost.decode_one_s(run.batch, run.decode_context)
        if not first_s > 0.0:
            return _FIRST_CHUNK
        gap = (next_arrival - run.end) / first_s
        return _FIRST_CHUNK if not gap < _FIRST_CHUNK else max(int(gap), 0) + _CHUNK_MARGIN

    def _book_run(self, before: int, held: int, admitted: list[SeqState], run: Run) -> None:
        """Apply a finished run: its merge sum (one addition per request), first tokens, the totals, then retire
        whoever finished at its end (a running sequence's progress is its finish iteration here, not ``emitted``)."""
        booking, n, start = self._booking, run.iterations, self._iteration
        assert booking is not None
        if booking.merge_ms is not None:
            seconds = booking.merge_s(held, before, [s.prompt for s in admitted], n)
            merge_s = self.ledger.merge_s
            for s in self.running:
                merge_s[s.request] += seconds
        first_token, finishes, pads = self.ledger.first_token, self._finishes, self._pads
        grown = before * n
        for s in admitted:
            s.prefilled = s.target
            first_token[s.request] = run.first_end
            heappush(finishes, (start + s.output, s.admit_order, s))
            grown += s.prompt + n  # prompt + first token, then one per decode
            if pads:
                self._offsets[s] = s.prompt - start
        self._iteration = now = start + n
        self._held += grown
        done = []
        while finishes and finishes[0][0] == now:
            s = heappop(finishes)[2]
            s.emitted = s.output
            self._held -= s.prompt + s.output
            if pads:
                del self._offsets[s]
            done.append(s)
        self._retire(done, run.end)

    def _book_merges(self, decodes: list[SeqState], merges: np.ndarray) -> None:
        """Add each iteration's merge seconds to every sequence in it, one addition per iteration in order, as
        ``_book_sums`` does: np.add.accumulate adds left to right, so each sum is the same float (adding a 0.0 that
        ``_book_sums`` skips changes nothing: the sums start at +0.0)."""
        merge_s = self.ledger.merge_s
        table = np.empty((len(decodes), len(merges) + 1))
        table[:, 0] = [merge_s[s.request] for s in decodes]
        table[:, 1:] = merges
        for s, total in zip(decodes, np.add.accumulate(table, axis=1)[:, -1].tolist(), strict=True):
            merge_s[s.request] = total

    def _idle(self, until: float) -> Generator[simpy.Event, None, None]:
        """Wait for a routed request (or, for a wait window, until ``until``), not busy meanwhile."""
        self.rest()
        self._wakeup = wakeup = self.env.event()
        yield self.env.until(wakeup, until)
        self._wakeup = None  # (a wake-up already cleared it)
        self.resume()

    def rest(self) -> None:
        """Nothing to run from now: the busy time so far is counted (ReplicaStats.busy_s)."""
        if self._busy_since is not None:
            self.busy_s += self.env.now - self._busy_since
            self._busy_since = None

    def resume(self, wakeup: bool = True) -> None:
        """Busy again from now; ``wakeup``: counted as a wake-up event (a lockstep group counts its own once)."""
        self._busy_since = self.env.now
        if wakeup:
            self.wakeups += 1

    def _complete(self, prefills: Chunks, decodes: list[SeqState], result: StepResult,
                  swap_s: float, end: float) -> None:
        """Apply the iteration that ended at ``end``: progress, the per-request sums, first tokens, reservations that
        grew, then retire whoever emitted its last token."""
        for s, n in prefills.items():
            s.prefilled += n
        if result.rounds is None or result.accepted is None:  # one call fewer in the hot plain iteration
            for s, n in zip(decodes, result.emitted.tolist(), strict=True):
                s.emitted += n
        else:
            self._emit_speculative(decodes, result)
        for link, nbytes in result.paging_bytes.items():
            self.paging_bytes[link] = self.paging_bytes.get(link, 0) + nbytes
        members = [*prefills, *decodes]
        paging = result.paging_s + swap_s  # swaps stall the whole iteration, like the tiers' paging
        if paging or result.merge_s:  # (the checks here spare the hot decode-only iteration two calls)
            self._book_sums(members, paging, result.merge_s)
        if prefills:
            self._first_tokens(prefills, end)
        done = [s for s in members if s.emitted >= s.output]
        if self.memory.evicts:
            self.used += self.memory.grow(members)
            self.peak_tokens = max(self.peak_tokens, self.used)
        self._retire(done, end)

    def _emit_speculative(self, decodes: list[SeqState], result: StepResult) -> None:
        """Add each decode's emitted tokens, draft rounds and accepted tokens (a speculative iteration)."""
        assert result.rounds is not None and result.accepted is not None
        rounds, accepted = self.ledger.draft_rounds, self.ledger.accepted
        for s, n, r, a in zip(decodes, result.emitted.tolist(), result.rounds.tolist(), result.accepted.tolist(),
                              strict=True):
            s.emitted += n
            rounds[s.request] += r
            accepted[s.request] += a

    def _book_sums(self, members: list[SeqState], paging: float, merge: float) -> None:
        """Add the iteration's paging stall and merge seconds to every request in it: one addition per iteration
        it was in, in order, so the sums are the same floats whatever the loop (adding 0.0 would change nothing,
        so it is skipped)."""
        if paging:
            paging_s = self.ledger.paging_s
            for s in members:
                paging_s[s.request] += paging
        if merge:
            merge_s = self.ledger.merge_s
            for s in members:
                merge_s[s.request] += merge

    def _first_tokens(self, prefills: Chunks, end: float) -> None:
        """A prompt (or a recompute) that completed emits one token; a request's first one is its first token."""
        first_token = self.ledger.first_token
        for s in prefills:
            if s.prefilled >= s.target:
                s.emitted += 1
                if math.isnan(first_token[s.request]):
                    first_token[s.request] = end

    def _retire(self, done: list[SeqState], end: float) -> None:
        """The sequences that emitted their last token at ``end`` leave: their KV is freed, the policy told."""
        ledger = self.ledger
        for s in done:
            ledger.finished(s.request, end)
            self.running.remove(s)
            self.used -= s.reserved
            if self.prefix is not None:
                self.prefix.finish(s.request)
            self.retired += 1
            self.policy.observe(self, s.request, end)

    # ---- preemption: evict, recompute or swap KV when memory runs out ------------------------------

    def _preempt(self) -> float:
        """Evict the most recently admitted sequences until the next iteration's growth fits.

        Every running sequence writes at most one more token than it has reserved in the next
        iteration (a decode's token; a prefill's chunk was reserved at admission with its first
        token). Returns the seconds of swap-out transfers this causes.
        """
        seconds = 0.0
        while self.running and (self.used + self.memory.next_writes(self.running) > self.capacity
                                or self._device_over()):
            victim = max(self.running, key=lambda s: s.admit_order)
            if len(self.running) == 1:
                break  # alone it fits by the router's rule (prompt + output <= capacity)
            seconds += self._evict(victim)
        return seconds

    def _device_over(self) -> bool:
        """Tiered KV: whether the running sequences, after the next iteration's writes, break the
        engine's device residency rule (tripath/simulator/paths/tiered.py), so one must go."""
        if self.tiers is None:
            return False
        return not self.tiers.device_fits([max(s.reserved, s.context + 1) if s.decoding else s.reserved
                                      for s in self.running])

    def _evict(self, seq: SeqState) -> float:
        self.running.remove(seq)
        self.used -= seq.reserved
        seq.reserved = 0
        self.ledger.preemptions[seq.request] += 1
        self.preempted += 1
        seconds = 0.0
        if self.memory.swaps and seq.decoding:
            seq.swapped = True
            seconds = self._transfer(seq)
            self.ledger.paging_s[seq.request] += seconds  # its own way out (it is not in the iteration)
        else:  # recompute: re-prefill prompt + generated tokens when re-admitted
            seq.swapped = False
            seq.target = seq.context
            seq.prefilled = 0
        self.waiting[seq.request] = seq
        self.queue.appendleft(seq.request)
        return seconds

    def _transfer(self, seq: SeqState) -> float:
        """Seconds to move ``seq``'s KV one way over device_host (the iteration stalls for them)."""
        nbytes = seq.context * self.model.kv_bytes_per_token
        assert self.config.swap_s is not None
        seconds = float(self.config.swap_s(nbytes))
        self.paging_bytes["device_host"] = self.paging_bytes.get("device_host", 0) + nbytes
        return seconds

    def _swap_in(self) -> float:
        """Bring back the KV of swapped sequences just re-admitted: they decode in this iteration."""
        seconds = 0.0
        for seq in self.running:
            if seq.swapped:
                seq.swapped = False
                seconds += self._transfer(seq)
        return seconds

    def _prefix_loads(self) -> float:
        """Seconds of the prefix blocks just admitted hits loaded back from host / SSD (they stall the iteration)."""
        assert self.prefix is not None
        seconds, moved = self.prefix.take_load()
        for link, nbytes in moved.items():
            self.paging_bytes[link] = self.paging_bytes.get(link, 0) + nbytes
        return seconds
