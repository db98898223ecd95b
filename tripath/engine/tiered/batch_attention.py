"""Attention for one continuous-batching step whose KV lives in a TieredKVCache.

The same packed row [1, N] and the same op sequence as PagedAttention (tripath/engine/kv/paged_attention.py):
one-token chunks (decodes) first, served by ONE batched SDPA call over a [2, Bd, nb * block_size,
Hkv, D] buffer padded to the paged engine's block multiple and masked past each length; every
multi-token chunk gets its own call.  Only where K/V come from differs: each sequence's new K/V are
appended to the tiers and its layer is paged in (fetch-ahead of the next layer on the background
thread) and copied into the buffer, bit for bit, so the output is bit-identical to the paged engine's.

A TierFault while serving sequence r (disk full, missing or corrupt page, unwritable directory) ends
only r: its pages are dropped, its rows of this step get zeros (its logits are discarded) and every
later layer skips it; the other sequences' rows do not depend on r's (attention is per sequence and
the matmuls are row-wise), so they are exactly what they would have been.  A sequence whose cached
length is not what the engine computed (an exception other than a TierFault ended an earlier step
after some layers had stored its new K/V) ends the same way, so such a step cannot leave the engine
broken for the requests after it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tripath.engine.kv.paged_attention import chunk_attention, decode_attention, prefix_mask
from tripath.engine.tiered.cache import TieredKVCache
from tripath.engine.tiered.faults import TierFault


class TieredBatchAttention:
    """The ``attention`` callable LlamaModel.forward takes, bound to one step's batch on tiered KV."""

    def __init__(self, cache: TieredKVCache, seq_ids: list[int], num_cached: list[int], num_new: list[int],
                 block_size: int, group: int, device: torch.device) -> None:
        if not seq_ids or not len(seq_ids) == len(num_cached) == len(num_new):
            raise ValueError("seq_ids/num_cached/num_new: one entry per scheduled sequence, at least one")
        self.cache, self.seq_ids, self.group, self.block_size = cache, seq_ids, group, block_size
        self.num_cached, self.num_new = num_cached, num_new
        self.num_decode = 0
        while self.num_decode < len(num_new) and num_new[self.num_decode] == 1:
            self.num_decode += 1
        if any(n == 1 for n in num_new[self.num_decode :]) or any(n < 1 for n in num_new):
            raise ValueError("num_new: one-token chunks must come first and every chunk needs >= 1 token")
        self.failed: dict[int, str] = {}  # request id -> "<FaultClass>: message"
        self.starts = [0]  # packed index of each chunk's first token
        for n in num_new:
            self.starts.append(self.starts[-1] + n)
        positions = [c + i for c, n in zip(num_cached, num_new, strict=True) for i in range(n)]
        self.positions = torch.tensor(positions, dtype=torch.int64, device=device).unsqueeze(0)  # [1, N]
        if self.num_decode:
            d, bs = self.num_decode, block_size
            ctx = torch.tensor([c + 1 for c in num_cached[:d]], dtype=torch.int64, device=device)  # [Bd]
            self.decode_len = -(-(max(num_cached[:d]) + 1) // bs) * bs  # PagedAttention's nblocks * bs
            key_pos = torch.arange(self.decode_len, device=device)
            self.decode_mask = (key_pos.unsqueeze(0) < ctx.unsqueeze(1))[:, None, None, :]  # [Bd, 1, 1, L]

    def _store(self, i: int, layer: int, k: Tensor, v: Tensor) -> bool:
        """Append chunk i's new K/V to the tiers; False (and the request ended) on a tier fault."""
        rid = self.seq_ids[i]
        if rid in self.failed:
            return False
        held = self.cache.length(rid, layer)
        if held != self.num_cached[i]:  # an exception ended an earlier step between this layer's append and the end
            self._fail(rid, TierFault(f"request {rid}: the tiered cache holds {held} tokens of layer {layer}, the "
                                      f"engine computed {self.num_cached[i]} (an earlier step ended by an error)"))
            return False
        start, end = self.starts[i], self.starts[i + 1]
        try:
            self.cache.append(rid, layer, k[0, start:end], v[0, start:end])
        except TierFault as fault:
            self._fail(rid, fault)
            return False
        return True

    def _fetch(self, i: int, layer: int, out: Tensor) -> bool:
        """Page sequence i's layer into out [2, L, Hkv, D]; False (and the request ended) on a tier fault."""
        rid = self.seq_ids[i]
        if rid in self.failed:
            return False
        try:
            self.cache.gather_into(rid, layer, out, prefetch_next=False)
        except TierFault as fault:
            self._fail(rid, fault)
            return False
        return True

    def _fail(self, rid: int, fault: TierFault) -> None:
        self.failed[rid] = f"{type(fault).__name__}: {fault}"
        self.cache.free(rid)  # its pages leave every tier now, making room for the others

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [1, N, Hq, D], k/v [1, N, Hkv, D] -> [1, N, Hq, D]; stores k/v in the tiers first."""
        out = self._attend(layer, q, k, v)
        # fetch the next layer ahead only now: while this layer's sequences were being paged in, a
        # fetch-ahead would have evicted pages they still needed (LRU sees a cyclic scan)
        for rid in self.seq_ids:
            if rid not in self.failed:
                self.cache.prefetch(rid, (layer + 1) % self.cache.num_layers)
        return out

    def _attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        live = [self._store(i, layer, k, v) for i in range(len(self.seq_ids))]
        n = q.shape[1]
        if self.num_decode == n:
            return self._decode(layer, q[0], live).unsqueeze(0)
        out = torch.empty_like(q[0])  # [N, Hq, D]
        if self.num_decode:
            out[: self.num_decode] = self._decode(layer, q[0, : self.num_decode], live)
        for i in range(self.num_decode, len(self.seq_ids)):
            start, end, cached = self.starts[i], self.starts[i + 1], self.num_cached[i]
            if not live[i]:
                out[start:end] = 0  # the request has failed; its logits are discarded
                continue
            qc = q[:, start:end].transpose(1, 2)  # [1, Hq, T, D]
            if cached == 0:  # fresh prompt: the new k/v are the whole context, plain causal attention
                kc, vc = k[:, start:end].transpose(1, 2), v[:, start:end].transpose(1, 2)  # [1, Hkv, T, D]
                mask, causal = None, True
            else:
                total = cached + end - start
                padded = -(-total // self.block_size) * self.block_size  # PagedAttention's block layout
                both = k.new_zeros((2, 1, padded, *k.shape[2:]))  # [2, 1, Lp, Hkv, D]
                if not self._fetch(i, layer, both[:, 0, :total]):
                    out[start:end] = 0
                    continue
                both = both[:, :, :total]  # [2, 1, L, Hkv, D]
                kc, vc = both[0].transpose(1, 2), both[1].transpose(1, 2)  # [1, Hkv, L, D]
                mask, causal = prefix_mask(cached, total, q.device), False
            out[start:end] = chunk_attention(qc, kc, vc, mask, causal, self.group)
        return out.unsqueeze(0)

    def _decode(self, layer: int, q: Tensor, live: list[bool]) -> Tensor:
        """q [Bd, Hq, D] (one token each) -> [Bd, Hq, D] over each sequence's cached context."""
        bd, hq, dim = q.shape
        hkv = hq // self.group
        # zero padding: masked keys must be finite (0 x NaN would leak through the softmax's zero weight)
        both = q.new_zeros((2, bd, self.decode_len, hkv, dim))  # [2, Bd, L, Hkv, D], as gather_blocks lays it out
        for i in range(bd):
            if live[i]:
                self._fetch(i, layer, both[:, i, : self.num_cached[i] + 1])
        k, v = both[0].transpose(1, 2), both[1].transpose(1, 2)  # [Bd, Hkv, L, D]
        return decode_attention(q, k, v, self.decode_mask, self.group)
