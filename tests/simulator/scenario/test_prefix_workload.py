"""Prefix structure of workloads: the shared-prefix chat generator, the per-task share, trace hash_ids."""

from __future__ import annotations

import numpy as np

from tripath.core.prefix import chain_hashes
from tripath.simulator.scenario.prefix_workload import (
    PrefixWorkloadSpec,
    request_prefixes,
    shared_prompt_lengths,
)
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.workload import generate_requests, generate_with_prefixes, mean_lengths

CHAT = PrefixWorkloadSpec("shared", system_prompts=1, system_tokens=100, users_per_prompt=2, turns=3)


def test_each_turn_carries_the_conversation_so_far() -> None:
    questions = np.array([10, 20, 11, 21, 12, 22, 13], dtype=np.int64)
    answers = np.array([5, 6, 7, 8, 9, 4, 3], dtype=np.int64)
    # two conversations side by side (slots 0, 1); the 7th request starts slot 0's next conversation
    expected = [100 + 10, 100 + 20, 100 + 15 + 11, 100 + 26 + 21, 100 + 15 + 18 + 12, 100 + 26 + 29 + 22, 100 + 13]
    assert shared_prompt_lengths(CHAT, questions, answers).tolist() == expected


def _hashes(keys: tuple[bytes, ...]) -> list[int]:
    return chain_hashes(keys)


def test_shared_blocks_conversation_blocks_and_fresh_conversations() -> None:
    spec = PrefixWorkloadSpec("shared", system_prompts=2, system_tokens=64, users_per_prompt=1, turns=2)
    prompts = np.array([100, 100, 200, 200, 100], dtype=np.int64)
    out = request_prefixes(spec, prompts, np.zeros(5, dtype=np.int64), ["default"], None, None, 32,
                           np.random.default_rng(0))
    h = [_hashes(k) for k in out.keys]
    assert [len(x) for x in h] == [3, 3, 6, 6, 3]
    assert h[0][:2] != h[1][:2]  # two system prompts
    assert h[2][:3] == h[0]  # turn 2 of conversation 0 extends turn 1
    assert h[4][:2] == h[0][:2] and h[4][2] != h[0][2]  # a fresh conversation on system prompt 0: only it shared
    assert out.reusable


def test_task_share_keys_the_shared_fraction_per_task() -> None:
    spec = PrefixWorkloadSpec("share", share=(("a", 0.5),), prefixes=1)
    prompts = np.array([400, 400, 400], dtype=np.int64)
    picks = np.array([0, 0, 1], dtype=np.int64)  # a, a, b
    out = request_prefixes(spec, prompts, picks, ["a", "b"], None, None, 100, np.random.default_rng(0))
    h = [_hashes(k) for k in out.keys]
    assert h[0][:2] == h[1][:2] and h[0][2] != h[1][2]  # 200 of 400 tokens shared: 2 of 4 blocks
    assert h[2][0] not in (h[0][0], h[1][0])  # task b shares nothing


def test_prefix_keys_leave_the_requests_unchanged() -> None:
    data = {"name": "w", "workload": {"requests": 50, "arrival": {"kind": "poisson", "rate_per_s": 3.0},
                                      "prompt_tokens": {"kind": "uniform", "low": 10, "high": 900},
                                      "output_tokens": {"kind": "fixed", "value": 4},
                                      "prefix": {"kind": "share", "share": {"default": 0.5}, "prefixes": 3}}}
    workload = scenario_from_dict(data, "inline.toml").workload
    plain = generate_requests(workload, np.random.default_rng(7), 3.0)
    with_keys, prefixes = generate_with_prefixes(workload, np.random.default_rng(7), 3.0, 64)
    assert plain == with_keys
    assert [len(k) for k in prefixes.keys] == [r.prompt_tokens // 64 for r in plain]


def test_mean_prompt_of_the_chat_generator() -> None:
    data = {"name": "w", "workload": {"requests": 60, "arrival": {"kind": "poisson", "rate_per_s": 3.0},
                                      "prompt_tokens": {"kind": "fixed", "value": 10},
                                      "output_tokens": {"kind": "fixed", "value": 5},
                                      "prefix": {"kind": "shared", "system_prompts": 2, "system_tokens": 100,
                                                 "users_per_prompt": 5, "turns": 3}}}
    workload = scenario_from_dict(data, "inline.toml").workload
    requests = generate_requests(workload, np.random.default_rng(0), 3.0)
    # 60 requests = 10 conversations x 3 turns x 2: turns 0, 1, 2 equally often -> 100 + 10 + 15 on average
    assert mean_lengths(workload)[0] == np.mean([r.prompt_tokens for r in requests]) == 125.0


def test_keys_from_token_ids_chain_to_the_engines_hashes() -> None:
    from tripath.core.prefix import token_block_hashes
    from tripath.simulator.scenario.prefix_workload import RequestPrefixes

    prompts = [list(range(10)), [3, 1, 4, 1, 5, 9, 2, 6]]
    out = RequestPrefixes.from_tokens(prompts, 4)
    assert [chain_hashes(k) for k in out.keys] == [token_block_hashes(p, 4) for p in prompts]
    assert [len(k) for k in out.keys] == [2, 2]
