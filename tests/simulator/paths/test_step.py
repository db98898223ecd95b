"""Strategy tables, PathStep composition and the paths end to end through runner.simulate."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest

from tests.helpers import SEED, TINY, peak_in_flight, shipped_scenario_dict
from tripath.core.errors import InputError
from tripath.profile.profile import resolve_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep, build_step_model, fast_transforms, replica_gpus
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import load_scenario, scenario_from_dict
from tripath.simulator.scenario.strategy import (
    CompressionSpec,
    SpeculativeSpec,
    StrategySpec,
    TieredSpec,
    strategy_from_dict,
    strategy_to_dict,
)
from tripath.simulator.step_model import BaselineStep, Decode, PrefillChunk


def _quickstart(requests: int = 60, **changes) -> dict:
    data = shipped_scenario_dict("quickstart")
    data["workload"]["requests"] = requests
    data.update(changes)
    return data


# --- the [strategy.*] tables ---------------------------------------------------------------------
@pytest.mark.parametrize(("table", "field", "problem"), [
    ({"speculative": {"k": 0}}, "strategy.speculative.k", "must be from 1 to 64"),
    ({"speculative": {"k": 2.5}}, "strategy.speculative.k", "must be int"),
    ({"speculative": {"adaptive": 1}}, "strategy.speculative.adaptive", "must be bool"),
    ({"speculative": {"fallback_acceptance": 0.5}}, "strategy.speculative.fallback_acceptance", "adaptive"),
    ({"speculative": {"adaptive": True, "fallback_acceptance": 1.5}}, "strategy.speculative.fallback_acceptance",
     r"\[0.0, 1.0\]"),
    ({"speculative": {"proposer": "ngram"}}, "strategy.speculative.proposer", "draft, prompt_lookup"),
    ({"speculative": {"kk": 3}}, "strategy.speculative.kk", "unknown field"),
    ({"tiered": {"chunk_tokens": 0}}, "strategy.tiered.chunk_tokens", "must be >= 1"),
    ({"tiered": {"host_capacity_gib": -1}}, "strategy.tiered.host_capacity_gib", "must be a number"),
    ({"tiered": {"policy": "fifo"}}, "strategy.tiered.policy", "lru"),
    ({"sequence_parallel": {"degree": 1}}, "strategy.sequence_parallel.degree", "must be >= 2"),
    ({"compression": {"mode": ""}}, "strategy.compression.mode", "non-empty"),
    ({"pipelining": {}}, "strategy.pipelining", "unknown strategy"),
    ({"tiered": 3}, "strategy.tiered", "must be a table"),
])
def test_bad_strategy_fields_name_the_field(table, field, problem):
    with pytest.raises(InputError, match=problem) as err:
        scenario_from_dict(_quickstart(strategy=table), "x.toml")
    assert err.value.field == field and err.value.source == "x.toml"


def test_strategy_round_trips_and_defaults():
    raw = {"speculative": {"k": 4, "adaptive": True, "fallback_acceptance": 0.5, "proposer": "draft"},
           "tiered": {"host_capacity_gib": 64.0, "chunk_tokens": 128}, "sequence_parallel": {"degree": 2},
           "compression": {"mode": "int8"}}
    spec = strategy_from_dict(raw)
    assert strategy_from_dict(strategy_to_dict(spec)) == spec
    assert spec.tiered == TieredSpec(host_capacity_gib=64.0, chunk_tokens=128)
    assert strategy_from_dict(None) == strategy_from_dict({}) == StrategySpec()
    assert StrategySpec().baseline and not spec.baseline
    assert scenario_from_dict(_quickstart()).strategy == StrategySpec()
    # the agreed format's example: a fixed K with fallback 0 (never) is valid
    example = {"k": 5, "adaptive": False, "fallback_acceptance": 0.0, "proposer": "draft"}
    assert strategy_from_dict({"speculative": example}).speculative.fallback_acceptance == 0.0


@pytest.mark.parametrize(("strategy", "profile", "field"), [
    (StrategySpec(speculative=SpeculativeSpec()), dataclasses.replace(SEED, speculative=None), "strategy.speculative"),
    (StrategySpec(compression=CompressionSpec("int8")), SEED, "strategy.compression.mode"),
    (StrategySpec(tiered=TieredSpec()), dataclasses.replace(SEED, paging={}), "strategy.tiered"),
    (StrategySpec(tiered=TieredSpec()), dataclasses.replace(SEED, paging={"device_host": SEED.paging["device_host"]}),
     "strategy.tiered.ssd_capacity_gib"),
])
def test_profile_checks_name_scenario_field_and_profile(strategy, profile, field):
    with pytest.raises(InputError) as err:
        PathStep(RunCosts.from_profile(profile, strategy, ["dialogue"], profile.kv_capacity_bytes, "s.toml"),
                 np.random.default_rng(0))
    assert err.value.field == field and err.value.source == "s.toml"
    assert profile.key_str() in err.value.problem


def test_speculation_needs_acceptance_for_every_task():
    with pytest.raises(InputError, match=r"no acceptance for task 'poetry'"):
        PathStep(RunCosts.from_profile(SEED, StrategySpec(speculative=SpeculativeSpec()), ["dialogue", "poetry"],
                                       SEED.kv_capacity_bytes), np.random.default_rng(0))


def test_tiering_to_host_only_needs_no_ssd_link():
    profile = dataclasses.replace(SEED, paging={"device_host": SEED.paging["device_host"]})
    costs = RunCosts.from_profile(profile, StrategySpec(tiered=TieredSpec(ssd_capacity_gib=0)), ["dialogue"],
                                  profile.kv_capacity_bytes)
    step = PathStep(costs, np.random.default_rng(0))
    assert step.kv_capacity_tokens == 8192 + SEED.hardware.host_memory_bytes // 327_680


# --- composition ------------------------------------------------------------------------------------
def test_fast_transforms_only_for_deterministic_paths():
    assert fast_transforms(RunCosts.for_scenario(load_scenario("quickstart"), SEED)) is None
    for strategy in ({"speculative": {}}, {"tiered": {}}, {"compression": {"mode": "int8"}, "tiered": {}}):
        assert fast_transforms(RunCosts.for_scenario(scenario_from_dict(_quickstart(strategy=strategy)), TINY)) is None
    with pytest.raises(InputError, match="strategy.compression.mode"):
        RunCosts.for_scenario(scenario_from_dict(_quickstart(strategy={"compression": {"mode": "int8"}})), SEED)


def test_build_step_model_baseline_and_paths():
    base = build_step_model(RunCosts.for_scenario(load_scenario("quickstart"), SEED), np.random.default_rng(0))
    assert isinstance(base, BaselineStep)
    scenario = scenario_from_dict(_quickstart(strategy={"speculative": {}, "sequence_parallel": {"degree": 2}}))
    paths = build_step_model(RunCosts.for_scenario(scenario, SEED), np.random.default_rng(0))
    assert isinstance(paths, PathStep) and paths.gpus == 2 == replica_gpus(scenario.strategy, SEED.key.tp)


def test_paths_that_change_nothing_cost_what_the_baseline_costs():
    """Tiering with room to spare and no speculation: the same iteration times up to float rounding."""
    base = BaselineStep(IterationCost.from_profile(SEED), 327_680, SEED.kv_capacity_bytes)
    tiered = PathStep(RunCosts.from_profile(SEED, StrategySpec(tiered=TieredSpec()), ["dialogue"],
                                            SEED.kv_capacity_bytes), np.random.default_rng(0))
    iterations = [([PrefillChunk(0, 0, 1000, 0, True)], []),
                  ([PrefillChunk(1, 0, 500, 0, True)], [Decode(0, 0, 1000, 9)]),
                  ([], [Decode(0, 0, 1001, 8), Decode(1, 0, 500, 9)]),
                  ([PrefillChunk(2, 0, 256, 300, False)], [Decode(0, 0, 1002, 7)])]
    for prefills, decodes in iterations:
        live = sum(d.context for d in decodes) + sum(p.context_before for p in prefills)
        a, b = base.step(prefills, decodes, live), tiered.step(prefills, decodes, live)
        assert b.seconds == pytest.approx(a.seconds, rel=1e-12) and (a.emitted == b.emitted).all()
        assert b.paging_s == 0.0 and b.paging_bytes == {}
    assert base.extrapolations() == tiered.extrapolations()


# --- end to end through runner.simulate -----------------------------------------------------------------
def test_all_strategies_absent_equals_the_baseline_bit_for_bit():
    plain = simulate(scenario_from_dict(_quickstart()), SEED, seed=3)
    empty = simulate(scenario_from_dict(_quickstart(strategy={})), SEED, seed=3)
    assert plain.runs[0].records == empty.runs[0].records
    assert all(r.draft_rounds == 0 and r.paging_s == 0.0 for r in empty.runs[0].records)


def _tpot_ms(result) -> float:
    done = [r for r in result.runs[0].records if r.completed and r.output_tokens > 1]
    return 1000 * float(np.mean([(r.finish_s - r.first_token_s) / (r.output_tokens - 1) for r in done]))


def _light(strategy: dict | None = None) -> dict:
    """One request at a time (0.02/s against ~10 s requests): batch 1, as the seed's tables are."""
    data = _quickstart(requests=40, strategy=strategy or {})
    data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 0.02}
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 4000}
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 200}
    return data


def test_speculation_end_to_end_matches_the_formula_at_batch_one():
    base = simulate(scenario_from_dict(_light()), SEED, seed=1)
    spec = simulate(scenario_from_dict(_light({"speculative": {}})), SEED, seed=1)
    a, c, k = 0.75, 0.265262, 5  # seed dialogue acceptance, draft cost ratio, K
    expected = (k * c + 1) / ((1 - a ** (k + 1)) / (1 - a))  # per-token latency ratio: 0.707
    assert _tpot_ms(spec) / _tpot_ms(base) == pytest.approx(expected, rel=0.05)
    records = spec.runs[0].records
    # each request emits 199 tokens after its first: accepted + 1 per round, and one plain step when a
    # single token is left (K is capped at remaining - 1 = 0 there)
    for r in records:
        assert r.draft_rounds >= math.ceil(198 / (k + 1))
        assert r.accepted_tokens + r.draft_rounds in (198, 199)


def test_paths_are_deterministic_per_seed():
    data = _quickstart(requests=40, strategy={"speculative": {"adaptive": True}, "tiered": {"host_capacity_gib": 1.0}})
    first = simulate(scenario_from_dict(copy.deepcopy(data)), SEED, seed=5).runs[0].records
    again = simulate(scenario_from_dict(copy.deepcopy(data)), SEED, seed=5).runs[0].records
    other = simulate(scenario_from_dict(copy.deepcopy(data)), SEED, seed=6).runs[0].records
    assert first == again and first != other


def test_tiered_admits_what_the_device_alone_rejects():
    data = _quickstart(requests=20)
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 12_000}  # beyond the seed's 8K-token budget
    base = simulate(scenario_from_dict(copy.deepcopy(data)), SEED, seed=0).runs[0].records
    data["strategy"] = {"tiered": {}}
    tiered = simulate(scenario_from_dict(data), SEED, seed=0).runs[0].records
    assert not any(r.completed for r in base)
    assert all(r.completed for r in tiered) and all(r.paging_s > 0 for r in tiered)


def test_sp_replica_occupies_p_gpus_end_to_end():
    """A replica with SP degree P occupies tp x P GPUs: replicas = gpus // (tp x P)."""
    data = _quickstart(requests=10, strategy={"sequence_parallel": {"degree": 2}})
    data["cluster"] = {"gpus": 2}
    assert SEED.key.tp * 2 == 2
    assert simulate(scenario_from_dict(copy.deepcopy(data)), SEED, seed=0).replicas == 1
    data["cluster"] = {"gpus": 5}
    assert simulate(scenario_from_dict(copy.deepcopy(data)), SEED, seed=0).replicas == 2
    data["strategy"] = {}
    assert simulate(scenario_from_dict(copy.deepcopy(data)), SEED, seed=0).replicas == 5


def test_too_few_gpus_for_one_sp_replica_names_cluster_gpus():
    data = _quickstart(requests=10, strategy={"sequence_parallel": {"degree": 4}})
    data["cluster"] = {"gpus": 3}
    with pytest.raises(InputError) as info:
        simulate(scenario_from_dict(data), SEED, seed=0)
    assert info.value.field == "cluster.gpus" and "4 GPUs" in str(info.value)


def test_compression_admits_more_sequences_end_to_end():
    """cpu-tiny holds 16,384 tokens of fp32 KV: 8 requests of 2,000 tokens; int8 holds 1 / its ratio times more."""
    data = _quickstart(requests=60, profile="cpu-tiny")
    data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 1000.0}  # all queued at once
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 1900}
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 100}
    data["batching"] = {"max_batch_size": 64}
    base = simulate(scenario_from_dict(copy.deepcopy(data)), TINY, seed=0).runs[0].records
    data["strategy"] = {"compression": {"mode": "int8"}}
    comp = simulate(scenario_from_dict(data), TINY, seed=0).runs[0].records
    per_token = math.ceil(3072 * TINY.compression["int8"].kv_bytes_ratio.value)
    assert peak_in_flight(base) == 16_384 // 2000 == 8
    # derived from the profile's measured ratio (int8 0.344 since the compressed-store calibration: 23)
    expected = (TINY.kv_capacity_bytes // per_token) // 2000
    assert peak_in_flight(comp) == expected > 2 * 8
    assert all(r.completed for r in base + comp)


@pytest.mark.parametrize(("name", "strategy"), [
    ("cpu-tiny", {"compression": {"mode": "int8"}}),
    ("seed-llama2-70b-a100", {"sequence_parallel": {"degree": 2}}),
    ("cpu-tiny", {"compression": {"mode": "mixed-int4"}, "sequence_parallel": {"degree": 2}}),
])
def test_deterministic_paths_keep_the_exact_fast_path(name, strategy):
    """Compression and SP alone are a transformed cost model: the fast replica given path_cost's model,
    bytes per token and capacity serves the same records, bit for bit, as the loop with TransformedStep."""
    from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
    from tripath.simulator.loop.replica import ReplicaConfig
    from tripath.simulator.loop.stepper_setup import stepper_setup
    from tripath.simulator.scenario.workload import generate_requests

    profile = resolve_profile(name)
    data = _quickstart(requests=150, profile=name, strategy=strategy)
    data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 2.0}
    scenario = scenario_from_dict(data)
    seq = np.random.SeedSequence(0)
    requests = generate_requests(scenario.workload, np.random.default_rng(seq), 2.0)
    costs = RunCosts.for_scenario(scenario, profile)
    model = build_step_model(costs, np.random.default_rng(0))
    capacity = model.kv_capacity_tokens * model.kv_bytes_per_token
    batching = scenario.batching
    config = ClusterConfig(1, ReplicaConfig(batching.max_batch_size, batching.max_batched_tokens, capacity,
                                            model.kv_bytes_per_token))
    transforms = fast_transforms(costs)
    assert (transforms.kv_bytes_per_token, transforms.kv_capacity_bytes) == (model.kv_bytes_per_token,
                                                                             model.transforms.kv_capacity_bytes)
    fast = simulate_requests(requests, config, transforms.cost)
    setup = stepper_setup(scenario, costs, 1, seq, force=True)
    loop = simulate_requests(requests, config, IterationCost.from_profile(profile), setup=setup)
    strip = [dataclasses.replace(r, merge_s=0.0) for r in loop.records]  # the loop also records merge time
    assert fast.records == tuple(strip)
    assert any(r.completed for r in fast.records)
