"""A profile with attention data parallelism (ProfileKey.attention_dp) runs a replica of lockstep ranks: the GPUs
count tp per rank, each rank has the profile's KV budget, and what cannot be modelled is refused with a reason."""

from __future__ import annotations

import dataclasses

import pytest

from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError
from tripath.profile.profile import load_profile
from tripath.simulator.runner import cluster_config, simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.summary import summary


def dp_profile(ranks: int = 2):
    """A shipped MoE profile re-keyed as one rank of tp 1 (its costs kept: the mechanics, not the numbers)."""
    profile = load_profile(PROFILES_DIR / "aic-qwen3-235b-a22b-tp2-h200-fp8-ep.json")
    return dataclasses.replace(profile, key=dataclasses.replace(profile.key, tp=1, attention_dp=ranks))


def scenario(gpus: int, **strategy):
    return scenario_from_dict({
        "name": "dp", "workload": {"requests": 120, "arrival": {"kind": "poisson", "rate_per_s": 4.0},
                                   "tasks": {"dialogue": 1.0},
                                   "prompt_tokens": {"kind": "fixed", "value": 900},
                                   "output_tokens": {"kind": "fixed", "value": 40}},
        "cluster": {"gpus": gpus, **strategy.pop("cluster", {})},
        "strategy": strategy}, None)


def test_key_names_the_ranks() -> None:
    key = dp_profile(4).key
    assert key.gpus == 4 and str(key).endswith("/tp1/dp4/ep/" + key.engine_commit)


def test_replicas_are_groups_of_ranks() -> None:
    profile = dp_profile(2)
    config, source = cluster_config(scenario(5), profile)
    assert (config.replicas, config.ranks, config.steppers) == (2, 2, 4)  # 5 GPUs hold two replicas of 1 x 2
    assert config.replica.kv_capacity_bytes == profile.kv_capacity_bytes
    assert "per attention data-parallel rank" in source
    result = simulate(scenario(4), profile, seed=1)
    records = result.runs[0].records
    assert all(r.completed for r in records)
    assert {r.replica for r in records} <= {0, 1, 2, 3} and len({r.replica for r in records}) == 4
    assert len(result.runs[0].replicas) == 4
    assert len(summary(result)["utilisation"]) == 4


def test_a_dp_replica_needs_all_its_gpus() -> None:
    with pytest.raises(InputError, match="attention data-parallel ranks 4"):
        cluster_config(scenario(3), dp_profile(4))


def test_refused_with_a_reason() -> None:
    with pytest.raises(InputError, match="device_memory_gib"):
        simulate(scenario(2, cluster={"device_memory_gib": 141}), dp_profile(2))
    dense = load_profile(PROFILES_DIR / "aic-llama3.1-70b-tp2-h100-fp8.json")
    with pytest.raises(InputError, match="key.attention_dp"):
        dataclasses.replace(dense, key=dataclasses.replace(dense.key, attention_dp=2))
