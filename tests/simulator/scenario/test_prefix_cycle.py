"""The cycle prefix kind (tripath/simulator/scenario/prefix_workload.py): request i sends prompt i mod N, as
inference-perf's load generator did, so every repeat is served from the prefix cache."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from tests.helpers import SEED, apply_patch
from tripath.core.errors import InputError
from tripath.core.prefix import max_hit_blocks
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.workload import generate_requests, generate_with_prefixes, mean_lengths
from tripath.simulator.summary import summary

BT = 16


def cycle(prompts: int = 7, requests: int = 60, **prefix: Any) -> dict[str, Any]:
    return {
        "name": "cycle",
        "workload": {"requests": requests, "arrival": {"kind": "poisson", "rate_per_s": 0.5},
                     "prompt_tokens": {"kind": "uniform", "low": 40, "high": 400},
                     "output_tokens": {"kind": "uniform", "low": 2, "high": 30},
                     "prefix": {"kind": "cycle", "prompts": prompts, **prefix}},
        "cluster": {"gpus": 1},
        "strategy": {"prefix_cache": {"block_tokens": BT}},
    }


def draws(data: dict[str, Any], seed: int = 0):
    workload = scenario_from_dict(data, "inline.toml").workload
    return generate_with_prefixes(workload, np.random.default_rng(seed), 0.5, BT)


def test_lengths_and_blocks_repeat_at_lag_n_exactly() -> None:
    requests, prefixes = draws(cycle())
    prompts = [r.prompt_tokens for r in requests]
    assert all(prompts[i] == prompts[i - 7] for i in range(7, 60))
    assert all(prefixes.keys[i] == prefixes.keys[i - 7] for i in range(7, 60))
    assert len({prefixes.keys[i][0] for i in range(7)}) == 7  # N distinct prompts
    # the first N draws are the workload's own; outputs, arrivals and tasks do not change
    plain = copy.deepcopy(cycle())
    del plain["workload"]["prefix"]
    own = generate_requests(scenario_from_dict(plain, "inline.toml").workload, np.random.default_rng(0), 0.5)
    assert prompts[:7] == [r.prompt_tokens for r in own[:7]]
    assert [(r.arrival_s, r.output_tokens) for r in requests] == [(r.arrival_s, r.output_tokens) for r in own]


def test_system_prompt_groups_share_their_leading_blocks() -> None:
    requests, prefixes = draws(cycle(prompts=6, system_prompts=2, system_tokens=64))
    plain = copy.deepcopy(cycle(prompts=6))
    own, _ = draws(plain)
    assert [r.prompt_tokens for r in requests] == [r.prompt_tokens + 64 for r in own]
    keys = prefixes.keys
    head = [k[:4] for k in keys[:6]]  # 64 tokens = 4 blocks of the group's system prompt
    assert head[0] == head[2] == head[4] and head[1] == head[3] == head[5] and head[0] != head[1]
    assert keys[0][4] != keys[2][4]  # then each prompt's own tokens
    workload = scenario_from_dict(cycle(prompts=6, system_prompts=2, system_tokens=64), "inline.toml").workload
    assert mean_lengths(workload)[0] == pytest.approx(220.0 + 64)


@pytest.mark.parametrize(("n_prompts", "requests"), [(5, 80), (12, 65)])
def test_every_repeat_hits_the_cache_entirely(n_prompts: int, requests: int) -> None:
    """With a cache larger than the N prompts, the block hit rate is the repeats' share of the queried blocks:
    (n - N) / n when every prompt is queried equally often."""
    result = simulate(scenario_from_dict(cycle(n_prompts, requests), "inline.toml"), SEED, seed=1)
    run = result.runs[0]
    eligible = [max_hit_blocks(r.prompt_tokens, BT) for r in run.records]
    first = sum(eligible[:n_prompts])
    counters = run.prefix.counters
    assert counters.queried_blocks == sum(eligible)
    assert counters.hit_blocks == sum(eligible) - first
    assert run.prefix.cached_tokens == {i: (0 if i < n_prompts else eligible[i] * BT) for i in range(requests)}
    rate = summary(result)["prefix_cache"]["hit_rate"]["blocks"]["mean"]
    assert rate == pytest.approx(1 - first / sum(eligible))
    # equal weights when n is a multiple of N; else the first requests' share differs by a part of a cycle
    tolerance = 0.0 if requests % n_prompts == 0 else n_prompts / requests
    assert rate == pytest.approx((requests - n_prompts) / requests, abs=tolerance + 1e-12)


@pytest.mark.parametrize(("prefix", "field"), [
    ({"prompts": None}, "workload.prefix.prompts"),
    ({"prompts": 0}, "workload.prefix.prompts"),
    ({"system_prompts": 2}, "workload.prefix.system_tokens"),
    ({"system_tokens": 32}, "workload.prefix.system_prompts"),
    ({"system_prompts": 0, "system_tokens": 32}, "workload.prefix.system_prompts"),
    ({"kind": "shared", "system_prompts": 1, "system_tokens": 8, "users_per_prompt": 1, "turns": 1},
     "workload.prefix.prompts"),
])
def test_bad_cycle_tables_name_the_field(prefix: dict[str, Any], field: str) -> None:
    data = cycle()
    apply_patch(data["workload"]["prefix"], prefix)
    with pytest.raises(InputError, match=f"inline.toml: {field}:"):
        scenario_from_dict(data, "inline.toml")
