"""A cluster of identical replicas behind a router, fed by the workload's arrivals.

- Replicas: cluster.gpus // (tp x sequence-parallel degree x attention data-parallel ranks) copies of the model,
  each a Stepper (tripath/simulator/loop/stepper.py) with its own FCFS queue, batching and KV budget; with
  attention data parallelism (``ClusterConfig.ranks``) a Stepper per rank, the ranks of a replica stepping in
  lockstep (tripath/simulator/loop/lockstep.py), and the router routes to ranks.
- Arrivals: one SimPy process walks the sorted RequestSpecs and fires each at exactly its
  arrival_s, with URGENT priority, so every arrival of an instant is routed before any replica
  handles an iteration boundary at that instant.
- Closed loop (``ClosedLoop``, benchmark clients with a concurrency limit): the RequestSpecs' arrival_s are
  ignored. Requests 0 .. users - 1 are sent at t = 0; each time a request ends (its last token, or rejection
  at arrival) the next unsent one is sent think_s later, URGENT as above. A finish and the replica's next
  admission happen in one step, so a request sent at that very instant (think_s = 0) joins that replica at
  its next boundary (a sleeping replica wakes for it at once). The fast path cannot know such an
  arrival ahead, so none of them watches for one: every run that an arrival could join may be cut by it.
  Records carry the time each request was sent, so TTFT and E2E are measured from it.
- Router (tripath/simulator/loop/router.py, shared with the streamed cluster): a request whose KV reservation
  ((prompt + output) * kv_bytes_per_token) exceeds a replica's whole KV capacity can never be served and is
  rejected at arrival. Any other goes to the replica with the fewest outstanding requests (routed, not yet
  finished; a request finishing at the very instant of the arrival still counts), ties to the lowest index —
  deterministic.

With a StepperSetup (tripath/simulator/loop/stepper.py) the Steppers run the setup's models and policies: any
batching policy, preemption and path physics, one event per iteration (fast-forwarding decode-only stretches);
capacity is then the StepModel's kv_capacity_tokens (all tiers). Without one they serve the baseline (or its
compression / SP cost transform) with continuous batching on the exact fast path (``fast_steppers``: a RunBooking,
tripath/simulator/loop/run.py), a planned run per event.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from tripath.core.records import COMPLETED, Extrapolations, ReplicaStats, RequestRecord, RunResult, rejected_record
from tripath.core.request import RequestSpec
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.batching import Continuous
from tripath.simulator.loop.clock import URGENT, Clock
from tripath.simulator.loop.lockstep import grouped
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.loop.router import expects, least_outstanding, too_big_reason
from tripath.simulator.loop.run import RunBooking
from tripath.simulator.loop.stepper import PathLedger, Stepper, StepperConfig, StepperSetup
from tripath.simulator.loop.timeseries import Sampler
from tripath.simulator.paths.prefix import PrefixCache, PrefixCounters, PrefixRun, route
from tripath.simulator.paths.seqpar import SpPhysics
from tripath.simulator.step_model import BaselineStep


@dataclass(frozen=True)
class ClusterConfig:
    """How many replicas, and the limits each one runs with. ``ranks``: attention data-parallel ranks per replica
    (tripath/simulator/loop/lockstep.py), each a Stepper with ``replica``'s limits and KV budget."""

    replicas: int
    replica: ReplicaConfig
    ranks: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.ranks < 1:
            raise ValueError(f"ranks must be >= 1, got {self.ranks}")

    @property
    def steppers(self) -> int:
        """Steppers the cluster runs: a rank each (one per replica without attention data parallelism)."""
        return self.replicas * self.ranks


@dataclass(frozen=True)
class ClosedLoop:
    """Closed-loop load: ``users`` clients each keep one request in flight, sending the next ``think_s`` seconds
    after the previous one ends (vLLM ``bench serve --max-concurrency``, inference-perf's concurrency load)."""

    users: int
    think_s: float = 0.0

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError(f"users must be >= 1, got {self.users}")
        if not (math.isfinite(self.think_s) and self.think_s >= 0.0):
            raise ValueError(f"think_s must be >= 0, got {self.think_s}")


class Cluster:
    """Replicas, router and arrivals on one clock; ``run()`` simulates until every request is done."""

    def __init__(self, requests: Sequence[RequestSpec], config: ClusterConfig, cost: IterationCost,
                 fast: bool = True, setup: StepperSetup | None = None, sp: SpPhysics | None = None,
                 closed: ClosedLoop | None = None) -> None:
        for before, after in zip(requests, requests[1:], strict=False):
            if closed is None and after.arrival_s < before.arrival_s:
                raise ValueError(f"requests must be sorted by arrival_s (request {after.request_id})")
        self.requests = requests
        self.closed = closed
        # when each request was sent: its arrival_s, or (closed loop) the instant its user sent it
        self.sent_s = [math.nan if closed else r.arrival_s for r in requests]
        self._unsent = 0  # closed loop: the next request no user has sent yet
        self.config = config
        self.cost = cost
        self.env = Clock()
        prompts, outputs = [r.prompt_tokens for r in requests], [r.output_tokens for r in requests]
        self.reject_reason: dict[int, str] = {}
        # the next arrival to the cluster, for the fast path's runs; a closed loop's is not known ahead
        self.next_arrival_s = requests[0].arrival_s if requests and closed is None else math.inf
        self.setup = setup
        self.sp = sp  # the fast replicas' SP physics (its cost is inside ``cost``): merge time and counts
        self.sampler: Sampler | None = None
        self.prefix_caches: list[PrefixCache] = []
        tasks = [0] * len(requests) if setup is None else setup.task_indexes([r.task for r in requests])
        self.ledger = PathLedger(prompts, outputs, config.replica.kv_bytes_per_token, tasks)
        self.replicas = self._fast_steppers(fast) if setup is None else self._steppers(setup)
        if closed is None:
            self.env.process(self._arrivals())
        else:
            self.ledger.on_finish = self._ended
            self._unsent = min(closed.users, len(requests))
            for index in range(self._unsent):
                self._send_at(0.0, index)

    def _fast_steppers(self, fast: bool) -> list[Stepper]:
        """The baseline's Steppers on the exact fast path (``fast`` off: one iteration per event, the reference)."""
        return fast_steppers(self.env, self.config, self.cost, self.ledger, self._next_arrival, self._expects,
                             fast, self.sp)

    def _steppers(self, setup: StepperSetup) -> list[Stepper]:
        """A Stepper per replica on the setup's models and policies (a prefix cache each where it is on), and the
        time-series sampler over them where asked."""
        assert isinstance(self.ledger, PathLedger)
        models = [setup.model_for(i) for i in range(self.config.steppers)]
        self.prefix_caches = [] if setup.prefix is None else [
            PrefixCache(setup.prefix, m.kv_capacity_tokens, m.kv_bytes_per_token, _work_ms(m.cost), m.tiers)
            for m in models]
        config = setup.config
        steppers = grouped(self.env, self.config.replicas, self.config.ranks, lambda i, wake: Stepper(
            self.env, i, models[i], setup.policy_for(i), self.ledger, config,
            self.prefix_caches[i] if self.prefix_caches else None, wake_group=wake), config.fast_forward)
        if setup.timeseries_interval_s is not None:
            self.sampler = Sampler(self.env, steppers, setup.timeseries_interval_s, self._all_done)
        return steppers

    def _next_arrival(self) -> float:
        return self.next_arrival_s

    def _arrivals(self) -> Generator[simpy.Event, None, None]:
        requests = self.requests
        last = len(requests) - 1
        for index, request in enumerate(requests):
            yield self.env.at(request.arrival_s, URGENT)
            self.next_arrival_s = requests[index + 1].arrival_s if index < last else float("inf")
            self._route(index)

    def _send_at(self, when: float, index: int) -> None:
        """Closed loop: a user sends request ``index`` at ``when`` (URGENT, as an open-loop arrival)."""
        event = self.env.at(when, URGENT)
        event.callbacks.append(lambda _: self._send(index))

    def _send(self, index: int) -> None:
        self.sent_s[index] = self.env.now
        self._route(index)
        if index in self.reject_reason:  # turned away at once: its user goes on to the next request
            self._ended(index, self.env.now)

    def _ended(self, request: int, when: float) -> None:
        """Closed loop: ``request`` ended at ``when``; its user sends the next unsent request think_s later."""
        assert self.closed is not None
        if self._unsent < len(self.requests):
            self._send_at(when + self.closed.think_s, self._unsent)
            self._unsent += 1

    def _expects(self, index: int) -> bool:
        """Whether replica ``index`` would receive a request arriving now (a hint for the fast path); never in a
        closed loop, whose next arrival is not known ahead (so every replica's open run may be cut)."""
        if self.closed is not None:
            return False
        return expects(self.replicas, index)

    def _all_done(self) -> bool:
        return len(self.reject_reason) + sum(r.retired for r in self.replicas) == len(self.requests)

    def _route(self, index: int) -> None:
        capacity = self.config.replica.kv_capacity_bytes
        tokens = capacity // self.config.replica.kv_bytes_per_token
        too_big = self.ledger.reserve[index] > capacity
        model = self.replicas[0].model  # the model's capacity in tokens (tiers, compression)
        if model.kv_capacity_tokens != tokens:
            tokens, capacity = model.kv_capacity_tokens, model.kv_capacity_tokens * model.kv_bytes_per_token
        too_big = self.ledger.prompt[index] + self.ledger.output[index] > tokens
        if not too_big and self.prefix_caches:  # whole blocks: a reservation may not fit the blocks its tokens do
            cache = self.prefix_caches[0]
            blocks = cache.blocks_needed(self.ledger.prompt[index], self.ledger.output[index])
            if blocks > cache.index.num_blocks:
                self.reject_reason[index] = (f"KV reservation of (prompt + output) tokens exceeds the replica's "
                                             f"{cache.index.num_blocks} prefix-cache blocks of {cache.bt} tokens")
                return
        if too_big:
            self.reject_reason[index] = too_big_reason(capacity, tokens)
            return
        if self.setup is not None and self.setup.prefix is not None and len(self.replicas) > 1:
            chosen = route(self.prefix_caches, [r.outstanding for r in self.replicas], index,
                           self.ledger.prompt[index], self.setup.prefix.spec)
            best = self.replicas[chosen]
        else:
            best = least_outstanding(self.replicas)
        self.ledger.replica[index] = best.index
        best.enqueue(index)

    def run(self) -> RunResult:
        self.env.run()
        for replica in self.replicas:
            if replica.queue or replica.outstanding:
                raise AssertionError(f"replica {replica.index} ended with unfinished requests")
        # Events the simulation processed: one per arrival, per replica wake-up and per run.
        events = len(self.requests) + sum(r.wakeups + r.runs for r in self.replicas)
        if self.setup is None:
            extrapolations = self.cost.extrapolations()
            if self.sp is not None:
                extrapolations = extrapolations.with_sp(self.sp.queries, self.sp.outside)
            return RunResult(self._records(), self._stats(), extrapolations, events=events)
        extrapolations = self._model_extrapolations()
        timeseries = None if self.sampler is None else self.sampler.result()
        return RunResult(self._records(), self._stats(), extrapolations, events=events, timeseries=timeseries,
                         prefix=self._prefix_run())

    def _prefix_run(self) -> PrefixRun | None:
        """The replicas' prefix caches summed (None without prefix caching)."""
        if self.setup is None or self.setup.prefix is None:
            return None
        total = PrefixCounters()
        cached: dict[int, int] = {}
        for cache in self.prefix_caches:
            total.add(cache.counters)
            cached.update(cache.cached_tokens)
        setup = self.setup.prefix
        return PrefixRun(setup.spec.block_tokens, setup.spec.routing, total, cached, setup.prefixes.source,
                         setup.prefixes.note)

    def _model_extrapolations(self) -> Extrapolations:
        """Summed over the replicas' StepModels, counting a shared counter (the same object) once."""
        seen: dict[int, Extrapolations] = {}
        for replica in self.replicas:
            model = replica.model
            seen.setdefault(id(model.cost), model.extrapolations())
        fields = ("prefill_queries", "prefill_outside", "decode_queries", "decode_outside", "sp_prefill_queries",
                  "sp_prefill_outside")
        return Extrapolations(*(sum(getattr(e, f) for e in seen.values()) for f in fields))

    def _records(self) -> tuple[RequestRecord, ...]:
        ledger = self.ledger
        sent = self.sent_s
        records = []
        for index, r in enumerate(self.requests):
            if index in self.reject_reason:
                records.append(rejected_record(r.request_id, r.task, sent[index], r.prompt_tokens,
                                               r.output_tokens, self.reject_reason[index]))
                continue
            records.append(RequestRecord(
                r.request_id, r.task, sent[index], r.prompt_tokens, r.output_tokens, ledger.replica[index],
                ledger.admitted[index], ledger.first_token[index], ledger.finish[index], COMPLETED, "",
                ledger.draft_rounds[index], ledger.accepted[index], ledger.paging_s[index],
                ledger.merge_s[index], ledger.preemptions[index],
            ))
        return tuple(records)

    def _stats(self) -> tuple[ReplicaStats, ...]:
        capacity = self.config.replica.kv_capacity_bytes
        return tuple(
            ReplicaStats(r.index, r.busy_s, r.iterations, r.runs, r.peak_kv, capacity) for r in self.replicas
        )


def fast_steppers(env: Clock, config: ClusterConfig, cost: IterationCost, ledger: Any,
                  next_arrival: Callable[[], float], expects_next_arrival: Callable[[int], bool], fast: bool = True,
                  sp: SpPhysics | None = None) -> list[Stepper]:
    """The baseline's Steppers, as both clusters build them: continuous batching on ``cost`` (the baseline's, or
    compression / SP transformed: tripath/simulator/paths/step.py, fast_transforms), nothing preempted, on the
    exact fast path (``RunBooking``: a planned run per event; ``fast`` off, one iteration per event, the
    reference). ``ledger``: a PathLedger, or the streamed cluster's, used by request index; ``sp``: the SP physics
    inside ``cost``, whose merge time is booked to the requests once per run."""
    replica = config.replica
    if config.ranks > 1:  # lockstep ranks, fast-forwarding decode-only stretches (tripath/simulator/loop/lockstep.py)
        plain = StepperConfig(fast_forward=fast)
        return grouped(env, config.replicas, config.ranks, lambda i, wake: Stepper(
            env, i, BaselineStep(cost, replica.kv_bytes_per_token, replica.kv_capacity_bytes),
            Continuous(replica.max_batch_size, replica.max_batched_tokens), ledger, plain, wake_group=wake), fast)
    booking = RunBooking(next_arrival, expects_next_arrival, replica.max_batch_size, replica.max_batched_tokens,
                         not fast,
                         None if sp is None else sp.decode_merge_array, None if sp is None else sp.merge_array)
    return [Stepper(env, i, BaselineStep(cost, replica.kv_bytes_per_token, replica.kv_capacity_bytes),
                    Continuous(replica.max_batch_size, replica.max_batched_tokens), ledger, booking=booking)
            for i in range(config.replicas)]


def _work_ms(cost: IterationCost) -> Callable[[int, int], float]:
    """A chunk's prefill work (ms) for the prefix cache's load-or-recompute choice: priced, not counted as a query
    (the chunk actually run is counted when its iteration is priced)."""
    fixed = cost.prefill_fixed_ms
    return lambda tokens, context: float(cost.prefill_ms(tokens, context)) - fixed


def simulate_requests(requests: Sequence[RequestSpec], config: ClusterConfig, cost: IterationCost,
                      fast: bool = True, setup: StepperSetup | None = None, sp: SpPhysics | None = None,
                      closed: ClosedLoop | None = None) -> RunResult:
    """Serve ``requests`` (sorted by arrival) on the cluster; one replication, deterministic.

    ``sp``: with fast replicas on an SP-transformed ``cost`` (tripath/simulator/paths/step.py: fast_transforms), the
    SP physics inside it, so records carry merge time and the run counts SP extrapolations. ``closed``: send them
    in request order from a closed loop of users instead of at their arrival_s."""
    return Cluster(requests, config, cost, fast, setup, sp, closed).run()
