"""Invariants that hold on every run: conservation, causality, KV and batch limits, FCFS, determinism."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import bits
from tripath.core.errors import InputError
from tripath.core.request import RequestSpec
from tripath.profile.profile import resolve_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import load_scenario


def check_invariants(result, config: ClusterConfig) -> None:
    records = result.records
    limits = config.replica
    per_token = limits.kv_bytes_per_token
    done = [r for r in records if r.status == "completed"]
    rejected = [r for r in records if r.status == "rejected"]
    assert len(records) == len(done) + len(rejected)  # conservation
    for r in done:
        times = (r.admitted_s, r.first_token_s, r.finish_s)
        assert all(math.isfinite(t) for t in times)
        assert r.arrival_s <= r.admitted_s < r.first_token_s <= r.finish_s  # causality, positive costs
        assert (r.first_token_s == r.finish_s) == (r.output_tokens == 1)
        assert 0 <= r.replica < config.replicas
    for r in rejected:
        assert r.replica == -1 and all(math.isnan(t) for t in (r.admitted_s, r.first_token_s, r.finish_s))
        assert (r.prompt_tokens + r.output_tokens) * per_token > limits.kv_capacity_bytes
    for replica in range(config.replicas):
        mine = [r for r in done if r.replica == replica]
        # FCFS: admitted in arrival order
        admitted = [r.admitted_s for r in sorted(mine, key=lambda r: (r.arrival_s, r.request_id))]
        assert admitted == sorted(admitted)
        # sweep: a request holds its KV reservation and a batch slot over [admitted, finish);
        # at equal times, finishes free their memory before admissions take it
        events = sorted([(r.admitted_s, 1, r) for r in mine] + [(r.finish_s, 0, r) for r in mine],
                        key=lambda e: (e[0], e[1]))
        kv = batch = peak = 0
        for _, admit, r in events:
            sign = 1 if admit else -1
            kv += sign * (r.prompt_tokens + r.output_tokens) * per_token
            batch += sign
            assert kv <= limits.kv_capacity_bytes
            assert batch <= limits.max_batch_size
            peak = max(peak, kv)
        assert kv == 0 and batch == 0
        assert peak == result.replicas[replica].peak_kv_bytes
        assert result.replicas[replica].peak_kv_bytes <= limits.kv_capacity_bytes


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 60),
    replicas=st.integers(1, 3),
    max_batch=st.integers(1, 8),
    max_tokens=st.integers(1, 4000),
    capacity=st.integers(100, 8000),
    fast=st.booleans(),
)
def test_invariants_hold_on_random_workloads(seed, n, replicas, max_batch, max_tokens, capacity, fast):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.02, n))
    requests = [RequestSpec(i, float(arrivals[i]), int(rng.integers(1, 3000)), int(rng.integers(1, 80)))
                for i in range(n)]
    config = ClusterConfig(replicas, ReplicaConfig(max_batch, max_tokens, capacity, kv_bytes_per_token=1))
    result = simulate_requests(requests, config, IterationCost.linear(10, 0.01, 5, 1, 0.001), fast=fast)
    check_invariants(result, config)


@pytest.fixture(scope="module")
def seed_profile():
    return resolve_profile("seed-llama2-70b-a100")


def small_quickstart(requests: int = 120):
    scenario = load_scenario("quickstart")
    return dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, requests=requests))


def test_same_seed_same_records_different_seed_differs(seed_profile):
    scenario = small_quickstart()
    a = simulate(scenario, seed_profile, seed=7, replications=2)
    b = simulate(scenario, seed_profile, seed=7, replications=2)
    c = simulate(scenario, seed_profile, seed=8, replications=2)
    assert [bits(r.records) for r in a.runs] == [bits(r.records) for r in b.runs]
    assert bits(a.runs[0].records) != bits(c.runs[0].records)
    assert bits(a.runs[0].records) != bits(a.runs[1].records)  # replications are independent streams
    config = ClusterConfig(a.replicas, ReplicaConfig(64, 8192, a.kv_capacity_bytes, 327680))
    for run in a.runs + c.runs:
        check_invariants(run, config)


def test_device_memory_override_derives_kv_capacity(seed_profile):
    base = small_quickstart(20)
    too_small = dataclasses.replace(base, cluster=dataclasses.replace(base.cluster, device_memory_gib=80.0))
    # tp = 1 on the seed profile: 80 GiB minus 137.95 GB of fp16 weights leaves nothing -> error
    with pytest.raises(InputError, match="cluster.device_memory_gib"):
        simulate(too_small, seed_profile, seed=1)
    roomy = dataclasses.replace(base, cluster=dataclasses.replace(base.cluster, device_memory_gib=200.0))
    result = simulate(roomy, seed_profile, seed=1)
    assert result.kv_capacity_bytes == 200 * 2**30 - seed_profile.model.weight_bytes
    assert result.replicas == 1


def test_process_pool_replications_equal_serial_ones(seed_profile):
    scenario = small_quickstart(80)
    serial = simulate(scenario, seed_profile, seed=5, replications=3)
    pooled = simulate(scenario, seed_profile, seed=5, replications=3, workers=2)
    assert [bits(r.records) for r in serial.runs] == [bits(r.records) for r in pooled.runs]
