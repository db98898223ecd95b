"""The fast path (runs of unchanging iterations in one event) equals the reference bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import assert_fast_equals_reference, poisson_requests, smooth_costs, tick_costs
from tripath.profile.profile import resolve_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.cluster import ClusterConfig
from tripath.simulator.loop.replica import ReplicaConfig

CASES = {
    # name: (replicas, max_batch, max_tokens, capacity tokens, rate, max_prompt, max_output, on_ticks)
    "light-load-one-replica": (1, 64, 8192, 10**7, 5.0, 2000, 300, False),
    "heavy-load-batch-room": (1, 256, 8192, 10**7, 60.0, 1500, 200, False),
    "memory-bound": (1, 64, 8192, 6000, 40.0, 2000, 300, False),
    "memory-bound-three-replicas": (3, 32, 4096, 5000, 80.0, 2000, 200, False),
    "token-budget": (2, 64, 700, 10**7, 50.0, 1000, 100, False),
    "small-batches": (2, 2, 8192, 10**7, 30.0, 500, 80, False),
    "ticks-collide": (2, 16, 2048, 8000, 40.0, 1500, 60, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("costs", [smooth_costs, tick_costs], ids=["smooth", "ticks"])
def test_fast_equals_reference(case, costs):
    replicas, max_batch, max_tokens, capacity, rate, max_prompt, max_output, on_ticks = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case))
    requests = poisson_requests(rng, 400, rate, max_prompt, max_output, on_ticks)
    config = ClusterConfig(replicas, ReplicaConfig(max_batch, max_tokens, capacity, kv_bytes_per_token=1))
    fast, ref = assert_fast_equals_reference(requests, config, costs)
    assert sum(r.status == "completed" for r in fast.records) > 0


def test_fast_equals_reference_on_the_seed_profile_with_rejections():
    profile = resolve_profile("seed-llama2-70b-a100")
    rng = np.random.default_rng(11)
    # prompts up to 9K tokens: some exceed the seed's 8K-token KV budget and are rejected
    requests = poisson_requests(rng, 300, 0.3, 9000, 400)
    replica = ReplicaConfig(64, 8192, profile.kv_capacity_bytes, profile.model.kv_bytes_per_token)
    config = ClusterConfig(2, replica)
    fast, ref = assert_fast_equals_reference(requests, config, lambda: IterationCost.from_profile(profile))
    assert any(r.status == "rejected" for r in fast.records)
    assert fast.extrapolations.decode_outside > 0  # the seed's decode was fitted at batch 1 only
    assert fast.events < ref.events / 3


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    replicas=st.integers(1, 3),
    max_batch=st.integers(1, 6),
    max_tokens=st.integers(1, 3000),
    capacity=st.integers(1, 6000),
    rate=st.floats(1.0, 200.0),
    on_ticks=st.booleans(),
)
def test_fast_equals_reference_on_random_small_workloads(seed, n, replicas, max_batch, max_tokens, capacity,
                                                         rate, on_ticks):
    rng = np.random.default_rng(seed)
    requests = poisson_requests(rng, n, rate, 2000, 50, on_ticks)
    config = ClusterConfig(replicas, ReplicaConfig(max_batch, max_tokens, capacity, kv_bytes_per_token=1))
    assert_fast_equals_reference(requests, config, tick_costs if on_ticks else smooth_costs)


def test_bound_profile_costs_equal_the_profile_formulas_bit_for_bit():
    profile = resolve_profile("seed-llama2-70b-a100")
    cost = IterationCost.from_profile(profile)
    for batch, context in [(1, 4096), (3, 12345), (64, 8191), (7, 0)]:
        assert cost.decode_s(batch, np.array([context]))[0] == profile.decode_ms(batch, context) / 1000.0
    fixed = profile.prefill_ms(0, 0)
    for tokens in (1, 517, 8192):
        assert cost.mixed_s([tokens], 0, 0) == (fixed + (profile.prefill_ms(tokens, 0) - fixed)) / 1000.0
    # counted: the seed's decode domain is batch 1 only, so a batch-3 decode is an extrapolation
    cost.count_decodes(3, 5000, 10)
    cost.count_decodes(1, 4000, 10)  # S = 4000..4009: 4000..4095 are below the domain's 4096
    assert (cost.decode_queries, cost.decode_outside) == (20, 20)
    cost.count_decodes(1, 4090, 10)  # 4090..4095 outside, 4096..4099 inside
    assert (cost.decode_queries, cost.decode_outside) == (30, 26)


def test_fast_equals_reference_with_runs_longer_than_the_evaluation_horizon():
    # outputs of thousands of tokens: runs are evaluated in chunks and cut at the horizon
    rng = np.random.default_rng(5)
    requests = poisson_requests(rng, 30, 2.0, 300, 6000)
    config = ClusterConfig(2, ReplicaConfig(8, 8192, 10**7, kv_bytes_per_token=1))
    fast, ref = assert_fast_equals_reference(requests, config, smooth_costs)
    assert max(r.output_tokens for r in requests) > 5000
    assert fast.events < ref.events / 50
