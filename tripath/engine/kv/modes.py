"""KV-compression modes as attention caches: full precision, INT8, INT4, mixed precision, sinks + window.

``CompressedKVCache`` follows KIVI's schedule: new tokens are attended at full precision; once a
group of ``group`` tokens is complete (and, in mixed mode, has left the recent window) it is
quantized in place, keys per channel and values per token (tripath/engine/kv/quant.py), and every
later query sees the dequantized values.  Mixed precision keeps the attention sinks, the recent
window and the heavy hitters (tokens with the largest attention received so far, summed over heads
and queries, as H2O) in full precision.  The ``window`` mode is StreamingLLM (tripath/engine/kv/window.py).
Attention itself is the same SDPA call as DenseKVCache, so "fp" is bit-identical to it.
The cache keeps the dequantized values for attention to read and counts the bytes of the stored
form (packed codes, scales, zero points, protected tokens): it reproduces the numerics of a low-bit
cache exactly, not its run-time memory saving or its dequantization cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from tripath.engine.kv.dense import dense_attention
from tripath.engine.kv.quant import check_mixed_fields, mode_bits, quantize_keys, quantize_values
from tripath.engine.kv.window import SinkWindowCache
from tripath.engine.model.model import AttentionFn

MODES = ("fp", "int8", "int4", "mixed-int8", "mixed-int4", "window")


@dataclass(frozen=True)
class KVCompression:
    mode: str = "fp"
    group: int = 32  # tokens per key group (per channel)
    value_group: int = 32  # channels per value group (per token); must divide head_dim
    sink_tokens: int = 4  # mixed and window modes
    recent_tokens: int = 64  # mixed: the full-precision recent window
    heavy_fraction: float = 0.05  # mixed: share of all tokens kept in full precision as heavy hitters
    window_tokens: int = 256  # window mode: tokens kept after the sinks

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"KVCompression.mode: must be one of {MODES}, got {self.mode!r}")
        for name in ("group", "value_group", "window_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"KVCompression.{name}: must be >= 1, got {getattr(self, name)}")
        check_mixed_fields("KVCompression", self.sink_tokens, self.recent_tokens, self.heavy_fraction)

    @property
    def bits(self) -> int | None:
        return mode_bits(self.mode)

    @property
    def mixed(self) -> bool:
        return self.mode.startswith("mixed")


class CompressedKVCache:
    """An AttentionFn (batch 1) that stores K/V in one of the quantized modes."""

    def __init__(self, num_layers: int, compression: KVCompression) -> None:
        self.c = compression
        self.keys: list[Tensor | None] = [None] * num_layers
        self.values: list[Tensor | None] = [None] * num_layers
        self.scores: list[Tensor | None] = [None] * num_layers  # attention received per token (mixed)
        start = compression.sink_tokens if compression.mixed else 0
        self.quantized_upto = [start] * num_layers  # tokens [start, quantized_upto) went through a group
        self.protected = [0] * num_layers  # heavy hitters kept in full precision inside quantized groups
        self.stored_bytes = [0] * num_layers  # codes + scales + zeros of the quantized groups

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [1, Tn, Hq, D], k/v [1, Tn, Hkv, D] -> [1, Tn, Hq, D]."""
        past_k, past_v = self.keys[layer], self.values[layer]
        if past_k is not None and past_v is not None:
            k = torch.cat([past_k, k], dim=1)  # [1, L, Hkv, D]
            v = torch.cat([past_v, v], dim=1)
        self.keys[layer], self.values[layer] = k, v
        out = dense_attention(q, k, v)
        if self.c.mixed:
            self._accumulate(layer, q, k)
        self._compress(layer)
        return out

    def _accumulate(self, layer: int, q: Tensor, k: Tensor) -> None:
        """Add the attention each key received from these queries (summed over heads), as H2O scores."""
        group = q.shape[2] // k.shape[2]
        qh = q[0].transpose(0, 1)  # [Hq, Tn, D]
        kh = k[0].transpose(0, 1).repeat_interleave(group, dim=0)  # [Hq, L, D]
        new, total = q.shape[1], k.shape[1]
        logits = qh @ kh.transpose(1, 2) / math.sqrt(q.shape[-1])  # [Hq, Tn, L]
        causal = torch.ones(new, total, dtype=torch.bool, device=q.device).tril(diagonal=total - new)
        probs = logits.masked_fill(~causal, float("-inf")).softmax(-1)
        received = probs.sum(dim=(0, 1))  # [L]
        prev = self.scores[layer]
        if prev is not None:
            received[: prev.shape[0]] += prev
        self.scores[layer] = received

    def _compress(self, layer: int) -> None:
        k, v, bits = self.keys[layer], self.values[layer], self.c.bits
        if bits is None or k is None or v is None:
            return
        length, group = k.shape[1], self.c.group
        recent = self.c.recent_tokens if self.c.mixed else 0
        while self.quantized_upto[layer] + group <= length - recent:
            lo = self.quantized_upto[layer]
            hi = lo + group
            protect = self._heavy_hitters(layer, lo, hi) if self.c.mixed else None
            k_new, qk = quantize_keys(k[0, lo:hi], bits, protect)
            v_new, qv = quantize_values(v[0, lo:hi], bits, self.c.value_group, protect)
            k[0, lo:hi], v[0, lo:hi] = k_new, v_new
            self.stored_bytes[layer] += qk.nbytes + qv.nbytes
            self.protected[layer] += 0 if protect is None else int(protect.sum())
            self.quantized_upto[layer] = hi

    def _heavy_hitters(self, layer: int, lo: int, hi: int) -> Tensor:
        scores = self.scores[layer]
        assert scores is not None
        count = math.ceil(self.c.heavy_fraction * scores.shape[0])
        if count == 0:
            return torch.zeros(hi - lo, dtype=torch.bool, device=scores.device)
        threshold = scores.topk(count).values[-1]
        return scores[lo:hi] >= threshold

    def bytes_per_token(self) -> float:
        """Bytes stored per cached token over all layers: full-precision tokens at their size, quantized
        groups at the bytes of their codes, scales and zero points (plus protected tokens' copies)."""
        total, tokens = 0, 0
        for layer, k in enumerate(self.keys):
            if k is None:
                continue
            per_token_fp = 2 * k[0, 0].numel() * k.element_size()
            start = self.c.sink_tokens if self.c.mixed else 0
            quantized = self.quantized_upto[layer] - start if self.c.bits is not None else 0
            fp_tokens = k.shape[1] - quantized + self.protected[layer]
            total += fp_tokens * per_token_fp + self.stored_bytes[layer]
            tokens = k.shape[1]
        return total / tokens if tokens else 0.0


def make_cache(compression: KVCompression, num_layers: int) -> AttentionFn:
    """The attention cache of a mode (a fresh one per sequence)."""
    if compression.mode == "window":
        return SinkWindowCache(num_layers, compression.sink_tokens, compression.window_tokens)
    return CompressedKVCache(num_layers, compression)


def cache_bytes_per_token(cache: AttentionFn) -> float:
    """Stored bytes per token of context seen, for any cache make_cache returns."""
    if isinstance(cache, SinkWindowCache):
        k = cache.keys[0]
        if k is None or cache.length == 0:
            return 0.0
        per_token = 2 * k[0, 0].numel() * k.element_size() * len(cache.keys)
        return per_token * cache.kept_tokens() / cache.length
    assert isinstance(cache, CompressedKVCache)
    return cache.bytes_per_token()
