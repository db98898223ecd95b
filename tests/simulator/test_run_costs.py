"""RunCosts: the profile converted once per run equals what the profile itself says, field by field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tripath.core.errors import InputError
from tripath.profile.profile import resolve_profile
from tripath.simulator.loop.stepper_setup import stepper_setup
from tripath.simulator.paths.run_costs import RunCosts, kv_capacity
from tripath.simulator.paths.step import build_step_model
from tripath.simulator.scenario.scenario import load_scenario
from tripath.simulator.scenario.strategy import (
    CompressionSpec,
    SequenceParallelSpec,
    SpeculativeSpec,
    StrategySpec,
    TieredSpec,
)

SEED = resolve_profile("seed-llama2-70b-a100")
TINY = resolve_profile("cpu-tiny")


def test_the_baseline_conversion_carries_the_model_and_the_swap_cost():
    costs = RunCosts.from_profile(SEED, StrategySpec(), ["dialogue"], 12_345)
    assert (costs.kv_bytes_per_token, costs.tp, costs.kv_capacity_bytes) == (327_680, 1, 12_345)
    assert costs.tasks == ("dialogue",) and costs.profile_key == SEED.key_str()
    assert (costs.speculative, costs.tiered, costs.sequence_parallel, costs.compression) == (None, None, None, None)
    for nbytes in (0, 4096, 10**9):  # the same float as the profile's own device_host transfer
        assert costs.swap_s(nbytes) == float(SEED.paging_ms("device_host", nbytes)) / 1000.0
    assert costs.cost.decode_ms(3, 9000) == SEED.decode_ms(3, 9000)
    no_link = RunCosts.from_profile(dataclasses.replace(SEED, paging={}), StrategySpec(), ["dialogue"], 1)
    assert no_link.swap_s is None


def test_swap_without_a_device_host_link_names_the_profile():
    scenario = load_scenario("quickstart")
    swap = dataclasses.replace(scenario, batching=dataclasses.replace(scenario.batching, preemption="swap"))
    costs = RunCosts.for_scenario(swap, dataclasses.replace(SEED, paging={}))
    with pytest.raises(InputError, match=f"device_host paging cost, which profile {SEED.key_str()} lacks"):
        stepper_setup(swap, costs, 1, np.random.SeedSequence(0))


def test_path_parameters_are_the_profiles_numbers_resolved():
    strategy = StrategySpec(speculative=SpeculativeSpec(k=3), tiered=TieredSpec(), compression=CompressionSpec("int8"),
                            sequence_parallel=SequenceParallelSpec(2))
    costs = RunCosts.from_profile(TINY, strategy, ["code", "math"], TINY.kv_capacity_bytes)
    spec = costs.speculative
    assert spec.k == 3 and spec.c == TINY.speculative.cost_ratio.value and spec.lazy_draft  # measured profile
    assert spec.verify == (1.0, *(TINY.verify_cost_ratio(k) for k in (1, 2, 3)))
    assert spec.entries(2) == (TINY.acceptance_for("code", 2), TINY.acceptance_for("math", 2))
    assert spec.per_sequence_k == TINY.speculative.k
    tiers = costs.tiered
    assert (tiers.host_memory_bytes, tiers.ssd_bytes, tiers.layers, tiers.engine_rule) == (
        TINY.hardware.host_memory_bytes, TINY.hardware.ssd_bytes, TINY.model.layers, True)
    assert tiers.paging is TINY.paging
    assert costs.sequence_parallel is TINY.sequence_parallel[2]
    assert costs.compression.kv_bytes_ratio == TINY.compression["int8"].kv_bytes_ratio.value
    lookup = RunCosts.from_profile(dataclasses.replace(
        SEED, acceptance={**SEED.acceptance, "prompt_lookup:code": SEED.acceptance["code"]}),
        StrategySpec(speculative=SpeculativeSpec(proposer="prompt_lookup")), ["code"], 1).speculative
    assert (lookup.k, lookup.c, lookup.prefill_ratio, lookup.per_sequence) == (SEED.speculative.k, 0.0, 0.0, 0.0)


def test_the_conversion_checks_the_paths_against_the_profile():
    with pytest.raises(InputError) as err:
        RunCosts.from_profile(SEED, StrategySpec(compression=CompressionSpec("int8")), ["dialogue"], 1, "s.toml")
    assert err.value.field == "strategy.compression.mode" and err.value.source == "s.toml"


def test_for_scenario_takes_its_kv_budget_and_tasks():
    scenario = load_scenario("quickstart")
    roomy = dataclasses.replace(scenario, cluster=dataclasses.replace(scenario.cluster, device_memory_gib=200.0))
    costs = RunCosts.for_scenario(roomy, SEED)
    assert costs.kv_capacity_bytes == kv_capacity(roomy, SEED)[0] == 200 * 2**30 - SEED.model.weight_bytes
    assert costs.tasks == tuple(task for task, _ in scenario.workload.tasks)


def test_each_replica_model_counts_on_its_own():
    costs = RunCosts.for_scenario(load_scenario("quickstart"), SEED)
    a, b = (build_step_model(costs, np.random.default_rng(0)) for _ in range(2))
    assert a.cost is not b.cost and a.cost is not costs.cost
    a.cost.count_decodes(1, 100, 3)
    assert a.extrapolations().decode_queries == 3 and b.extrapolations().decode_queries == 0
    assert costs.cost.extrapolations().decode_queries == 0
