"""The prefix-caching validation scenario's two sides: prompts built from the simulator's block keys share blocks
exactly where the keys repeat, and the engine's hit rate equals the simulator's on the same requests."""

from __future__ import annotations

import copy
import tomllib

import numpy as np
import pytest
import torch

from tripath.core.data_dirs import MODELS_DIR, SCENARIOS_DIR
from tripath.core.prefix import token_block_hashes
from tripath.core.request import RequestSpec
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.workload_replay import PromptSource
from tripath.fidelity.engine_settings import BLOCK_SIZE
from tripath.fidelity.engine_side import KeyedPrompts, engine_config, measure, unsupported
from tripath.fidelity.sim_side import prefix_keys_for, requests_for, simulate_case
from tripath.profile.profile import resolve_profile

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PATH = SCENARIOS_DIR / "validation" / "prefix-shared.toml"


def _scenario(requests: int) -> dict:
    data = tomllib.loads(PATH.read_text(encoding="utf-8"))
    data["workload"]["requests"] = requests
    return data


def test_keyed_prompts_repeat_blocks_exactly_where_keys_repeat() -> None:
    keys = ((b"a", b"b"), (b"a", b"c"), (b"a", b"b"))
    specs = [RequestSpec(i, float(i), n, 4, "dialogue") for i, n in enumerate((2 * BLOCK_SIZE + 3, 40, 2 * BLOCK_SIZE))]
    prompts = KeyedPrompts(keys, BLOCK_SIZE, specs, PromptSource(np.random.default_rng(0), 256, None),
                           lambda p, o: None)
    ids = [prompts.prompt("dialogue", s.prompt_tokens) for s in specs]
    assert [len(p) for p in ids] == [35, 40, 32]
    hashes = [token_block_hashes(p, BLOCK_SIZE) for p in ids]
    assert hashes[0][0] == hashes[1][0] == hashes[2][0] and hashes[0][1] == hashes[2][1] != hashes[1][1]
    with pytest.raises(IndexError):
        prompts.prompt("dialogue", 8)  # all handed out


def test_the_engine_side_is_built_with_the_prefix_cache_and_checks_its_block_size() -> None:
    data = _scenario(4)
    assert unsupported(data) is None and engine_config(data, 4096, 6).prefix_caching
    bad = copy.deepcopy(data)
    bad["strategy"]["prefix_cache"]["block_tokens"] = 512
    assert "block_tokens = 16" in (unsupported(bad) or "")


def test_engine_and_simulator_hit_the_same_share_of_prompt_tokens() -> None:
    data, profile = _scenario(16), resolve_profile("cpu-tiny")
    requests, kv_tokens = requests_for(data, str(PATH), profile, 0)
    keys = prefix_keys_for(data, str(PATH), profile, 0)
    assert keys is not None and len(keys.keys) == len(requests)
    _, target = load_checkpoint(str(MODELS_DIR / "tiny-target"), device="cpu")
    real = measure(data, requests, target.to(torch.float32), None, kv_tokens, 0, 4, clock="cpu", prefix_keys=keys)
    sim = simulate_case(data, str(PATH), profile, 0)
    rate = real.paths["prefix_hit_rate"][0]
    assert rate is not None and rate > 0.3  # turns and users share the system prompts and the history
    assert rate == sim.paths["prefix_hit_rate"][0]
