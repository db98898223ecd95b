"""The general loop (tripath/simulator/loop/stepper.py) with continuous batching, no preemption and BaselineStep
reproduces the fast Replica's records bit for bit: the "all options off equals the baseline" guarantee."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import bits, poisson_requests, smooth_costs, tick_costs
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.batching import Continuous
from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.loop.stepper import StepperSetup
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.workload import generate_requests
from tripath.simulator.step_model import BaselineStep


def stepper_setup(config: ClusterConfig, make_cost, costs: list) -> StepperSetup:
    replica = config.replica

    def model_for(i: int) -> BaselineStep:
        cost = make_cost()
        costs.append(cost)
        return BaselineStep(cost, replica.kv_bytes_per_token, replica.kv_capacity_bytes)

    return StepperSetup(model_for, lambda i: Continuous(replica.max_batch_size, replica.max_batched_tokens))


def assert_same(requests, config, make_cost) -> None:
    fast_cost = make_cost()
    fast = simulate_requests(requests, config, fast_cost, fast=True)
    costs: list = []
    stepped = simulate_requests(requests, config, make_cost(), setup=stepper_setup(config, make_cost, costs))
    assert bits(stepped.records) == bits(fast.records)
    for f, s in zip(fast.replicas, stepped.replicas, strict=True):
        assert (f.busy_s, f.iterations, f.peak_kv_bytes) == (s.busy_s, s.iterations, s.peak_kv_bytes)
    assert stepped.extrapolations == fast.extrapolations
    assert stepped.replicas[0].runs == stepped.replicas[0].iterations  # one event per iteration


@pytest.mark.parametrize(("replicas", "rate", "max_batch", "kv_tokens", "make_cost", "on_ticks"), [
    (1, 40.0, 8, 4096, tick_costs, True),  # loaded, arrivals on boundaries, KV binds
    (3, 120.0, 16, 3000, tick_costs, True),  # several replicas, the router's ties
    (2, 5.0, 64, 1 << 20, smooth_costs, False),  # light: replicas sleep and wake
    (2, 200.0, 4, 1 << 20, smooth_costs, False),  # overloaded: long queues, batch room binds
])
def test_poisson_workloads(replicas, rate, max_batch, kv_tokens, make_cost, on_ticks) -> None:
    requests = poisson_requests(np.random.default_rng(replicas * 7 + max_batch), 400, rate, 600, 60, on_ticks)
    config = ClusterConfig(replicas, ReplicaConfig(max_batch, 700, kv_tokens * 2, 2))
    assert_same(requests, config, make_cost)


def test_rejections_and_token_budget() -> None:
    """Some requests exceed the KV capacity (rejected by the router); prompts over the budget run alone."""
    requests = poisson_requests(np.random.default_rng(5), 300, 30.0, 3000, 200, False)
    config = ClusterConfig(2, ReplicaConfig(32, 512, 2500 * 3, 3))
    fast = simulate_requests(requests, config, tick_costs())
    assert any(not r.completed for r in fast.records)
    assert_same(requests, config, tick_costs)


def test_trace_replay_on_the_seed_profile() -> None:
    """A shipped trace (Azure conversation) on the seed profile's fitted costs."""
    from tripath.profile.profile import resolve_profile
    from tripath.simulator.runner import cluster_config

    profile = resolve_profile("published-llama2-70b-tp2-a100")
    scenario = scenario_from_dict({
        "workload": {"arrival": {"kind": "trace", "trace": "azure-conv-2023", "time_scale": 0.5},
                     "prompt_tokens": {"kind": "trace"}, "output_tokens": {"kind": "trace"}, "requests": 600},
        "cluster": {"gpus": 4}, "batching": {"max_batch_size": 32},
    })
    config, _ = cluster_config(scenario, profile)
    requests = generate_requests(scenario.workload, np.random.default_rng(3), None)
    assert_same(requests, config, lambda: IterationCost.from_profile(profile))
