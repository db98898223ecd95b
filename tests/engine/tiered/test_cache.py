"""Tiered KV cache (device -> host -> SSD): exact equivalence with the untiered cache, exact page round trips."""

from __future__ import annotations

import os

import pytest
import torch

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.kv.dense import DenseKVCache, _step
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.cache import TieredKVCache
from tripath.engine.tiered.ssd import SSDTier
from tripath.engine.tiered.tier_config import TierConfig, TransferStats

CFG = PRESETS["tiny-gqa"]  # 2 layers, 2 KV heads x 8 dims: a page of 16 tokens is 2 KiB in fp32
TIERS = TierConfig(chunk_tokens=16, device_pages=30, host_pages=6, ssd_pages=1000, sink_tokens=4, window_tokens=32)
NEW = 12


def tiered_engine(model: LlamaModel, tiers: TierConfig) -> Engine:
    return Engine(model, EngineConfig(block_size=16, num_blocks=1, fuse_projections=False, tiered=tiers))


def logits_of(engine: Engine, prompts: list[list[int]]) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Outputs and the logits of every step, as the LM head produced them."""
    seen: list[torch.Tensor] = []
    hook = engine.model.lm_head.register_forward_hook(lambda _m, _i, out: seen.append(out.detach().clone()))
    try:
        outs = engine.generate(prompts, NEW)
    finally:
        hook.remove()
    return outs, seen


@pytest.fixture(scope="module")
def model(one_torch_thread) -> LlamaModel:
    return LlamaModel(CFG, torch.Generator().manual_seed(1)).eval()


@pytest.fixture(scope="module")
def prompt() -> list[int]:
    return torch.randint(0, 256, (300,), generator=torch.Generator().manual_seed(2)).tolist()


@pytest.fixture(scope="module")
def reference(model: LlamaModel, prompt: list[int]) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and per-step logits with the plain in-memory cache (tiering off)."""
    with torch.inference_mode():
        cache, tokens, logits_seen = DenseKVCache(CFG.num_layers), [], []
        logits = _step(model, cache, torch.tensor([prompt]))
        for _ in range(NEW):
            logits_seen.append(logits.clone())
            tokens.append(int(logits.argmax()))
            logits = _step(model, cache, torch.tensor([[tokens[-1]]]))
    return tokens, logits_seen


@pytest.mark.parametrize("prefetch", [False, True])
def test_tiered_generation_is_bit_identical_and_uses_host_and_ssd(model, prompt, reference, prefetch):
    tokens, _ = reference
    paged = Engine(model, EngineConfig(block_size=16, num_blocks=64, fuse_projections=False))
    _, paged_logits = logits_of(paged, [prompt])
    # 300 + 12 tokens = 20 chunks per layer, 40 pages; the device holds 30 and the host 6: SSD must be used
    with tiered_engine(model, TierConfig(**{**TIERS.__dict__, "prefetch": prefetch})) as eng:
        outs, logits = logits_of(eng, [prompt])
        cache = eng.backend.cache
        stats = cache.tiers.stats
        assert not eng.errors and outs[0] == tokens
        assert len(logits) == len(paged_logits) == NEW  # every bit of every step as the untiered pool's
        assert all(torch.equal(a.view(torch.int32), b.view(torch.int32)) for a, b in zip(logits, paged_logits,
                                                                                        strict=True))
        for link in ("device->host", "host->ssd", "ssd->host", "host->device"):
            assert stats.get(link).pages > 0, link
        # every page write to SSD was read back at most once, and pages moved whole
        assert stats.get("ssd->host").pages <= stats.get("host->ssd").pages
        assert stats.get("host->ssd").bytes == stats.get("host->ssd").pages * cache.tiers.page_bytes
        assert cache.residency() == {"device": 0, "host": 0, "ssd": 0}  # finished: all freed
        directory = cache.tiers.ssd.directory
        assert directory is not None and directory.is_dir()
    assert not directory.exists()  # temp files removed on shutdown


def test_tiered_tokens_match_the_paged_engine(model, prompt, reference):
    engine = Engine(model, EngineConfig(block_size=16, num_blocks=64, fuse_projections=False))
    assert engine.generate([prompt], NEW)[0] == reference[0]


def test_interleaved_requests_give_each_ones_own_output(model, prompt, reference):
    other = prompt[::-1][:120]
    # A needs 20 pages for one layer plus its own and B's pinned pages; together they need the SSD
    tiers = TierConfig(chunk_tokens=16, device_pages=34, host_pages=6, ssd_pages=1000, sink_tokens=4,
                       window_tokens=32)
    with tiered_engine(model, tiers) as eng:
        (alone,) = eng.generate([other], NEW)
        a, b = eng.generate([prompt, other], NEW)  # batched together, step by step
        assert eng.backend.cache.tiers.stats.get("ssd->host").pages > 0
        assert not eng.errors
    assert a == reference[0] and b == alone


def test_gather_returns_the_exact_bytes_appended_and_pins_sinks_and_window():
    gen = torch.Generator().manual_seed(3)
    cache = TieredKVCache(CFG, TierConfig(chunk_tokens=8, device_pages=12, host_pages=3, ssd_pages=100),
                          torch.float32, "cpu", sink_tokens=3, window_tokens=10, prefetch=False)
    hkv, dim = CFG.num_kv_heads, CFG.head_dim
    ks = {layer: [] for layer in range(CFG.num_layers)}
    vs = {layer: [] for layer in range(CFG.num_layers)}
    for n in (37, 1, 5, 1, 20):  # a prefill, decodes, chunks that straddle page boundaries
        for layer in range(CFG.num_layers):
            k, v = torch.randn(n, hkv, dim, generator=gen), torch.randn(n, hkv, dim, generator=gen)
            k[0, 0, 0] = float("nan")  # odd bit patterns survive too
            ks[layer].append(k)
            vs[layer].append(v)
            cache.append(0, layer, k, v)
            got_k, got_v = cache.gather(0, layer)
            want_k, want_v = torch.cat(ks[layer]), torch.cat(vs[layer])
            assert torch.equal(got_k.view(torch.int32), want_k.view(torch.int32))
            assert torch.equal(got_v.view(torch.int32), want_v.view(torch.int32))
    assert cache.residency()["ssd"] > 0
    length = 64  # chunks 0 (sinks, tokens 0..2) and 6, 7 (window: tokens 54..63) stay on the device
    for layer in range(CFG.num_layers):
        for chunk in range(8):
            pinned = chunk == 0 or chunk >= 6
            assert cache.pinned((0, layer, chunk)) == pinned
            if pinned:
                assert cache.pages[(0, layer, chunk)].tier == "device"
    assert cache.lengths[0] == [length] * CFG.num_layers
    cache.free(0)
    assert cache.tiers.device_pool.num_free == 12 and cache.tiers.host_pool.num_free == 3
    assert not cache.tiers.ssd.live
    cache.close()


def test_ssd_page_round_trips_exactly(tmp_path):
    shape = (2, 16, 2, 8)
    ssd = SSDTier(TierConfig(chunk_tokens=16, ssd_dir=str(tmp_path)), shape, torch.float32, TransferStats())
    page = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    page[0, 0, 0, :3] = torch.tensor([float("inf"), -0.0, float("nan")])
    pid = ssd.write(page)
    path = ssd.path(pid)
    assert path.stat().st_size == SSDTier.HEADER_BYTES + page.numel() * 4  # header + raw payload
    back = ssd.read(pid)
    assert torch.equal(back.view(torch.int32), page.view(torch.int32))
    ssd.delete(pid)
    again = ssd.write(-page)  # the freed slot's file is overwritten in place
    assert again == pid and os.listdir(path.parent) == [path.name]
    assert torch.equal(ssd.read(again).view(torch.int32), (-page).view(torch.int32))
    ssd.close()
    assert not path.parent.exists() and tmp_path.exists()


@pytest.mark.parametrize("field,value", [("chunk_tokens", 0), ("device_pages", 0), ("host_pages", -1)])
def test_tier_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=f"TierConfig.{field}"):
        TierConfig(**{field: value})
