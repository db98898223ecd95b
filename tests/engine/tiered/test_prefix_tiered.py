"""Prefix caching over the tiered KV store: prefix pages go down to host and SSD, come back on a hit, and the
tokens are those of the engine without caching; hits equal the plain pool's and the simulator's on the same
requests; an evicted prefix leaves every tier; a damaged prefix page fails its reader and is never hit again."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from tests.helpers import FaultyFS, dense_greedy
from tripath.core.prefix import token_block_hashes
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.kv.prefix_cache import PrefixCachingKVManager
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.step_record import StepRecord
from tripath.engine.tiered.cache import TieredKVCache
from tripath.engine.tiered.prefix_links import shared_owner
from tripath.engine.tiered.store import TieredPrefixAccounting
from tripath.engine.tiered.tier_config import TierConfig
from tripath.simulator.paths.prefix import PrefixCache, PrefixSetup
from tripath.simulator.scenario.prefix_workload import RequestPrefixes
from tripath.simulator.scenario.strategy import PrefixCacheSpec

CFG = PRESETS["tiny-gqa"]  # 2 layers
CHUNK, NEW = 16, 8
# one sequence of <= 64 tokens: 2 layers x 3 pinned chunks (sink, window, straddle) + 1 unpinned = 7 device pages;
# 10 device pages leave 3 for cached prefix pages, the 8 host pages hold the next ones, older ones go to the SSD
TIERS = {"chunk_tokens": CHUNK, "device_pages": 10, "host_pages": 8, "ssd_pages": 200, "sink_tokens": 4,
         "window_tokens": 16}
BATCH = {"block_size": CHUNK, "max_batched_tokens": 40}  # prompts of 53-56 tokens are prefilled in two chunks


@pytest.fixture(scope="module")
def model(one_torch_thread) -> LlamaModel:
    return LlamaModel(CFG, torch.Generator().manual_seed(1)).eval()  # fp32


def _tokens(seed: int, n: int) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _systems(n: int) -> list[list[int]]:
    return [_tokens(100 + s, 3 * CHUNK) for s in range(n)]  # 3 full chunks each


def _tiered(tmp_path: Path, prefix: bool, **kw: object) -> EngineConfig:
    tiers = TierConfig(**{**TIERS, "ssd_dir": str(tmp_path), **kw})  # type: ignore[arg-type]
    return EngineConfig(tiered=tiers, prefix_caching=prefix, **BATCH)  # type: ignore[arg-type]


def _serve(engine: Engine, groups: list[list[list[int]]]) -> tuple[list[list[int]], list[StepRecord]]:
    """Each group of prompts added together and run to the end, group after group: outputs, step records."""
    outs: list[list[int]] = []
    records: list[StepRecord] = []
    for group in groups:
        ids = [engine.add_request(p, NEW) for p in group]
        while engine.has_unfinished:
            records.append(engine.step())
        outs += [engine.output(i) for i in ids]
    return outs, records


def _assert_nothing_left(engine: Engine) -> None:
    """After every request: only cached prefix pages remain, one per layer of each cached block; dropping the
    cached blocks empties every tier."""
    manager, cache = engine.kv_manager, engine.backend.cache
    assert isinstance(manager, TieredPrefixAccounting)
    manager.index.check()
    assert manager.blocks_used == 0 and not cache.prefix.links and not cache.lengths
    assert cache.residency() == cache.residency(prefix_only=True)
    cached = {b for b in range(manager.index.num_blocks) if manager.index.hash_of(b) is not None}
    assert {shared_owner(key[0]) for key in cache.pages} <= cached  # an evicted block has no page anywhere
    assert sum(cache.residency().values()) <= len(cached) * CFG.num_layers
    manager.drop_cached()
    assert manager.index.num_cached == 0
    assert cache.residency() == {"device": 0, "host": 0, "ssd": 0}
    tiers = cache.tiers
    assert tiers.device_pool.num_free == tiers.device_pool.capacity
    assert tiers.host_pool.num_free == tiers.host_pool.capacity and not tiers.ssd.live


@pytest.mark.parametrize("prefetch", [False, True])
def test_hits_come_back_from_host_and_ssd_with_the_tokens_of_no_caching(model, tmp_path, prefetch):
    systems = _systems(3)
    order = [0, 1, 2, 0, 2, 1, 1, 0]
    prompts = [systems[s] + _tokens(200 + i, 5 + i % 4) for i, s in enumerate(order)]
    one_at_a_time = [[p] for p in prompts]
    with Engine(model, _tiered(tmp_path / "off", False, prefetch=prefetch)) as plain:
        want, plain_records = _serve(plain, one_at_a_time)
    with Engine(model, _tiered(tmp_path / "on", True, prefetch=prefetch)) as engine:
        got, records = _serve(engine, one_at_a_time)
        assert got == want
        assert want == [dense_greedy(model, p, NEW) for p in prompts]
        manager = engine.kv_manager
        assert isinstance(manager, TieredPrefixAccounting)
        # every later request of a system takes its 3 full chunks; the suffix alone is prefilled
        assert manager.prefix_stats.hit_blocks == 15 and manager.hit_tokens == 15 * CHUNK
        assert [manager.cached_tokens[i] for i in range(len(prompts))] == [0, 0, 0] + [3 * CHUNK] * 5
        saved = sum(r.prefill_tokens for r in plain_records) - sum(r.prefill_tokens for r in records)
        assert saved == manager.hit_tokens and not any(r.num_preempted for r in records)
        # the hit pages came back from both lower tiers, through the real links
        loads = manager.prefix_page_loads
        assert sum(loads.values()) == 15 * CFG.num_layers
        assert loads["host"] > 0 and loads["ssd"] > 0
        stats = engine.backend.cache.tiers.stats
        assert stats.get("ssd->host").pages >= loads["ssd"]
        assert stats.get("host->device").pages >= loads["host"] + loads["ssd"]
        # the same hits as the plain pool's prefix cache with the same number of blocks
        capacity = engine.backend.capacity_chunks
        with Engine(model, EngineConfig(num_blocks=capacity, prefix_caching=True, **BATCH)) as pool:
            assert _serve(pool, one_at_a_time)[0] == want
        assert isinstance(pool.kv_manager, PrefixCachingKVManager)
        assert pool.kv_manager.prefix_stats == manager.prefix_stats
        assert pool.kv_manager.cached_tokens == manager.cached_tokens
        _assert_nothing_left(engine)


def test_batched_admissions_and_preemption_share_prefix_pages_with_the_tokens_of_no_caching(model, tmp_path):
    systems = _systems(3)
    prompts = [systems[i % 3] + _tokens(300 + i, 5 + i % 7) for i in range(8)]
    with Engine(model, _tiered(tmp_path / "off", False, device_pages=16)) as plain:
        want, _ = _serve(plain, [prompts])
    with Engine(model, _tiered(tmp_path / "on", True, device_pages=16)) as engine:
        got, records = _serve(engine, [prompts])  # all at once: the device limit queues and preempts
        assert got == want
        manager = engine.kv_manager
        assert max(r.batch_size for r in records) > 1 and sum(r.num_preempted for r in records) > 0
        assert manager.prefix_stats.hit_blocks >= 15  # 5 later requests x 3 chunks, plus a recompute's own
        loads = manager.prefix_page_loads
        assert sum(loads.values()) == manager.prefix_stats.hit_blocks * CFG.num_layers
        assert loads["host"] > 0 and loads["ssd"] > 0
        _assert_nothing_left(engine)


# the simulator agreement of tests/engine/kv/test_prefix_sim_agreement.py, on the tiers: 12 blocks of 4 tokens
# = 12 chunks of 2 layers + the spare page = 25 pages over device, host and SSD
SIM_BS, SIM_BLOCKS, SIM_OUTPUT = 4, 12, 6
SIM_TIERS = {"chunk_tokens": SIM_BS, "device_pages": 10, "host_pages": 6, "ssd_pages": 9, "sink_tokens": 4,
             "window_tokens": 4}


@pytest.mark.parametrize("order", [[0, 1, 0, 2, 1, 0, 2, 2, 1, 0], [2, 2, 0, 0, 1, 1, 0, 2]])
def test_hits_and_evictions_equal_the_plain_pool_and_the_simulator(model, tmp_path, order):
    systems = [_tokens(50 + s, 9 + 3 * s) for s in range(3)]
    prompts = [systems[s] + _tokens(60 + i, 2 + i % 3) for i, s in enumerate(order)]
    tiers = TierConfig(**{**SIM_TIERS, "ssd_dir": str(tmp_path)})  # type: ignore[arg-type]
    with Engine(model, EngineConfig(block_size=SIM_BS, tiered=tiers, prefix_caching=True)) as engine:
        assert engine.backend.capacity_chunks == SIM_BLOCKS
        outs = [engine.generate([p], SIM_OUTPUT)[0] for p in prompts]
        assert outs == [dense_greedy(model, p, SIM_OUTPUT) for p in prompts]
        pool = Engine(model, EngineConfig(block_size=SIM_BS, num_blocks=SIM_BLOCKS, prefix_caching=True))
        for prompt in prompts:
            pool.generate([prompt], SIM_OUTPUT)

        setup = PrefixSetup.build(PrefixCacheSpec(block_tokens=SIM_BS), RequestPrefixes.from_tokens(prompts, SIM_BS))
        sim = PrefixCache(setup, capacity_tokens=SIM_BLOCKS * SIM_BS, kv_bytes_per_token=1,
                          work_ms=lambda t, c: float(t))
        for request, prompt in enumerate(prompts):
            plan = sim.plan(request, len(prompt), len(prompt) + SIM_OUTPUT - 1)
            assert plan is not None
            sim.commit(request, len(prompt), plan)
            sim.finish(request)

        manager = engine.kv_manager
        stats = manager.prefix_stats
        assert stats.evictions > 0 and stats.hit_blocks > 0  # under pressure, and prefixes were reused
        assert stats == pool.kv_manager.prefix_stats
        assert manager.index.evicted == pool.kv_manager.index.evicted == sim.index.evicted
        assert (sim.counters.hit_blocks, sim.counters.queried_blocks, sim.counters.evictions) == (
            stats.hit_blocks, stats.queried_blocks, stats.evictions)
        assert manager.cached_tokens == pool.kv_manager.cached_tokens == sim.cached_tokens
        assert manager.prefix_page_loads["ssd"] > 0  # hits also came back from the SSD
        _assert_nothing_left(engine)


@pytest.mark.parametrize("damage", ["corrupt", "unreadable"])
def test_a_damaged_prefix_page_fails_its_reader_and_is_not_hit_again(model, tmp_path, damage):
    systems = _systems(5)
    first, *others = [s + _tokens(400 + i, 6) for i, s in enumerate(systems)]
    with Engine(model, _tiered(tmp_path, True)) as engine:
        _serve(engine, [[first]] + [[p] for p in others])  # the others push the first prompt's pages to the SSD
        manager, cache = engine.kv_manager, engine.backend.cache
        blocks = [manager.index.block_of(h) for h in token_block_hashes(systems[0], CHUNK)]
        keys = [(shared_owner(b), layer, c) for c, b in enumerate(blocks) for layer in range(CFG.num_layers)]
        assert all(cache.pages[key].tier == "ssd" for key in keys)
        names = {cache.tiers.ssd.path(cache.pages[key].slot).name for key in keys}
        fs = FaultyFS()
        if damage == "corrupt":
            for key in keys:  # flip one payload byte of each of its page files
                path = cache.tiers.ssd.path(cache.pages[key].slot)
                blob = bytearray(path.read_bytes())
                blob[-5] ^= 0x01
                path.write_bytes(bytes(blob))
        else:  # EIO reading its page files (a failing sector), on the real files
            fs.fail("preadv", errno.EIO, when=lambda name: name in names)
            cache.tiers.ssd.fs = fs
        reader = systems[0] + _tokens(500, 7)
        rid = engine.add_request(reader, NEW)
        while engine.has_unfinished:
            engine.step()
        fault = {"corrupt": "PageCorrupt", "unreadable": "PageUnreadable"}[damage]
        assert manager.cached_tokens[rid] == 3 * CHUNK and engine.errors[rid].startswith(fault)
        fs.heal()
        assert blocks[0] in cache.prefix.broken  # layer 0's first chunk is read first
        again = systems[0] + _tokens(501, 7)
        out, _ = _serve(engine, [[again]])
        assert manager.cached_tokens[rid + 1] == 0  # the lookup stops before the broken block
        assert out == [dense_greedy(model, again, NEW)]
        _assert_nothing_left(engine)


def test_a_writer_failing_mid_step_fails_its_same_step_reader_and_its_block_is_not_hit_again(model, tmp_path):
    blocker = tmp_path / "not-a-dir"  # the SSD directory cannot be created until this becomes a directory
    blocker.write_text("a regular file where the SSD directory should be")
    # no host tier: a device eviction writes to the SSD; 13 pages admit two 54-token sequences side by side
    # (2 x 2 layers x 3 pinned chunks + 1 unpinned) and hold one sequence's 8 pages plus 5 more
    tiers = TierConfig(chunk_tokens=CHUNK, device_pages=13, host_pages=0, ssd_pages=100, sink_tokens=4,
                       window_tokens=16, ssd_dir=str(blocker / "kv"))
    other, system = _systems(2)
    with Engine(model, EngineConfig(block_size=CHUNK, tiered=tiers, prefix_caching=True)) as engine:
        _serve(engine, [[other + _tokens(600, 6)]])  # leaves its 6 prefix pages cached on the device
        writer, reader = system + _tokens(601, 6), system + _tokens(602, 6)
        wid, rid = engine.add_request(writer, NEW), engine.add_request(reader, NEW)
        record = engine.step()
        # the reader took the writer's 3 blocks in the step that computes them; in layer 1 the writer's third
        # chunk needs a device slot, the victim (a cached page) cannot go to the SSD: the writer fails there,
        # and the reader finds that page missing
        assert record.admitted == (wid, rid) and record.failed == (wid, rid)
        manager, cache = engine.kv_manager, engine.backend.cache
        assert manager.cached_tokens[rid] == 3 * CHUNK
        assert engine.errors[wid].startswith("TierUnwritable")
        assert engine.errors[rid].startswith("TierFault: prefix block")
        blocks = [manager.index.block_of(h) for h in token_block_hashes(system, CHUNK)]
        assert cache.prefix.broken == {blocks[2]}
        blocker.unlink()
        blocker.mkdir()
        again = system + _tokens(603, 6)
        out, _ = _serve(engine, [[again]])
        assert out == [dense_greedy(model, again, NEW)] and not engine.errors.get(rid + 1)
        assert manager.cached_tokens[rid + 1] == 2 * CHUNK  # the two complete blocks hit, the broken one not
        _assert_nothing_left(engine)


def test_an_unreferenced_cached_sink_page_is_not_pinned_and_moves_down() -> None:
    tiers = TierConfig(chunk_tokens=4, device_pages=4, host_pages=4, ssd_pages=8, sink_tokens=4, window_tokens=4)
    cache = TieredKVCache(CFG, tiers, torch.float32, "cpu", sink_tokens=4, window_tokens=4, prefetch=False)
    try:
        shape = (6, CFG.num_kv_heads, int(CFG.head_dim))
        gen = torch.Generator().manual_seed(3)
        kv = [(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)) for _ in range(CFG.num_layers)]
        for layer, (k, v) in enumerate(kv):
            cache.append(0, layer, k, v)  # chunk 0 full, chunk 1 holds 2 tokens
        cache.share(0, 0, block=7)  # chunk 0 registered after it was written: its pages are renamed
        assert {key for key in cache.pages if key[0] < 0} == {(shared_owner(7), 0, 0), (shared_owner(7), 1, 0)}
        assert cache.pinned((shared_owner(7), 0, 0))  # the sink chunk of a sequence that links it
        cache.free(0)
        assert not cache.pinned((shared_owner(7), 0, 0))
        assert cache.residency(prefix_only=True) == {"device": 2, "host": 0, "ssd": 0}
        for layer in range(CFG.num_layers):  # 8 tokens: 2 chunks per layer, all pinned (sink + window)
            cache.append(1, layer, *(torch.ones((8, *shape[1:])),) * 2)
        assert cache.residency(prefix_only=True) == {"device": 0, "host": 2, "ssd": 0}
        cache.free(1)
        cache.attach(2, [7])  # a hit: the block's pages, read back from the host
        assert cache.length(2, 1) == 4
        for layer, (k, v) in enumerate(kv):
            got_k, got_v = cache.gather(2, layer)
            assert torch.equal(got_k, k[:4]) and torch.equal(got_v, v[:4])
        assert cache.prefix.hit_loads == {"device": 0, "host": 2, "ssd": 0}
        cache.free(2)
        cache.drop_block(7)
        assert cache.residency() == {"device": 0, "host": 0, "ssd": 0}
    finally:
        cache.close()


def test_refusals_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"^EngineConfig.prefix_caching: cannot be combined with kv_compression"):
        EngineConfig(prefix_caching=True, kv_compression="int8")
    with pytest.raises(ValueError, match=r"^EngineConfig.kv_compression: cannot be combined with tiered"):
        EngineConfig(prefix_caching=True, kv_compression="int8", tiered=TierConfig())
    assert EngineConfig(prefix_caching=True, tiered=TierConfig()).prefix_caching
