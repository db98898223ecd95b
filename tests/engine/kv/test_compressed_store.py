"""The compressed paged KV store: what is resident, how exact it is, and attention through it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tripath.engine.kv.compressed_attention import CompressedAttention
from tripath.engine.kv.compressed_store import CompressedKVStore, StoreConfig, quantize_last
from tripath.engine.kv.dense import dense_attention
from tripath.engine.kv.modes import CompressedKVCache, KVCompression
from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.model.config import ModelConfig

# the tiny target's attention shape (8 query heads, 2 KV heads of 32 channels), two layers
CFG = ModelConfig(vocab_size=264, hidden_size=256, intermediate_size=64, num_layers=2, num_heads=8, num_kv_heads=2)
HQ, HKV, D = 8, 2, 32


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def qkv(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, tokens, HQ, D, generator=g)
    k = torch.randn(1, tokens, HKV, D, generator=g)
    k[..., [3, 17]] *= 10.0  # outlier key channels, as real keys have (KIVI's reason to group keys per channel)
    return q, k, torch.randn(1, tokens, HKV, D, generator=g)


def run(store: CompressedKVStore, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: list[int],
        prefill: int) -> torch.Tensor:
    """Prefill `prefill` tokens in one step, then decode the rest one step each; outputs [1, T, Hq, D]."""
    outs = []
    steps = [(0, prefill)] + [(t, 1) for t in range(prefill, q.shape[1])]
    for start, n in steps:
        att = CompressedAttention(store, [SequenceChunk(start, n, table)], HQ // HKV)
        for layer in range(CFG.num_layers):
            out = att(layer, q[:, start : start + n], k[:, start : start + n], v[:, start : start + n])
        outs.append(out)
    return torch.cat(outs, dim=1)


def make(mode: str, blocks: int, **kw: object) -> CompressedKVStore:
    return CompressedKVStore(CFG, blocks, StoreConfig(mode, chunk_tokens=64, **kw), torch.float32, "cpu")


def test_fp_mode_is_exact_blockwise_attention():
    q, k, v = qkv(200, 0)
    out = run(make("fp", 16), q, k, v, list(range(13))[::-1], prefill=170)
    assert torch.allclose(out, dense_attention(q, k, v), atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["int8", "mixed-int8"])
def test_int8_attention_output_cosine_above_0999(mode):
    q, k, v = qkv(400, 1)
    out = run(make(mode, 32), q, k, v, list(range(25)), prefill=360)
    cos = F.cosine_similarity(out.flatten(2), dense_attention(q, k, v).flatten(2), dim=-1)
    assert float(cos.min()) > 0.999


def test_store_matches_the_dequantize_on_read_reference():
    """Same grouping (key group = block of 32 tokens) and fp32 metadata: the store's numbers are those of
    kv_compression.CompressedKVCache, which keeps dequantized copies (the reference of issue 5)."""
    q, k, v = qkv(160, 2)
    store = make("int4", 8, block_size=32, meta_dtype=torch.float32)
    out = run(store, q, k, v, [5, 1, 7, 0, 2], prefill=100)
    ref_cache = CompressedKVCache(CFG.num_layers, KVCompression("int4", group=32, value_group=32))
    ref = [ref_cache(0, q[:, :100], k[:, :100], v[:, :100])]
    ref_cache(1, q[:, :100], k[:, :100], v[:, :100])
    for t in range(100, 160):
        ref.append(ref_cache(0, q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1]))
        ref_cache(1, q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1])
    assert torch.allclose(out, torch.cat(ref, 1), atol=2e-5, rtol=0)
    assert float((out - dense_attention(q, k, v)).abs().max()) > 1e-2  # int4 really is lossy


def test_protected_tokens_are_bit_exact():
    q, k, v = qkv(300, 3)
    store = make("mixed-int4", 32)
    table = list(range(19))
    run(store, q, k, v, table, prefill=260)
    keys, values = store.read(0, table)
    keys, values = keys[:300], values[:300]
    heavy = [i * 16 + int(o) for i, b in enumerate(table) if b not in store.staged
             for o in store.pools["h_offsets"][0, b]]
    protected = sorted(set(range(16)) | set(range(300 - 64 - 300 % 16, 300)) | set(heavy))
    assert len(heavy) == len({b for b in table[: 300 // 16] if b not in store.staged})  # one per sealed block
    for pos in protected:
        assert torch.equal(keys[pos], k[0, pos, :, :]) and torch.equal(values[pos], v[0, pos])
    lossy = [p for p in range(300) if p not in protected]
    assert not torch.equal(keys[lossy], k[0, lossy])


@pytest.mark.parametrize("bits", [8, 4])
def test_fp16_metadata_error_is_within_half_a_stored_step(bits):
    x = torch.randn(64, 4, 32, generator=torch.Generator().manual_seed(4)) * 7.0
    codes, scale, zero = quantize_last(x, bits, torch.float16)
    back = codes.float() * scale.float()[..., None] + zero.float()[..., None]
    bound = scale.float()[..., None] / 2 + 1e-6 * x.abs().amax(-1, keepdim=True)
    assert bool(((back - x).abs() <= bound).all())
    assert int(codes.max()) <= 2**bits - 1


@pytest.mark.parametrize("mode,bits", [("int8", 8), ("int4", 4)])
def test_resident_bytes_equal_the_hand_computed_footprint(mode, bits):
    blocks, bs, tokens = 12, 16, 12 * 16
    store = make(mode, blocks)
    q, k, v = qkv(tokens, 5)
    run(store, q, k, v, list(range(blocks)), prefill=170)
    assert not store.staged  # every block is complete and sealed
    elems = CFG.num_layers * HKV * D  # per token, for K and again for V
    # codes: bits/8 bytes per element; keys: fp16 scale + zero per 16-token group of a channel;
    # values: fp16 scale + zero per 32-channel group of a token
    per_token = elems * (bits / 8 + 2 * 2 / bs) + elems * (bits / 8 + 2 * 2 / 32)
    assert store.resident_bytes()["kv"] == tokens * per_token
    fp32 = CFG.kv_bytes_per_token(4)
    assert per_token / fp32 == pytest.approx({8: 2.375 / 8, 4: 1.375 / 8}[bits])


def test_mixed_mode_footprint_counts_exact_rows_and_staged_blocks():
    blocks, bs, tokens = 12, 16, 12 * 16
    store = make("mixed-int8", blocks)
    q, k, v = qkv(tokens, 6)
    run(store, q, k, v, list(range(blocks)), prefill=170)
    # block 0 holds the 4 sinks and the last 64 tokens are 4 blocks: 5 blocks stay full precision
    assert len(store.staged) == 1 + 64 // bs
    elems = CFG.num_layers * HKV * D
    code_block = bs * elems * (1 + 4 / bs) + bs * elems * (1 + 4 / 32)
    heavy = math.ceil(0.05 * bs)  # per block and layer: full-precision K and V rows + an int16 offset
    heavy_block = heavy * (2 * elems * 4 + CFG.num_layers * 2)
    staged = (1 + 64 // bs) * bs * 2 * elems * 4
    assert store.resident_bytes()["kv"] == blocks * (code_block + heavy_block) + staged


def test_blocks_are_reused_after_free_and_copied_on_write():
    q, k, v = qkv(40, 7)
    store = make("int8", 8)
    run(store, q, k, v, [3, 4, 5], prefill=20)  # 40 tokens: blocks 3, 4 sealed, 5 staged (8 tokens)
    assert set(store.staged) == {5}
    refcount = [0] * 8
    refcount[3] = refcount[4] = 1
    store.drop_free(refcount)
    assert not store.staged
    # a fresh sequence reuses block 5: its first write opens it again; a fork copies the partial block
    run(store, q[:, :10], k[:, :10], v[:, :10], [5], prefill=10)
    store.copy_blocks([(5, 6)])
    assert torch.equal(store.staged[6], store.staged[5])
    out = run(store, q[:, :10], k[:, :10], v[:, :10], [6], prefill=10)
    assert torch.allclose(out, dense_attention(q[:, :10], k[:, :10], v[:, :10]), atol=1e-5)


@pytest.mark.parametrize("mode", ["fp", "mixed-int4"])
def test_batched_decodes_equal_one_sequence_at_a_time(mode):
    """Decodes of sequences of different lengths share one step (padded, masked chunks): each output is
    what the sequence gets alone."""
    lengths, tables = [70, 150, 33], [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [15, 16, 17]]
    data = [qkv(n + 1, 10 + i) for i, n in enumerate(lengths)]
    together, alone = make(mode, 18), make(mode, 18)
    singles = []
    for (q, k, v), n, table in zip(data, lengths, tables, strict=True):
        run(together, q[:, :n], k[:, :n], v[:, :n], table, prefill=n)
        singles.append(run(alone, q, k, v, table, prefill=n)[:, -1])
    att = CompressedAttention(together, [SequenceChunk(n, 1, t) for n, t in zip(lengths, tables, strict=True)],
                              HQ // HKV)
    q = torch.cat([d[0][:, -1:] for d in data], dim=1)  # [1, 3, Hq, D]: the packed step
    k = torch.cat([d[1][:, -1:] for d in data], dim=1)
    v = torch.cat([d[2][:, -1:] for d in data], dim=1)
    for layer in range(CFG.num_layers):
        out = att(layer, q, k, v)
    assert torch.allclose(out[0], torch.cat(singles), atol=1e-5, rtol=0)
    if mode == "fp":
        for i, (qi, ki, vi) in enumerate(data):
            assert torch.allclose(out[0, i], dense_attention(qi, ki, vi)[0, -1], atol=1e-5, rtol=0)
