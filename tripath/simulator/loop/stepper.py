"""The general replica: one SimPy event per iteration, any batching policy, preemption, any path physics.

tripath/simulator/loop/replica.py keeps the exact fast path for the baseline (continuous batching, nothing
preempted, one token per decode). Everything else runs here, one event per iteration:

- At each iteration boundary the batching policy (tripath/simulator/loop/batching.py) admits waiting requests
  FCFS and chooses each prefill chunk; sequences whose prompt is complete decode.
- The StepModel (tripath/simulator/step_model.py; the paths' physics in tripath/simulator/paths/step.py) says
  what the iteration costs and how many tokens each decode emitted; a request finishes at the
  end of the iteration in which it emitted its output_tokens-th token.
- Memory is counted in tokens. With preemption = "none" a request reserves prompt + output at
  admission, as replica.py does, so nothing is ever evicted. Otherwise it reserves only what it
  holds (prompt + emitted + the token the next iteration writes); when the next iteration would
  not fit, the most recently admitted sequence is evicted: "recompute" drops its KV and re-queues
  it at the head to re-prefill prompt + generated tokens; "swap" moves its KV to host memory over
  the device_host link and back in when re-admitted, the transfers stalling those iterations.

With the continuous policy, preemption "none" and BaselineStep, this loop performs the same
admissions and the same float operations as replica.py's reference process, so its records are
bit for bit the fast path's (tests/simulator/loop/test_stepper_equivalence.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

import simpy

from tripath.simulator.loop.clock import Clock
from tripath.simulator.loop.path_ledger import PathLedger, SeqState
from tripath.simulator.loop.preemption import Preemption
from tripath.simulator.loop.stepper_config import PREEMPTION_MODES, StepperConfig, StepperSetup
from tripath.simulator.step_model import DecodeBatch, PrefillChunk, StepModel, StepResult

if TYPE_CHECKING:
    from tripath.simulator.loop.batching import BatchPolicy

__all__ = ["PREEMPTION_MODES", "PathLedger", "SeqState", "Stepper", "StepperConfig", "StepperSetup"]


class Stepper(Preemption):
    """One replica; the router calls ``enqueue`` and reads ``outstanding`` (as for replica.Replica)."""

    def __init__(self, env: Clock, index: int, model: StepModel, policy: BatchPolicy, ledger: PathLedger,
                 config: StepperConfig | None = None) -> None:
        self.env = env
        self.index = index
        self.model = model
        self.policy = policy
        self.ledger = ledger
        self.config = config or StepperConfig()
        self.reserve_output = self.config.preemption == "none"
        self.capacity = model.kv_capacity_tokens
        # tiered KV: the engine's device residency rule also bounds who runs (TierPhysics.device_fits)
        tiers = getattr(model, "tiers", None)
        self._device_fits: Callable[[list[int]], bool] | None = None if tiers is None else tiers.device_fits
        self.queue: deque[int] = deque()  # requests waiting (preempted ones at the head)
        self.waiting: dict[int, SeqState] = {}  # preempted sequences by request, while queued
        self.running: list[SeqState] = []  # in admission order
        self.used = 0  # KV tokens reserved by the running sequences
        self.peak_tokens = 0
        self.routed = 0
        self.retired = 0
        self.busy_s = 0.0
        self.wakeups = 0
        self.runs = 0
        self.preempted = 0
        self.batch_size = 0  # sequences in the iteration in progress (time series)
        self.paging_bytes: dict[str, int] = {}  # cumulative bytes per link (time series)
        self._iteration = 0
        self._admit_count = 0
        self._busy_since: float | None = None
        self._wakeup: simpy.Event | None = None
        self._process = env.process(self._serve())

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
        """Peak KV bytes reserved on this replica (what replica.Replica.peak_kv reports)."""
        return self.peak_tokens * self.model.kv_bytes_per_token

    def enqueue(self, request: int) -> None:
        self.queue.append(request)
        self.ledger.arrival[request] = self.env.now
        self.routed += 1
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.succeed()  # at this instant, after the arrivals (URGENT) of the same instant
            self._wakeup = None

    # ---- admission, used by the policies -------------------------------------------------------

    def sequence_for(self, request: int) -> SeqState:
        """The waiting request's progress (a preempted one keeps its emitted tokens)."""
        seq = self.waiting.get(request)
        if seq is None:
            ledger = self.ledger
            seq = SeqState(request, ledger.prompt[request], ledger.output[request], ledger.task[request])
        return seq

    def need_tokens(self, seq: SeqState) -> int:
        """KV tokens admitting ``seq`` reserves now."""
        if self.reserve_output:
            return seq.prompt + seq.output
        return seq.context + 1 if seq.swapped else seq.target + 1

    def free_tokens(self) -> int:
        """KV tokens an admission may take now, after the running sequences' next writes."""
        return self.capacity - self.used - (0 if self.reserve_output else self._next_writes())

    def admit_fcfs(self, now: float, room: int, token_budget: float, first_always: bool = True) -> list[SeqState]:
        """Pop waiting requests FCFS while there is room, KV fits and their prefill stays within the budget.

        The first prefill is always allowed by the budget (``first_always``), as replica.py does, so a
        prompt longer than the budget is served alone rather than starving. Strict FCFS: nobody
        overtakes a head that does not fit.
        """
        queue, admitted = self.queue, []
        free = self.free_tokens()
        tokens = 0
        while queue and len(admitted) < room:
            seq = self.sequence_for(queue[0])
            need = self.need_tokens(seq)
            prefill = 0 if seq.swapped else seq.target
            over = tokens + prefill > token_budget and (admitted or not first_always)
            if need > free or over:
                break
            if self._device_fits is not None and not self._device_fits([s.reserved for s in self.running] + [need]):
                break
            queue.popleft()
            self.waiting.pop(seq.request, None)
            free -= need
            tokens += prefill
            seq.reserved = need
            self._admit_count += 1
            seq.admit_order = self._admit_count
            if math.isnan(self.ledger.admitted[seq.request]):
                self.ledger.admitted[seq.request] = now
            self.used += need
            self.running.append(seq)
            admitted.append(seq)
        self.peak_tokens = max(self.peak_tokens, self.used)
        return admitted

    # ---- the loop ------------------------------------------------------------------------------

    def _serve(self) -> Generator[simpy.Event, None, None]:
        env, policy = self.env, self.policy
        while True:
            if not self.running and not self.queue:
                yield from self._idle(math.inf)
            start = env.now
            swap_s = self._preempt() if not self.reserve_output else 0.0
            prefills = policy.schedule(self, start)
            if not self.running:
                yield from self._idle(policy.next_look(self, start))
                continue
            if not self.reserve_output:
                swap_s += self._swap_in()
            decodes, result = self._step(prefills)
            seconds = result.seconds
            if swap_s:
                seconds = seconds + swap_s
            end = float(start + seconds)
            self.runs += 1
            self.batch_size = len(prefills) + len(decodes)
            yield env.at(end)
            self._iteration += 1
            self._complete(prefills, decodes, result, swap_s, end)

    def _step(self, prefills: dict[SeqState, int]) -> tuple[list[SeqState], StepResult]:
        """Ask the model for this iteration: the chunks, every prefilled sequence's decode, live tokens."""
        chunks = [PrefillChunk(s.request, s.task, n, s.prefilled, s.prefilled + n >= s.target)
                  for s, n in prefills.items()]
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

    def _idle(self, until: float) -> Generator[simpy.Event, None, None]:
        """Wait for a routed request (or, for a wait window, until ``until``), not busy meanwhile."""
        if self._busy_since is not None:
            self.busy_s += self.env.now - self._busy_since
            self._busy_since = None
        self._wakeup = wakeup = self.env.event()
        if until == math.inf:
            yield wakeup
        else:
            yield self.env.any_of([wakeup, self.env.at(until)])
            self._wakeup = None
        self._busy_since = self.env.now
        self.wakeups += 1

    def _complete(self, prefills: dict[SeqState, int], decodes: list[SeqState], result: StepResult,
                  swap_s: float, end: float) -> None:
        ledger = self.ledger
        for s, n in prefills.items():
            s.prefilled += n
        emitted = result.emitted.tolist()
        if result.rounds is not None and result.accepted is not None:
            rounds, accepted = ledger.draft_rounds, ledger.accepted
            for s, n, r, a in zip(decodes, emitted, result.rounds.tolist(), result.accepted.tolist(), strict=True):
                s.emitted += n
                rounds[s.request] += r
                accepted[s.request] += a
        else:
            for s, n in zip(decodes, emitted, strict=True):
                s.emitted += n
        for link, nbytes in result.paging_bytes.items():
            self.paging_bytes[link] = self.paging_bytes.get(link, 0) + nbytes
        paging = result.paging_s + swap_s  # swaps stall the whole iteration, like the tiers' paging
        members = [*prefills, *decodes]
        # per request, one addition per iteration it was in (adding 0.0 would change nothing, so skip it)
        if paging:
            paging_s = ledger.paging_s
            for s in members:
                paging_s[s.request] += paging
        if result.merge_s:
            merge_s, merge = ledger.merge_s, result.merge_s
            for s in members:
                merge_s[s.request] += merge
        for s in prefills:
            if s.prefilled >= s.target:  # the prompt (or the recompute) completed: one token out
                s.emitted += 1
                if math.isnan(ledger.first_token[s.request]):
                    ledger.first_token[s.request] = end
        done = [s for s in members if s.emitted >= s.output]
        if not self.reserve_output:  # a decoding sequence now holds prompt + emitted tokens
            for s in members:
                if s.decoding and s.context > s.reserved:
                    self.used += s.context - s.reserved
                    s.reserved = s.context
            self.peak_tokens = max(self.peak_tokens, self.used)
        for s in done:
            ledger.finish[s.request] = end
            self.running.remove(s)
            self.used -= s.reserved
            self.retired += 1
            self.policy.observe(self, s.request, end)
