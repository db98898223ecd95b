"""A cluster of identical replicas behind a router, fed by the workload's arrivals.

- Replicas: cluster.gpus // tp copies of the model (simulator/replica.py), each with its own
  FCFS queue, continuous batching and KV budget.
- Arrivals: one SimPy process walks the sorted RequestSpecs and fires each at exactly its
  arrival_s, with URGENT priority, so every arrival of an instant is routed before any replica
  handles an iteration boundary at that instant.
- Router: a request whose KV reservation ((prompt + output) * kv_bytes_per_token) exceeds a
  replica's whole KV capacity can never be served and is rejected at arrival. Any other goes to
  the replica with the fewest outstanding requests (routed, not yet finished; a request finishing
  at the very instant of the arrival still counts), ties to the lowest index — deterministic.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

import simpy

from simulator.clock import URGENT, Clock
from simulator.costs import IterationCost
from simulator.records import COMPLETED, ReplicaStats, RequestRecord, RunResult, rejected_record
from simulator.replica import Ledger, Replica, ReplicaConfig
from simulator.request import RequestSpec


@dataclass(frozen=True)
class ClusterConfig:
    """How many replicas, and the limits each one runs with."""

    replicas: int
    replica: ReplicaConfig

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")


class Cluster:
    """Replicas, router and arrivals on one clock; ``run()`` simulates until every request is done."""

    def __init__(self, requests: Sequence[RequestSpec], config: ClusterConfig, cost: IterationCost,
                 fast: bool = True) -> None:
        for before, after in zip(requests, requests[1:], strict=False):
            if after.arrival_s < before.arrival_s:
                raise ValueError(f"requests must be sorted by arrival_s (request {after.request_id})")
        self.requests = requests
        self.config = config
        self.cost = cost
        self.env = Clock()
        self.ledger = Ledger([r.prompt_tokens for r in requests], [r.output_tokens for r in requests],
                             config.replica.kv_bytes_per_token)
        self.reject_reason: dict[int, str] = {}
        self.next_arrival_s = requests[0].arrival_s if requests else float("inf")
        self.replicas = [
            Replica(self.env, i, config.replica, cost, self.ledger, self._next_arrival, self._expects, fast)
            for i in range(config.replicas)
        ]
        self.env.process(self._arrivals())

    def _next_arrival(self) -> float:
        return self.next_arrival_s

    def _arrivals(self) -> Generator[simpy.Event, None, None]:
        requests = self.requests
        last = len(requests) - 1
        for index, request in enumerate(requests):
            yield self.env.at(request.arrival_s, URGENT)
            self.next_arrival_s = requests[index + 1].arrival_s if index < last else float("inf")
            self._route(index)

    def _choice(self) -> Replica:
        """The replica the router would pick now: fewest outstanding, ties to the lowest index."""
        replicas = self.replicas
        best = replicas[0]
        for replica in replicas[1:]:
            if replica.outstanding < best.outstanding:  # strict: ties stay with the lower index
                best = replica
        return best

    def _expects(self, index: int) -> bool:
        """Whether replica ``index`` would receive a request arriving now (a hint for the fast path)."""
        return len(self.replicas) == 1 or self._choice().index == index

    def _route(self, index: int) -> None:
        capacity = self.config.replica.kv_capacity_bytes
        need = self.ledger.reserve[index]
        if need > capacity:
            # One stable text per run (the request's own need is in its record), so the summary can count reasons.
            tokens = capacity // self.config.replica.kv_bytes_per_token
            self.reject_reason[index] = (f"KV reservation of (prompt + output) tokens exceeds the replica's KV "
                                         f"capacity of {capacity} bytes ({tokens} tokens)")
            return
        best = self._choice()
        self.ledger.replica[index] = best.index
        best.enqueue(index)

    def run(self) -> RunResult:
        self.env.run()
        for replica in self.replicas:
            if replica.queue or replica.outstanding:
                raise AssertionError(f"replica {replica.index} ended with unfinished requests")
        # Events the simulation processed: one per arrival, per replica wake-up and per run.
        events = len(self.requests) + sum(r.wakeups + r.runs for r in self.replicas)
        return RunResult(self._records(), self._stats(), self.cost.extrapolations(), events=events)

    def _records(self) -> tuple[RequestRecord, ...]:
        ledger = self.ledger
        records = []
        for index, r in enumerate(self.requests):
            if index in self.reject_reason:
                records.append(rejected_record(r.request_id, r.task, r.arrival_s, r.prompt_tokens,
                                               r.output_tokens, self.reject_reason[index]))
                continue
            records.append(RequestRecord(
                r.request_id, r.task, r.arrival_s, r.prompt_tokens, r.output_tokens, ledger.replica[index],
                ledger.admitted[index], ledger.first_token[index], ledger.finish[index], COMPLETED,
            ))
        return tuple(records)

    def _stats(self) -> tuple[ReplicaStats, ...]:
        capacity = self.config.replica.kv_capacity_bytes
        return tuple(
            ReplicaStats(r.index, r.busy_s, r.iterations, r.runs, r.peak_kv, capacity) for r in self.replicas
        )


def simulate_requests(requests: Sequence[RequestSpec], config: ClusterConfig, cost: IterationCost,
                      fast: bool = True) -> RunResult:
    """Serve ``requests`` (sorted by arrival) on the cluster; one replication, deterministic."""
    return Cluster(requests, config, cost, fast).run()
