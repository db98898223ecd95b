"""KV quantization (KIVI-style INT8/INT4), mixed precision, and sliding window with sinks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tripath.engine.kv.dense import DenseKVCache, dense_attention
from tripath.engine.kv.modes import CompressedKVCache, KVCompression, cache_bytes_per_token, make_cache
from tripath.engine.kv.quant import (
    bytes_per_token,
    dequantize,
    pack4,
    quantize_groups,
    quantize_keys,
    quantize_values,
    unpack4,
)
from tripath.engine.kv.window import SinkWindowCache, sink_window_mask
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel

CFG = PRESETS["tiny-gqa"]  # 2 layers, 8 query heads, 2 KV heads, head_dim 8


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def model(one_torch_thread) -> LlamaModel:
    return LlamaModel(CFG, gen(1)).eval()


def kv_with_outlier_channels(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K with a few large channels (as real keys have, the reason KIVI groups keys per channel)."""
    k = torch.randn(tokens, 4, 64, generator=gen(seed))
    k[:, :, [3, 17]] *= 12.0
    return k, torch.randn(tokens, 4, 64, generator=gen(seed + 1))


@pytest.mark.parametrize("bits", [8, 4])
def test_error_per_element_is_at_most_half_a_step(bits):
    k, v = kv_with_outlier_channels(64, 0)
    # keys per channel (groups over tokens), values per token (groups over channels)
    for grouped in (k.permute(1, 2, 0).reshape(4, 64, 2, 32), v.reshape(64, 4, 2, 32)):
        q = quantize_groups(grouped, bits)
        err = (dequantize(q) - grouped).abs()
        bound = q.scale / 2 + 4 * torch.finfo(torch.float32).eps * grouped.abs().amax(-1, keepdim=True)
        assert bool((err <= bound).all()), float((err - q.scale / 2).max())
        assert q.codes.dtype == torch.uint8 and q.codes.numel() == grouped.numel() * bits // 8
        assert float(err.max()) > 0  # it really is lossy


def test_key_and_value_grouping_follow_kivi():
    k, v = kv_with_outlier_channels(32, 2)
    _, qk = quantize_keys(k, 4)
    assert qk.shape == (4, 64, 32) and qk.scale.shape == (4, 64, 1)  # one scale per (head, channel)
    _, qv = quantize_values(v, 4, 16)
    assert qv.shape == (32, 4, 4, 16) and qv.scale.shape == (32, 4, 4, 1)  # per token, 16 channels
    # per-channel grouping confines an outlier channel's range to its own group: other channels keep
    # a fine step, which per-token grouping of keys cannot do
    per_channel = (quantize_keys(k, 4)[0] - k).abs().mean()
    per_token = (quantize_values(k, 4, 64)[0] - k).abs().mean()
    assert per_channel < per_token / 2


def test_constant_group_and_int4_packing_are_exact():
    flat = torch.randint(0, 16, (2 * 3 * 5 + 1,), generator=gen(3), dtype=torch.uint8)
    assert torch.equal(unpack4(pack4(flat), flat.numel()), flat)
    assert pack4(torch.tensor([1, 2], dtype=torch.uint8)).tolist() == [0x21]  # low nibble first
    const = torch.full((2, 3, 8), 0.7)
    assert torch.equal(dequantize(quantize_groups(const, 4)), const)


def test_int8_attention_output_cosine_above_0999():
    k, v = kv_with_outlier_channels(512, 4)
    q = torch.randn(1, 3, 8, 64, generator=gen(6))  # 3 queries, 8 query heads over 4 KV heads
    k8, v8 = quantize_keys(k, 8)[0], quantize_values(v, 8, 32)[0]
    full = dense_attention(q, k.unsqueeze(0), v.unsqueeze(0))
    quant = dense_attention(q, k8.unsqueeze(0), v8.unsqueeze(0))
    cos = F.cosine_similarity(full.reshape(-1, 64), quant.reshape(-1, 64), dim=-1)
    assert float(cos.min()) > 0.999
    k4, v4 = quantize_keys(k, 4)[0], quantize_values(v, 4, 32)[0]
    quant4 = dense_attention(q, k4.unsqueeze(0), v4.unsqueeze(0))
    cos4 = F.cosine_similarity(full.reshape(-1, 64), quant4.reshape(-1, 64), dim=-1)
    assert float(cos4.mean()) < float(cos.mean())  # INT4 loses more than INT8


def test_protected_tokens_stay_bit_exact_and_leave_the_scale():
    k, v = kv_with_outlier_channels(32, 7)
    k[5] *= 50.0  # a token far outside the rest: protecting it must not widen its groups
    protect = torch.zeros(32, dtype=torch.bool)
    protect[[0, 5, 31]] = True
    k_out, qk = quantize_keys(k, 4, protect)
    v_out, _ = quantize_values(v, 4, 32, protect)
    assert torch.equal(k_out[protect], k[protect]) and torch.equal(v_out[protect], v[protect])
    assert not torch.equal(k_out[~protect], k[~protect])
    _, plain = quantize_keys(k, 4)
    assert bool((qk.scale <= plain.scale).all()) and float(qk.scale.sum()) < float(plain.scale.sum()) / 10


def run(model: LlamaModel, cache, ids: list[int], chunk: int) -> torch.Tensor:
    """Teacher-forced logits [L, V] feeding ids in chunks of `chunk` tokens through `cache`."""
    out = []
    with torch.inference_mode():
        for start in range(0, len(ids), chunk):
            part = torch.tensor([ids[start : start + chunk]])
            pos = torch.arange(start, start + part.shape[1]).unsqueeze(0)
            out.append(model(part, pos, cache)[0])
    return torch.cat(out)


def ids(n: int, seed: int = 8) -> list[int]:
    return torch.randint(0, 256, (n,), generator=gen(seed)).tolist()


def test_fp_mode_is_the_dense_cache_and_mixed_keeps_sinks_and_window_exact(model):
    seq = ids(200)
    dense = DenseKVCache(CFG.num_layers)
    want = run(model, dense, seq, 1)
    assert torch.equal(run(model, make_cache(KVCompression("fp"), CFG.num_layers), seq, 1), want)
    mixed = KVCompression("mixed-int4", group=16, value_group=8, sink_tokens=4, recent_tokens=32, heavy_fraction=0.2)
    cache = make_cache(mixed, CFG.num_layers)
    got = run(model, cache, seq, 1)
    assert not torch.equal(got, want)
    # per layer, the first-computed K/V of sinks and recent window equal the dense cache's bit for bit,
    # when the inputs to the layer are the same, i.e. in layer 0
    k_dense, k_mixed = dense.keys[0][0], cache.keys[0][0]
    assert torch.equal(k_mixed[:4], k_dense[:4]) and torch.equal(k_mixed[-32:], k_dense[-32:])
    assert not torch.equal(k_mixed[4:-32], k_dense[4:-32])
    hitters = cache.protected[0]
    assert hitters > 0  # heavy hitters were found inside quantized groups and kept exact too


def test_window_with_sinks_equals_full_attention_when_the_context_fits(model):
    seq = ids(120)
    want = run(model, DenseKVCache(CFG.num_layers), seq, 1)
    assert torch.equal(run(model, SinkWindowCache(CFG.num_layers, 4, 128), seq, 1), want)
    want40 = run(model, DenseKVCache(CFG.num_layers), seq, 40)  # same chunks, same kernels
    assert torch.equal(run(model, SinkWindowCache(CFG.num_layers, 4, 120), seq, 40), want40)


def test_window_evicts_the_middle_and_matches_the_masked_reference(model):
    seq, sinks, window = ids(150, 9), 4, 40
    cache = SinkWindowCache(CFG.num_layers, sinks, window)
    got = run(model, cache, seq, 1)
    assert cache.kept_tokens() == sinks + window - 1  # the next query's window, minus itself
    assert cache.positions[0].tolist() == list(range(sinks)) + list(range(150 - window + 1, 150))

    def masked(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(k.shape[1])
        mask = sink_window_mask(pos, pos, sinks, window)  # [L, L], full sequence at once
        group = q.shape[2] // k.shape[2]
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(group, 1),
            v.transpose(1, 2).repeat_interleave(group, 1), attn_mask=mask)
        return out.transpose(1, 2)

    with torch.inference_mode():
        want = model(torch.tensor([seq]), attention=masked)[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(got, run(model, DenseKVCache(CFG.num_layers), seq, 1), atol=1e-3)


def test_bytes_per_token_hand_computed(model):
    # tiny-gqa: 2 layers x 2 KV heads x 8 dims = 32 numbers each for K and V per token
    # fp32: 2 * 32 * 4 = 256 B; INT4, key groups of 32 tokens, value groups of 8 channels, fp32 scale+zero:
    # K 32 * (0.5 + 8/32) = 24 B, V 32 * (0.5 + 8/8) = 48 B -> 72 B per token once all groups are full
    assert bytes_per_token(2, 8, 2, None, 32, 8, 4, 4) == 256
    assert bytes_per_token(2, 8, 2, 4, 32, 8, 4, 4) == 72
    assert bytes_per_token(2, 8, 2, 8, 32, 8, 4, 4) == 32 * (1 + 0.25) + 32 * (1 + 1)
    cache = make_cache(KVCompression("int4", group=32, value_group=8), CFG.num_layers)
    run(model, cache, ids(64), 16)
    assert cache_bytes_per_token(cache) == 72
    window = make_cache(KVCompression("window", sink_tokens=4, window_tokens=28), CFG.num_layers)
    run(model, window, ids(64), 1)
    assert cache_bytes_per_token(window) == 256 * (4 + 27) / 64


def test_compression_config_names_the_bad_field():
    with pytest.raises(ValueError, match="KVCompression.mode"):
        KVCompression("int3")
    with pytest.raises(ValueError, match="KVCompression.heavy_fraction"):
        KVCompression("mixed-int4", heavy_fraction=1.5)
    assert isinstance(make_cache(KVCompression("int8"), 2), CompressedKVCache)
