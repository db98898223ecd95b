"""The engine and the simulator agree exactly on prefix hits: the same requests, one at a time, on the same number
of blocks of the same size, give the same hits, evictions and evicted hashes (one PrefixBlockIndex policy, the
simulator keyed by the engine's prompt token ids)."""

from __future__ import annotations

import pytest
import torch

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.simulator.paths.prefix import PrefixCache, PrefixSetup
from tripath.simulator.scenario.prefix_workload import RequestPrefixes
from tripath.simulator.scenario.strategy import PrefixCacheSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BS, BLOCKS, OUTPUT = 4, 12, 6


def _tokens(seed: int, n: int) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("order", [[0, 1, 0, 2, 1, 0, 2, 2, 1, 0], [2, 2, 0, 0, 1, 1, 0, 2]])
def test_engine_and_simulator_hit_and_evict_the_same_blocks(order: list[int]) -> None:
    systems = [_tokens(50 + s, 9 + 3 * s) for s in range(3)]
    prompts = [systems[s] + _tokens(60 + i, 2 + i % 3) for i, s in enumerate(order)]
    model = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()
    engine = Engine(model, EngineConfig(block_size=BS, num_blocks=BLOCKS, prefix_caching=True))
    for prompt in prompts:  # one at a time, in order
        engine.generate([prompt], OUTPUT)

    setup = PrefixSetup.build(PrefixCacheSpec(block_tokens=BS), RequestPrefixes.from_tokens(prompts, BS))
    sim = PrefixCache(setup, capacity_tokens=BLOCKS * BS, kv_bytes_per_token=1, work_ms=lambda t, c: float(t))
    for request, prompt in enumerate(prompts):
        # the KV the engine's sequence holds at its longest: prompt + output - 1 (the last token is never fed back)
        plan = sim.plan(request, len(prompt), len(prompt) + OUTPUT - 1)
        assert plan is not None
        sim.commit(request, len(prompt), plan)
        sim.finish(request)

    stats = engine.kv_manager.prefix_stats
    assert stats.evictions > 0 and stats.hit_blocks > 0  # the pool was under pressure and prefixes were reused
    assert (sim.counters.hit_blocks, sim.counters.queried_blocks, sim.counters.evictions) == (
        stats.hit_blocks, stats.queried_blocks, stats.evictions)
    assert sim.index.evicted == engine.kv_manager.index.evicted
    assert sim.cached_tokens == engine.kv_manager.cached_tokens
