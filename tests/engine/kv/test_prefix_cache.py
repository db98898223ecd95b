"""Prefix caching in the engine: the same tokens as without it, fewer prefilled, hits as PrefixBlockIndex replays."""

from __future__ import annotations

import pytest
import torch

from tripath.core.prefix import PrefixBlockIndex, max_hit_blocks, token_block_hashes
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.kv.paged import KVCacheManager, OutOfBlocks
from tripath.engine.kv.prefix_cache import PrefixCachingKVManager
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.sequence import Sequence
from tripath.engine.tiered.tier_config import TierConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BS = 4


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    return LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()  # fp32


def _tokens(seed: int, n: int) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _config(**kw: object) -> EngineConfig:
    return EngineConfig(**{"block_size": BS, "num_blocks": 128, **kw})  # type: ignore[arg-type]


def _run(model: LlamaModel, config: EngineConfig, prompts: list[list[int]], n: int, one_at_a_time: bool,
         ) -> tuple[list[list[int]], Engine, list]:
    """Outputs, the engine and its step records; one_at_a_time runs each request alone, in order."""
    engine = Engine(model, config)
    records: list = []
    groups = [[p] for p in prompts] if one_at_a_time else [prompts]
    outs: list[list[int]] = []
    for group in groups:
        ids = [engine.add_request(p, n) for p in group]
        while engine.has_unfinished:
            records.append(engine.step())
        outs += [engine.output(i) for i in ids]
    return outs, engine, records


def _compare(model: LlamaModel, prompts: list[list[int]], n: int, one_at_a_time: bool, **kw: object,
             ) -> tuple[list[list[int]], Engine, list]:
    """Runs with and without prefix caching on the same config; asserts the same tokens; returns the cached run."""
    want, _, plain_records = _run(model, _config(**kw), prompts, n, one_at_a_time)
    got, engine, records = _run(model, _config(prefix_caching=True, **kw), prompts, n, one_at_a_time)
    assert got == want
    saved = sum(r.prefill_tokens for r in plain_records) - sum(r.prefill_tokens for r in records)
    manager = engine.kv_manager
    assert isinstance(manager, PrefixCachingKVManager)
    if not any(r.num_preempted for r in plain_records + records):
        assert saved == manager.hit_tokens  # every hit token is a prompt token not prefilled
    manager.index.check()
    assert manager.blocks_used == 0 and manager.pool.num_free == manager.pool.num_blocks
    return got, engine, records


def test_off_is_the_plain_pool(model: LlamaModel) -> None:
    assert type(Engine(model, _config()).kv_manager) is KVCacheManager
    assert KVCacheManager(4, BS).cached_prefix(None) == 0  # type: ignore[arg-type]


def test_shared_system_prompt_hits_its_full_blocks(model: LlamaModel) -> None:
    system = _tokens(10, 13)  # 3 full blocks of 4, one token into the 4th
    prompts = [system + _tokens(20 + i, 6) for i in range(3)]
    for one_at_a_time in (True, False):
        _, engine, _ = _compare(model, prompts, 8, one_at_a_time)
        # the first request misses; each later one hits the system prompt's 3 full blocks
        assert engine.kv_manager.prefix_stats.hit_blocks == 6
        assert engine.kv_manager.hit_tokens == 24
        assert [engine.kv_manager.cached_tokens[i] for i in range(3)] == [0, 12, 12]


def test_same_step_admissions_share_blocks_registered_in_that_step(model: LlamaModel) -> None:
    system = _tokens(11, 16)
    prompts = [system + _tokens(30 + i, 3) for i in range(4)]
    _, engine, records = _compare(model, prompts, 5, one_at_a_time=False)
    assert records[0].admitted == (0, 1, 2, 3)
    # request 0 computes all 19 tokens; the others take 4 blocks and prefill 3 tokens each
    assert records[0].prefill_tokens == 19 + 3 * 3
    assert [s for s in records[0].chunk_shapes] == [(0, 19), (16, 3), (16, 3), (16, 3)]


def test_a_full_hit_still_computes_the_last_prompt_token(model: LlamaModel) -> None:
    prompt = _tokens(12, 12)  # exactly 3 blocks: at most 2 may hit
    _, engine, records = _compare(model, [prompt, prompt], 6, one_at_a_time=True)
    assert engine.kv_manager.cached_tokens[1] == 8
    second = next(r for r in records if r.admitted == (1,))
    assert second.chunk_shapes == ((8, 4),)


def test_multi_turn_reuses_the_earlier_turns_prompt_blocks(model: LlamaModel) -> None:
    engine = Engine(model, _config(prefix_caching=True))
    plain = Engine(model, _config())
    turn = _tokens(13, 9)
    expected_hits = previous_prompt = 0
    for t in range(4):
        out = engine.generate([turn], 7)[0]
        assert out == plain.generate([turn], 7)[0]
        # only the previous turn's full prompt blocks are cached (its answer's blocks are its own, as in the
        # simulator); the previous prompt is a prefix of this one
        expected_hits += min(previous_prompt // BS, max_hit_blocks(len(turn), BS))
        assert engine.kv_manager.prefix_stats.hit_blocks == expected_hits
        assert engine.kv_manager.cached_tokens[t] == previous_prompt // BS * BS
        previous_prompt = len(turn)
        turn = turn + out + _tokens(40 + t, 5)
    assert expected_hits == 2 + 5 + 8  # prompts of 9, 21, 33 tokens before turns 1, 2, 3


def _replay(requests: list[tuple[list[int], list[int]]], num_blocks: int) -> PrefixBlockIndex:
    """The engine's operation order for requests run one at a time: look up, allocate the prompt's blocks,
    register its full ones, grow by one token per decode, release."""
    index = PrefixBlockIndex(num_blocks)
    for prompt, out in requests:
        tokens = prompt + out[:-1]
        hashes = token_block_hashes(prompt, BS)
        blocks = index.acquire(hashes[: max_hit_blocks(len(prompt), BS)])
        hit = len(blocks)
        while len(blocks) * BS < len(prompt):
            blocks.append(index.allocate())
        for i in range(hit, len(prompt) // BS):
            index.register(blocks[i], hashes[i])
        for t in range(len(prompt) + 1, len(tokens) + 1):
            if len(blocks) * BS < t:
                blocks.append(index.allocate())
        index.release(blocks)
    return index


def test_hits_and_evictions_equal_a_direct_replay_under_eviction_pressure(model: LlamaModel) -> None:
    systems = [_tokens(50 + s, 9 + 3 * s) for s in range(3)]
    order = [0, 1, 0, 2, 1, 0, 2, 2, 1, 0]
    prompts = [systems[s] + _tokens(60 + i, 2 + i % 3) for i, s in enumerate(order)]
    outs, engine, _ = _compare(model, prompts, 6, one_at_a_time=True, num_blocks=12)
    stats = engine.kv_manager.prefix_stats
    assert stats.evictions > 0 and stats.hit_blocks > 0
    replay = _replay(list(zip(prompts, outs, strict=True)), 12)
    assert (stats.hit_blocks, stats.queried_blocks, stats.evictions) == (
        replay.stats.hit_blocks, replay.stats.queried_blocks, replay.stats.evictions)
    assert engine.kv_manager.index.evicted == replay.evicted
    assert engine.kv_manager.index.lru_order() == replay.lru_order()


def test_preemption_with_shared_prefixes_keeps_outputs(model: LlamaModel) -> None:
    system = _tokens(14, 12)
    prompts = [system + _tokens(70 + i, 3 + 2 * i) for i in range(6)]
    _, engine, records = _compare(model, prompts, 10, one_at_a_time=False, num_blocks=16, max_batched_tokens=20)
    assert sum(r.num_preempted for r in records) > 0
    assert engine.kv_manager.prefix_stats.hit_blocks > 0


def test_a_hit_that_takes_idle_blocks_counts_them_as_needed() -> None:
    manager = PrefixCachingKVManager(3, BS)

    first = Sequence(0, list(range(9)), 1)
    assert manager.cached_prefix(first) == 0
    manager.reserve(0, 9)  # 3 blocks, 2 of them full and registered
    manager.free(0)
    assert manager.pool.num_free == 3 and manager.index.num_cached == 2
    second = Sequence(1, list(range(8)) + [99, 98, 97, 96, 95], 1)
    assert manager.cached_prefix(second) == 8
    # 13 tokens = 4 blocks: 2 hit (leaving the LRU), 2 new; only 1 block remains allocatable
    assert manager.blocks_needed(1, 13) == 4 and not manager.can_reserve(1, 13)
    with pytest.raises(OutOfBlocks):
        manager.reserve(1, 13)
    assert manager.index.refcount == [0, 0, 0]  # all-or-nothing
    assert manager.can_reserve(1, 12)
    manager.reserve(1, 12)
    assert manager.block_table(1)[:2] == [0, 1] and manager.cached_tokens[1] == 8
    # its 3 full prompt blocks are registered: a rollback may not reach into them, only past them
    with pytest.raises(ValueError, match="into its 3 cached prompt block"):
        manager.truncate(1, 8)
    manager.truncate(1, 12)
    assert manager.block_table(1)[:2] == [0, 1] and manager.index.num_cached == 3
    manager.index.check()


def test_speculative_decoding_over_the_prefix_cache_keeps_its_tokens(model: LlamaModel) -> None:
    """The speculative engine looks prefixes up too: rejected drafts roll back only past the cached prompt
    blocks, so greedy outputs equal the target alone's, with and without the cache, bit for bit in fp32."""
    from tripath.core.speculative import FixedK
    from tripath.engine.speculative.decoding import SpeculativeDecoding
    from tripath.engine.speculative.proposers import DraftModelProposer

    draft = LlamaModel(PRESETS["tiny-mha"], torch.Generator().manual_seed(2)).eval()
    system = _tokens(40, 41)
    prompts = [system + _tokens(41 + i, n) for i, n in enumerate((7, 13, 3, 9))]
    want = [Engine(model, _config()).generate([p], 16)[0] for p in prompts]
    for one_at_a_time in (True, False):
        config = _config(prefix_caching=True)
        proposer = DraftModelProposer(draft, config.num_blocks, config.block_size)
        engine = Engine(model, config, strategy=SpeculativeDecoding(proposer, FixedK(4)))
        groups = [[p] for p in prompts] if one_at_a_time else [prompts]
        got = []
        for group in groups:
            ids = [engine.add_request(p, 16) for p in group]
            while engine.has_unfinished:
                engine.step()
            got += [engine.output(i) for i in ids]
        assert got == want
        assert engine.strategy.counters.num_drafts > 0
        manager = engine.kv_manager
        assert isinstance(manager, PrefixCachingKVManager)
        if one_at_a_time:  # each later request hits the system prompt's 10 full blocks
            assert manager.hit_tokens == 3 * 10 * BS
        manager.index.check()


def test_prefix_caching_is_refused_with_compression_not_tiering() -> None:
    with pytest.raises(ValueError, match="EngineConfig.prefix_caching: cannot be combined with kv_compression"):
        EngineConfig(prefix_caching=True, kv_compression="int8")
    assert EngineConfig(prefix_caching=True, tiered=TierConfig()).prefix_caching  # tests/engine/tiered
