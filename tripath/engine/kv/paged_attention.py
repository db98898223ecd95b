"""Paged attention for one engine step: write the new K/V into cache blocks, attend through block tables.

The step's tokens from all scheduled sequences are packed into one row [1, N].  Sequences
that add exactly one token (decodes) come first and are served by ONE batched SDPA call;
each multi-token chunk (a prefill, or a chunk of one) gets its own call.  Metadata (slots,
positions, gather indices) is built once per step on the device and shared by all layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from tripath.engine.kv.paged import KVTensors


def prefix_mask(cached: int, total: int, device: torch.device) -> Tensor:
    """[T, L] bool: query i sits at position cached + i and sees keys 0..cached + i (T = total - cached)."""
    q_pos = torch.arange(cached, total, device=device)
    return torch.arange(total, device=device).unsqueeze(0) <= q_pos.unsqueeze(1)  # [T, L]


def chunk_attention(qc: Tensor, kc: Tensor, vc: Tensor, mask: Tensor | None, causal: bool, group: int) -> Tensor:
    """One multi-token chunk: qc [1, Hq, T, D], kc/vc [1, Hkv, L, D] -> [T, Hq, D]."""
    if group > 1:  # HF repeat_kv order: kv head j serves query heads j*G .. j*G+G-1
        kc, vc = kc.repeat_interleave(group, 1), vc.repeat_interleave(group, 1)
    res = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask, is_causal=causal)
    return res[0].transpose(0, 1)  # [T, Hq, D]


def decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, group: int) -> Tensor:
    """One token per sequence: q [Bd, Hq, D], k/v [Bd, Hkv, L, D], mask [Bd, 1, 1, L] -> [Bd, Hq, D]."""
    bd, hq, dim = q.shape
    # GQA without copying K/V: a KV head's G query heads act as G query rows
    qg = q.view(bd, hq // group, group, dim)  # [Bd, Hkv, G, D]
    out = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask)  # [Bd, Hkv, G, D]
    return out.reshape(bd, hq, dim)


@dataclass(frozen=True)
class SequenceChunk:
    """What one sequence contributes to a step: num_new tokens after num_cached already in the cache."""

    num_cached: int
    num_new: int
    block_table: list[int]


class PagedAttention:
    """The ``attention`` callable LlamaModel.forward takes, bound to one step's batch."""

    def __init__(self, kv: KVTensors, chunks: list[SequenceChunk], group: int) -> None:
        if not chunks:
            raise ValueError("chunks: a step needs at least one sequence")
        self.kv, self.group = kv, group
        device, bs = kv.k.device, kv.block_size
        self.num_decode = 0
        while self.num_decode < len(chunks) and chunks[self.num_decode].num_new == 1:
            self.num_decode += 1
        if any(c.num_new == 1 for c in chunks[self.num_decode :]) or any(c.num_new < 1 for c in chunks):
            raise ValueError("chunks: one-token chunks must come first and every chunk needs >= 1 token")
        width = max(len(c.block_table) for c in chunks)
        tables = torch.tensor(
            [c.block_table + [0] * (width - len(c.block_table)) for c in chunks], dtype=torch.int64
        ).to(device, non_blocking=True)  # [S, max_blocks], 0-padded
        cached = torch.tensor([c.num_cached for c in chunks], dtype=torch.int64).to(device, non_blocking=True)
        counts_list = [c.num_new for c in chunks]
        counts = torch.tensor(counts_list, dtype=torch.int64).to(device, non_blocking=True)
        n = sum(counts_list)
        seq_of_token = torch.repeat_interleave(
            torch.arange(len(chunks), device=device), counts, output_size=n
        )
        first_token = torch.cumsum(counts, 0) - counts  # packed index of each chunk's first token
        offset = torch.arange(n, device=device) - first_token[seq_of_token]
        self.positions = (cached[seq_of_token] + offset).unsqueeze(0)  # [1, N]
        pos = self.positions[0]
        # slot = physical_block * block_size + offset in block
        self.slots = tables[seq_of_token, pos // bs] * bs + pos % bs  # [N]
        # decodes: gather whole blocks; keys past each sequence's length are masked out
        if self.num_decode:
            d = self.num_decode
            ctx = [c.num_cached + 1 for c in chunks[:d]]
            nblocks = -(-max(ctx) // bs)
            self.decode_blocks = tables[:d, :nblocks]  # [Bd, nb]
            key_pos = torch.arange(nblocks * bs, device=device)
            self.decode_mask = (key_pos.unsqueeze(0) < (cached[:d] + 1).unsqueeze(1))[:, None, None, :]
        # multi-token chunks: (start, end) in the packed row, tokens cached before, its block ids
        self.prefills: list[tuple[int, int, int, Tensor]] = []
        start = self.num_decode
        for i, c in enumerate(chunks[self.num_decode :], start=self.num_decode):
            total = c.num_cached + c.num_new
            self.prefills.append((start, start + c.num_new, c.num_cached, tables[i, : -(-total // bs)]))
            start += c.num_new

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [1, N, Hq, D], k/v [1, N, Hkv, D] -> [1, N, Hq, D]; stores k/v in this layer's cache slots."""
        k_slots, v_slots = self.kv.layer_slots(layer)  # [num_blocks*bs, Hkv, D]
        k_slots.index_copy_(0, self.slots, k[0])
        v_slots.index_copy_(0, self.slots, v[0])
        n = q.shape[1]
        if self.num_decode == n:
            return self._decode(layer, q[0]).unsqueeze(0)
        out = torch.empty_like(q[0])  # [N, Hq, D]
        if self.num_decode:
            out[: self.num_decode] = self._decode(layer, q[0, : self.num_decode])
        for start, end, cached, blocks in self.prefills:
            # 4-D [1, H, T, D] inputs: with 3-D ones CPU SDPA falls back to the O(T^2)-memory math kernel
            qc = q[:, start:end].transpose(1, 2)  # [1, Hq, T, D]
            if cached == 0:  # fresh prompt: the new k/v are the whole context, plain causal attention
                kc, vc = k[:, start:end].transpose(1, 2), v[:, start:end].transpose(1, 2)  # [1, Hkv, T, D]
                mask, causal = None, True
            else:
                total = cached + end - start
                both = self.kv.gather_blocks(layer, blocks.unsqueeze(0))[:, :, :total]  # [2, 1, L, Hkv, D]
                kc, vc = both[0].transpose(1, 2), both[1].transpose(1, 2)  # [1, Hkv, L, D]
                mask, causal = prefix_mask(cached, total, q.device), False
            out[start:end] = chunk_attention(qc, kc, vc, mask, causal, self.group)
        return out.unsqueeze(0)

    def _decode(self, layer: int, q: Tensor) -> Tensor:
        """q [Bd, Hq, D] (one token each) -> [Bd, Hq, D] over each sequence's cached context."""
        both = self.kv.gather_blocks(layer, self.decode_blocks)  # [2, Bd, L, Hkv, D]
        k, v = both[0].transpose(1, 2), both[1].transpose(1, 2)  # [Bd, Hkv, L, D]
        return decode_attention(q, k, v, self.decode_mask, self.group)
