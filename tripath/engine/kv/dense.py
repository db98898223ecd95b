"""The simplest KV cache: per-layer contiguous K/V tensors grown by concatenation.

Used where only correctness matters, not paging: the reference attention arithmetic
(``dense_attention``) and measuring the per-token decode cost of the draft and the target at
batch 1 (the draft/target cost ratio c of speculative decoding).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import Tensor

from tripath.engine.model.model import LlamaModel


class DenseKVCache:
    """An AttentionFn for LlamaModel that appends the new K/V of each call to the layer's cache."""

    def __init__(self, num_layers: int) -> None:
        self.keys: list[Tensor | None] = [None] * num_layers
        self.values: list[Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else int(self.keys[0].shape[1])

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [B, Tn, Hq, D], k/v [B, Tn, Hkv, D] for Tn new tokens after `length` cached ones."""
        past_k, past_v = self.keys[layer], self.values[layer]
        if past_k is not None and past_v is not None:
            k = torch.cat([past_k, k], dim=1)  # [B, Tc + Tn, Hkv, D]
            v = torch.cat([past_v, v], dim=1)
        self.keys[layer], self.values[layer] = k, v
        return dense_attention(q, k, v)


def dense_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """q [B, Tn, Hq, D] for the last Tn of the L positions of k/v [B, L, Hkv, D] -> [B, Tn, Hq, D]; the
    reference arithmetic other attention paths (the KV-compression modes) reuse to stay bit-comparable."""
    group = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)  # [B, Hq, Tn, D]
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)  # [B, Hq, L, D], HF repeat_kv order
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    new, total = q.shape[1], k.shape[1]
    # New token i sits at absolute position total - new + i and sees keys 0..that position.
    mask = torch.ones(new, total, dtype=torch.bool, device=q.device).tril(diagonal=total - new)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
    return out.transpose(1, 2)  # [B, Tn, Hq, D]


def _step(model: LlamaModel, cache: DenseKVCache, ids: Tensor) -> Tensor:
    """Feeds ids [1, Tn] after the cached tokens; returns the logits of the last one [V]."""
    start = cache.length
    positions = torch.arange(start, start + ids.shape[1], device=ids.device).unsqueeze(0)  # [1, Tn]
    last = torch.tensor([ids.shape[1] - 1], device=ids.device)
    return model(ids, positions=positions, attention=cache, logits_index=last)[0, -1]


@torch.inference_mode()
def decode_step_ms(model: LlamaModel, context: int, steps: int, repeats: int) -> float:
    """Median over `repeats` of the mean wall time (ms) of one batch-1 decode step after `context`
    prompt tokens: the per-token cost a speculative draft or target pays while generating."""
    if context < 1 or steps < 1 or repeats < 1:
        raise ValueError(f"context/steps/repeats: must be >= 1, got {context}/{steps}/{repeats}")
    device = next(model.parameters()).device
    prompt = torch.arange(context, device=device).remainder(256).unsqueeze(0)  # [1, context] byte ids
    times = []
    for _ in range(repeats):
        cache = DenseKVCache(model.config.num_layers)
        logits = _step(model, cache, prompt)
        start = time.perf_counter()
        for _ in range(steps):
            logits = _step(model, cache, logits.argmax().view(1, 1))
        times.append((time.perf_counter() - start) / steps * 1e3)
    return float(sorted(times)[len(times) // 2])
