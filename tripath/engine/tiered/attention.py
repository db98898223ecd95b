"""Attention of one sequence over a TieredKVCache, with exactly DenseKVCache's arithmetic.

The cached K/V come back from the tiers bit for bit and as contiguous [1, L, Hkv, D] tensors, and
``dense_attention`` is the same op sequence as DenseKVCache.__call__ (same mask, same SDPA call), so
generation with tiering on is bit-identical to the plain in-memory cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from tripath.engine.tiered.cache import TieredKVCache


def dense_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The exact op sequence of DenseKVCache: q [B, Tn, Hq, D], k/v [B, L, Hkv, D] -> [B, Tn, Hq, D]."""
    group = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)  # [B, Hq, Tn, D]
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)  # [B, Hq, L, D], HF repeat_kv order
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    new, total = q.shape[1], k.shape[1]
    mask = torch.ones(new, total, dtype=torch.bool, device=q.device).tril(diagonal=total - new)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
    return out.transpose(1, 2)  # [B, Tn, Hq, D]


class TieredAttention:
    """The AttentionFn of one sequence: store the new K/V in the tiers, page the layer in, attend."""

    def __init__(self, cache: TieredKVCache, seq: int) -> None:
        self.cache, self.seq = cache, seq

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [1, Tn, Hq, D], k/v [1, Tn, Hkv, D] -> [1, Tn, Hq, D]."""
        self.cache.append(self.seq, layer, k[0], v[0])
        keys, values = self.cache.gather(self.seq, layer)
        return dense_attention(q, keys.unsqueeze(0), values.unsqueeze(0))
