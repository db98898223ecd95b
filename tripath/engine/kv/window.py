"""Sliding-window attention with attention sinks, as StreamingLLM (Xiao et al. 2024).

The cache keeps the first ``sink_tokens`` tokens (which soak up attention mass whatever their
content) and the last ``window_tokens`` tokens; everything between is evicted for good, so the
memory per sequence is bounded by sink_tokens + window_tokens.  Query at position p sees keys at
positions j < sink_tokens or p - window_tokens < j <= p.

One deliberate difference from the paper: keys keep the RoPE rotation of their original position
(they are cached after RoPE, as everywhere in this engine) instead of being re-rotated to their
slot in the cache.  Our contexts stay inside the positions the model was trained on, which is the
case the re-rotation exists to avoid leaving.  When the whole context fits in the window the cache
is exactly the full cache, and attention is the same SDPA call on the same tensors (bit-identical).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def sink_window_mask(query_pos: Tensor, key_pos: Tensor, sink_tokens: int, window_tokens: int) -> Tensor:
    """[Tq, Tk] bool: query at p may see key at j iff j <= p and (j < sinks or j > p - window)."""
    q, k = query_pos.unsqueeze(1), key_pos.unsqueeze(0)
    return (k <= q) & ((k < sink_tokens) | (k > q - window_tokens))


class SinkWindowCache:
    """An AttentionFn (batch 1) that keeps only the sinks and the recent window of each layer."""

    def __init__(self, num_layers: int, sink_tokens: int, window_tokens: int) -> None:
        if sink_tokens < 0 or window_tokens < 1:
            raise ValueError(f"sink_tokens >= 0 and window_tokens >= 1, got {sink_tokens}, {window_tokens}")
        self.sink_tokens, self.window_tokens = sink_tokens, window_tokens
        self.keys: list[Tensor | None] = [None] * num_layers
        self.values: list[Tensor | None] = [None] * num_layers
        self.positions: list[Tensor | None] = [None] * num_layers  # absolute position of each kept token
        self.length = 0  # tokens seen (the next token's position), counted at layer 0

    def kept_tokens(self, layer: int = 0) -> int:
        k = self.keys[layer]
        return 0 if k is None else int(k.shape[1])

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [1, Tn, Hq, D], k/v [1, Tn, Hkv, D] -> [1, Tn, Hq, D]."""
        new = q.shape[1]
        start = self.length if layer == 0 else self.length - new  # layer 0 advances the count
        new_pos = torch.arange(start, start + new, device=q.device)
        past_k, past_v, past_pos = self.keys[layer], self.values[layer], self.positions[layer]
        if past_k is not None and past_v is not None and past_pos is not None:
            k = torch.cat([past_k, k], dim=1)  # [1, Tk, Hkv, D]
            v = torch.cat([past_v, v], dim=1)
            key_pos = torch.cat([past_pos, new_pos])
        else:
            key_pos = new_pos
        if layer == 0:
            self.length += new
        group = q.shape[2] // k.shape[2]
        qh = q.transpose(1, 2)  # [1, Hq, Tn, D]
        kh = k.transpose(1, 2).repeat_interleave(group, dim=1)  # [1, Hq, Tk, D], HF repeat_kv order
        vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
        total = k.shape[1]
        if int(key_pos[-1]) - int(key_pos[0]) + 1 == total and total <= self.window_tokens:
            # nothing evicted and the window reaches back to the first token: the causal mask, built
            # exactly as DenseKVCache builds it
            mask = torch.ones(new, total, dtype=torch.bool, device=q.device).tril(diagonal=total - new)
        else:
            mask = sink_window_mask(new_pos, key_pos, self.sink_tokens, self.window_tokens)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
        # evict what no later query (position >= end) can see: positions in [sinks, end - window]
        end = start + new
        keep = (key_pos < self.sink_tokens) | (key_pos > end - self.window_tokens)
        self.keys[layer], self.values[layer], self.positions[layer] = k[:, keep], v[:, keep], key_pos[keep]
        return out.transpose(1, 2)  # [1, Tn, Hq, D]
