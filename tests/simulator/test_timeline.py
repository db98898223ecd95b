"""Hand-computed timelines with a round-number cost model, on both the reference and the fast path.

Costs used unless a test says otherwise (tripath/simulator/costs.py composition):
  prefill ms = 10 + 0.01 * T          (a 1000-token prompt alone: 20 ms; its variable part: 10 ms)
  decode  ms = 5 + 1 * B              (one sequence: 6 ms, two: 7 ms)
"""

from __future__ import annotations

import math

import pytest

from tripath.core.records import COMPLETED, REJECTED
from tripath.core.request import RequestSpec
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig

MS = 1e-3
BOTH_PATHS = pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])


def cost(per_context: float = 0.0) -> IterationCost:
    return IterationCost.linear(10.0, 0.01, 5.0, 1.0, per_context)


def run(requests: list[RequestSpec], fast: bool, replicas: int = 1, max_batch: int = 8,
        max_tokens: int = 8192, capacity: int = 10**9, per_context: float = 0.0):
    config = ClusterConfig(replicas, ReplicaConfig(max_batch, max_tokens, capacity, kv_bytes_per_token=1))
    return simulate_requests(requests, config, cost(per_context), fast=fast)


def times(record) -> tuple[float, float, float]:
    return record.admitted_s, record.first_token_s, record.finish_s


def approx(*values: float):
    return pytest.approx(values, rel=1e-12, abs=1e-15)


@BOTH_PATHS
def test_one_request_prefill_then_decodes(fast):
    (r,) = run([RequestSpec(0, 1.0, 1000, 3)], fast).records
    # prefill 20 ms -> first token at 1.020; two decodes of 6 ms -> 1.032
    assert times(r) == approx(1.0, 1.020, 1.032)
    assert r.status == COMPLETED and r.replica == 0 and r.queueing_s == 0.0


@BOTH_PATHS
def test_decode_cost_follows_the_growing_context(fast):
    (r,) = run([RequestSpec(0, 0.0, 1000, 3)], fast, per_context=0.001).records
    # after the prefill the sequence holds 1000 + 1 tokens: decode 5 + 1 + 1.001 ms, then 1.002 ms more
    assert times(r) == approx(0.0, 0.020, 0.020 + 0.007001 + 0.007002)


@BOTH_PATHS
def test_second_request_joins_the_running_batch_at_the_next_boundary(fast):
    result = run([RequestSpec(0, 0.0, 1000, 4), RequestSpec(1, 0.021, 500, 2)], fast)
    r0, r1 = result.records
    # 0 -> 20 ms prefill of r0; 20 -> 26 decode (B=1), r1 arrives at 21 and waits for the boundary;
    # 26 -> 37 mixed: decode B=1 (6 ms) + r1's prefill variable part (0.01 * 500 = 5 ms);
    # 37 -> 44 decode B=2 (7 ms): r0 emits its 4th token, r1 its 2nd: both finish.
    assert times(r0) == approx(0.0, 0.020, 0.044)
    assert times(r1) == approx(0.026, 0.037, 0.044)
    assert r1.queueing_s == pytest.approx(0.005, rel=1e-9)
    assert result.replicas[0].iterations == 4
    assert result.replicas[0].busy_s == pytest.approx(0.044, rel=1e-12)


@BOTH_PATHS
def test_arrival_exactly_at_a_boundary_is_admitted_there(fast):
    boundary = 0.0 + 20.0 / 1000.0  # the float the simulator computes for the end of r0's prefill
    r0, r1 = run([RequestSpec(0, 0.0, 1000, 3), RequestSpec(1, boundary, 500, 1)], fast).records
    assert r1.admitted_s == boundary
    # mixed iteration: decode B=1 (6 ms) + 5 ms prefill -> r1's only token at 31 ms
    assert times(r1) == approx(0.020, 0.031, 0.031)
    # r0: first token 20, then decodes ending at 31 (mixed) and 31 + 6 = 37 (alone again)
    assert times(r0) == approx(0.0, 0.020, 0.037)


@BOTH_PATHS
def test_request_waits_for_memory_until_the_first_finishes(fast):
    # capacity 1500 tokens of KV; r0 reserves 1000 + 3 = 1003, r1 needs 600 + 2 = 602 > 497 free
    r0, r1 = run([RequestSpec(0, 0.0, 1000, 3), RequestSpec(1, 0.001, 600, 2)], fast, capacity=1500).records
    assert times(r0) == approx(0.0, 0.020, 0.032)
    # admitted when r0 leaves at 32 ms; prefill alone 10 + 6 = 16 ms; one decode of 6 ms
    assert times(r1) == approx(0.032, 0.048, 0.054)
    assert r1.queueing_s == pytest.approx(0.031, rel=1e-9)


@BOTH_PATHS
def test_fcfs_is_strict_a_small_request_does_not_overtake_a_blocked_head(fast):
    requests = [RequestSpec(0, 0.0, 1000, 3), RequestSpec(1, 0.001, 600, 2), RequestSpec(2, 0.002, 100, 1)]
    r0, r1, r2 = run(requests, fast, capacity=1500).records
    # r2 (101 tokens) would fit beside r0 but waits behind r1; both join when r0 leaves at 32 ms
    assert r1.admitted_s == r2.admitted_s == pytest.approx(0.032, rel=1e-12)
    # one iteration prefills both: 10 + 6 + 1 = 17 ms
    assert r2.finish_s == pytest.approx(0.049, rel=1e-12)


@BOTH_PATHS
def test_oversized_request_is_rejected_at_arrival(fast):
    r0, r1 = run([RequestSpec(0, 0.0, 1400, 101), RequestSpec(1, 0.5, 1000, 3)], fast, capacity=1500).records
    assert r0.status == REJECTED and r0.replica == -1 and "exceeds" in r0.reject_reason
    assert r0.arrival_s == 0.0
    assert all(math.isnan(t) for t in times(r0))
    assert r1.status == COMPLETED and times(r1) == approx(0.5, 0.520, 0.532)


@BOTH_PATHS
def test_token_budget_defers_the_second_prefill_but_never_starves_a_long_one(fast):
    requests = [RequestSpec(0, 0.0, 600, 1), RequestSpec(1, 0.0, 600, 1), RequestSpec(2, 0.0, 3000, 1)]
    r0, r1, r2 = run(requests, fast, max_tokens=1000).records
    assert times(r0) == approx(0.0, 0.016, 0.016)  # 600 + 600 > 1000: r0 alone, 16 ms
    assert times(r1) == approx(0.016, 0.032, 0.032)
    # 3000 > the budget, but the first prefill of an iteration is always allowed: 10 + 30 ms
    assert times(r2) == approx(0.032, 0.072, 0.072)


@BOTH_PATHS
def test_max_batch_size_one_serves_one_at_a_time(fast):
    r0, r1 = run([RequestSpec(0, 0.0, 1000, 2), RequestSpec(1, 0.0, 1000, 2)], fast, max_batch=1).records
    assert times(r0) == approx(0.0, 0.020, 0.026)
    assert times(r1) == approx(0.026, 0.046, 0.052)


@BOTH_PATHS
def test_router_picks_fewest_outstanding_ties_to_lowest_index(fast):
    requests = [RequestSpec(0, 0.0, 1000, 3), RequestSpec(1, 0.0, 1000, 3), RequestSpec(2, 0.010, 100, 1),
                RequestSpec(3, 0.011, 100, 1)]
    records = run(requests, fast, replicas=2).records
    # 0 -> replica 0; 1 -> replica 1 (0 holds one); 2 -> tie 1:1 -> replica 0; 3 -> replica 1 (0 holds two)
    assert [r.replica for r in records] == [0, 1, 0, 1]
    # r2 joins at 20 ms: decode B=1 (6 ms) + its prefill's variable part (0.01 * 100 = 1 ms)
    assert records[2].finish_s == pytest.approx(0.027, rel=1e-12)


@BOTH_PATHS
def test_request_finishing_at_the_arrival_instant_still_counts_as_outstanding(fast):
    r0_finish = (0.0 + 20.0 / 1000.0) + 6.0 / 1000.0 + 6.0 / 1000.0  # the floats the replica adds
    requests = [RequestSpec(0, 0.0, 1000, 3), RequestSpec(1, 0.0, 1000, 1), RequestSpec(2, r0_finish, 100, 1)]
    records = run(requests, fast, replicas=2).records
    assert records[0].finish_s == r0_finish
    # replica 1 is empty since 20 ms; replica 0's request leaves at this very instant but still counts
    assert [r.replica for r in records] == [0, 1, 1]


@BOTH_PATHS
def test_idle_replica_sleeps_until_the_next_arrival(fast):
    result = run([RequestSpec(0, 0.0, 1000, 1), RequestSpec(1, 5.0, 1000, 1)], fast)
    r0, r1 = result.records
    assert times(r1) == approx(5.0, 5.020, 5.020)
    assert result.replicas[0].busy_s == pytest.approx(0.040, rel=1e-12)  # two 20 ms prefills, idle between
    assert result.replicas[0].iterations == 2
