"""Closed-loop load (tripath/simulator/loop/cluster.py ClosedLoop): N users, each sending its next request when
its previous one ends. Concurrency from the records, Little's law, a hand-computed timeline for one user, and
the fast path, the reference and the per-iteration Stepper agreeing bit for bit.

Linear costs (tripath/simulator/costs.py IterationCost.linear), as tests/simulator/test_timeline.py:
  prefill ms = 10 + 0.01 * T;  decode ms = 5 + 1 * B.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers import bits, poisson_requests, smooth_costs
from tests.simulator.loop.test_stepper_equivalence import stepper_setup
from tripath.core.records import COMPLETED, REJECTED, RequestRecord
from tripath.core.request import RequestSpec
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.cluster import ClosedLoop, ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig

KINDS = pytest.mark.parametrize("kind", ["fast", "reference", "stepper"])


def run(requests: list[RequestSpec], closed: ClosedLoop, kind: str, replicas: int = 1, max_batch: int = 8,
        capacity: int = 10**9, make_cost=smooth_costs):
    """Serve ``requests`` from a closed loop on the fast Replica, its reference, or the Stepper."""
    config = ClusterConfig(replicas, ReplicaConfig(max_batch, 4096, capacity, kv_bytes_per_token=1))
    if kind == "stepper":
        return simulate_requests(requests, config, make_cost(), setup=stepper_setup(config, make_cost, []),
                                 closed=closed)
    return simulate_requests(requests, config, make_cost(), fast=kind == "fast", closed=closed)


def in_flight(records: tuple[RequestRecord, ...]) -> list[tuple[float, int]]:
    """(instant, requests in flight just after it) at every send or end: a request is in flight over
    [arrival, finish) (a rejected one over [arrival, arrival), i.e. never), ends counted before sends."""
    ends = [r.finish_s if r.completed else r.arrival_s for r in records]
    events = sorted([(r.arrival_s, 1) for r in records] + [(end, -1) for end in ends])
    out: list[tuple[float, int]] = []
    live = 0
    for when, step in events:
        live += step
        if out and out[-1][0] == when:
            out[-1] = (when, live)
        else:
            out.append((when, live))
    return out


def workload(seed: int, n: int = 300) -> list[RequestSpec]:
    """Random lengths; their arrival_s (a Poisson draw) must be ignored by a closed loop."""
    return poisson_requests(np.random.default_rng(seed), n, 50.0, 900, 80)


@KINDS
def test_one_user_sends_each_request_when_the_previous_one_finishes(kind: str) -> None:
    requests = [RequestSpec(0, 0.0, 1000, 3), RequestSpec(1, 5.0, 500, 1), RequestSpec(2, 9.0, 2000, 2)]

    def cost() -> IterationCost:
        return IterationCost.linear(10.0, 0.01, 5.0, 1.0)

    records = run(requests, ClosedLoop(1), kind, make_cost=cost).records
    # r0: prefill 20 ms, 2 decodes of 6 ms -> 0.032; r1 sent then: prefill 15 ms, done at its first token;
    # r2 sent at 0.047: prefill 30 ms -> 0.077, one decode -> 0.083
    expected = [(0.0, 0.020, 0.032), (0.032, 0.047, 0.047), (0.047, 0.077, 0.083)]
    got = [(r.arrival_s, r.first_token_s, r.finish_s) for r in records]
    assert got == [pytest.approx(e, rel=1e-12) for e in expected]
    assert all(r.admitted_s == r.arrival_s for r in records)  # nobody waits: the replica is idle at each send
    assert records[1].arrival_s == records[0].finish_s and records[2].arrival_s == records[1].finish_s


@KINDS
def test_think_time_separates_a_users_requests(kind: str) -> None:
    requests = workload(1, 60)
    records = run(requests, ClosedLoop(1, think_s=0.25), kind).records
    assert records[0].arrival_s == 0.0
    for before, after in zip(records, records[1:], strict=False):
        assert after.arrival_s == before.finish_s + 0.25
        assert after.admitted_s == after.arrival_s  # one user: the replica is idle when it sends


@KINDS
@pytest.mark.parametrize("replicas", [1, 3])
def test_never_more_than_users_in_flight_and_exactly_users_until_the_last_send(kind: str, replicas: int) -> None:
    users = 12
    records = run(workload(replicas), ClosedLoop(users), kind, replicas=replicas).records
    assert all(r.status == COMPLETED for r in records)
    curve = in_flight(records)
    assert max(live for _, live in curve) == users
    last_send = max(r.arrival_s for r in records)
    # think time 0: every end is a send at the same instant, so the count stays at N until the sends run out
    assert all(live == users for when, live in curve if when < last_send)
    assert [live for when, live in curve if when >= last_send] == sorted(
        (live for when, live in curve if when >= last_send), reverse=True)
    assert curve[-1][1] == 0
    assert [r.arrival_s for r in records[:users]] == [0.0] * users
    assert all(r.arrival_s > 0.0 for r in records[users:])


@KINDS
def test_with_think_time_in_flight_stays_at_most_users(kind: str) -> None:
    records = run(workload(4), ClosedLoop(6, think_s=0.05), kind, replicas=2).records
    curve = in_flight(records)
    assert max(live for _, live in curve) <= 6
    assert curve[0] == (0.0, 6)  # all users send at t = 0
    # request i + N is sent think_s after one of the first i + 1 requests ended
    ends = sorted(r.finish_s for r in records)
    sends = sorted(r.arrival_s for r in records[6:])
    assert sends == [pytest.approx(end + 0.05, rel=1e-12) for end in ends[: len(sends)]]


@KINDS
def test_littles_law_users_equal_throughput_times_mean_latency(kind: str) -> None:
    """L = lambda x W over the whole run, with L = N in the steady part and a draining tail: over [0, makespan]
    the mean in flight is N x (time before the last send) / makespan plus the tail's share, so
    lambda x W lies in [N x t_last_send / makespan, N]; the run's tail sets the tolerance."""
    users = 10
    records = run(workload(7, 400), ClosedLoop(users), kind, replicas=2).records
    makespan = max(r.finish_s for r in records)
    last_send = max(r.arrival_s for r in records)
    throughput = len(records) / makespan
    mean_e2e = sum(r.finish_s - r.arrival_s for r in records) / len(records)
    tolerance = (makespan - last_send) / makespan
    assert tolerance < 0.1  # the tail is short against the run: the law is tested, not the tail
    assert throughput * mean_e2e == pytest.approx(users, rel=tolerance)
    assert users * last_send / makespan <= throughput * mean_e2e <= users * (1 + 1e-12)
    # the steady part alone: requests ended by the last send, at N in flight throughout
    steady = [r for r in records if r.finish_s <= last_send]
    assert len(steady) / last_send * (sum(r.finish_s - r.arrival_s for r in steady) / len(steady)) <= users


@pytest.mark.parametrize(("replicas", "users", "max_batch", "capacity"), [
    (1, 16, 8, 10**9),  # users beyond the batch: a queue
    (3, 20, 16, 3000),  # several replicas, KV binds
    (2, 5, 64, 10**9),  # light: replicas sleep and wake at each send
])
@pytest.mark.parametrize("think_s", [0.0, 0.01])
def test_fast_reference_and_stepper_agree_bit_for_bit(replicas: int, users: int, max_batch: int, capacity: int,
                                                      think_s: float) -> None:
    requests = workload(replicas + users, 300)
    closed = ClosedLoop(users, think_s)
    fast = run(requests, closed, "fast", replicas, max_batch, capacity)
    ref = run(requests, closed, "reference", replicas, max_batch, capacity)
    stepped = run(requests, closed, "stepper", replicas, max_batch, capacity)
    assert bits(fast.records) == bits(ref.records) == bits(stepped.records)
    for f, r in zip(fast.replicas, ref.replicas, strict=True):
        assert (f.busy_s, f.iterations, f.peak_kv_bytes) == (r.busy_s, r.iterations, r.peak_kv_bytes)
    assert fast.events <= ref.events


@KINDS
def test_a_rejected_request_ends_at_once_and_its_user_sends_the_next(kind: str) -> None:
    requests = [RequestSpec(0, 0.0, 100, 4), RequestSpec(1, 0.0, 5000, 4), RequestSpec(2, 0.0, 200, 2)]
    records = run(requests, ClosedLoop(1, think_s=0.125), kind, capacity=1000).records
    assert [r.status for r in records] == [COMPLETED, REJECTED, COMPLETED]
    assert records[1].arrival_s == records[0].finish_s + 0.125
    assert records[2].arrival_s == records[1].arrival_s + 0.125
    assert math.isnan(records[1].finish_s)


def test_more_users_than_requests_sends_them_all_at_once() -> None:
    records = run(workload(2, 5), ClosedLoop(9), "fast").records
    assert [r.arrival_s for r in records] == [0.0] * 5


@pytest.mark.parametrize(("users", "think_s", "field"), [(0, 0.0, "users"), (2, -1.0, "think_s"),
                                                         (2, math.nan, "think_s")])
def test_bad_closed_loop_config_names_the_field(users: int, think_s: float, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ClosedLoop(users, think_s)
