"""Attention for one engine step over a CompressedKVStore, dequantizing a chunk of blocks at a time.

Same contract as tripath/engine/kv/paged_attention.py's PagedAttention (the ``attention`` callable of
LlamaModel.forward, ``positions`` for RoPE, one packed row of every scheduled sequence's new
tokens), but the context is never materialised at full precision: for each sequence the keys and
values are read ``chunk_tokens`` at a time from the store (codes -> working buffer) and combined
with the online softmax (running max m, normaliser l, unnormalised output; Milakov & Gimelshein
2018, the flash-attention recurrence), so the extra memory is one chunk, not the context.

New tokens are written to their (staged, full-precision) blocks before attention, so a prompt
attends to itself at full precision, as in KIVI.  After the last layer the step seals every block
the store may now quantize.  Mixed mode also needs H2O's "attention received" per staged token:
a second pass over the staged blocks only, with the final log-sum-exp of each query.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tripath.engine.kv.compressed_store import CompressedKVStore
from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.softmax_merge import online_softmax_step


def chunked_attention(q: Tensor, q_pos: Tensor, total: int, read: object, chunk_tokens: int,
                      group: int) -> tuple[Tensor, Tensor]:
    """q [T, Hq, D] at positions q_pos [T] over keys 0..total-1 read by ``read(lo, hi) -> (k, v)``
    ([hi-lo, Hkv, D] each): (out [T, Hq, D] in the working dtype, lse [Hkv, G*T])."""
    t, hq, d = q.shape
    hkv = hq // group
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    # GQA: kv head j serves query heads j*G .. j*G+G-1 (HF repeat_kv order); its G*T query rows in one matmul
    qg = q.to(work).view(t, hkv, group, d).permute(1, 2, 0, 3).reshape(hkv, group * t, d) / math.sqrt(d)
    rows_pos = q_pos.repeat(group)  # [G*T]: position of each query row
    m = torch.full((hkv, group * t), -math.inf, dtype=work, device=q.device)
    l = torch.zeros_like(m)  # noqa: E741 - the normaliser's name in the flash-attention papers
    acc = torch.zeros(hkv, group * t, d, dtype=work, device=q.device)
    for lo in range(0, total, chunk_tokens):
        hi = min(lo + chunk_tokens, total)
        if lo > int(q_pos.max()):
            break  # every later key is in every query's future
        k, v = read(lo, hi)  # [C, Hkv, D]
        s = qg @ k.permute(1, 2, 0)  # [Hkv, G*T, C]
        visible = torch.arange(lo, hi, device=q.device)[None, :] <= rows_pos[:, None]  # [G*T, C]
        s = s.masked_fill(~visible, -math.inf)
        m, l, acc = online_softmax_step(m, l, acc, s, lambda p: p @ v.transpose(0, 1))  # noqa: E741, B023
    out = acc / l[..., None]
    out = out.view(hkv, group, t, d).permute(2, 0, 1, 3).reshape(t, hq, d)
    return out, m + torch.log(l)


class CompressedAttention:
    """The ``attention`` callable LlamaModel.forward takes, bound to one step's batch."""

    def __init__(self, store: CompressedKVStore, chunks: list[SequenceChunk], group: int) -> None:
        if not chunks:
            raise ValueError("chunks: a step needs at least one sequence")
        self.store, self.chunks, self.group = store, chunks, group
        bs = store.config.block_size
        pos: list[int] = []
        # per sequence: (start, end) in the packed row; writes: (block, offset, packed start, count)
        self.spans: list[tuple[int, int]] = []
        self.writes: list[tuple[int, int, int, int]] = []
        for c in chunks:
            if c.num_new < 1:
                raise ValueError("chunks: every chunk needs >= 1 token")
            start = len(pos)
            pos += range(c.num_cached, c.num_cached + c.num_new)
            self.spans.append((start, len(pos)))
            p = c.num_cached
            while p < c.num_cached + c.num_new:
                block, off = c.block_table[p // bs], p % bs
                n = min(bs - off, c.num_cached + c.num_new - p)
                if off == 0:
                    store.open_block(block)
                elif block not in store.staged:
                    raise RuntimeError(f"block {block}: writing at offset {off} of a block that is not staged")
                self.writes.append((block, off, start + p - c.num_cached, n))
                p += n
        self.positions = torch.tensor(pos, dtype=torch.int64, device=store.device).unsqueeze(0)  # [1, N]
        # decodes (one new token each) are attended together, one chunk of blocks of every sequence at a time
        self.decodes = [i for i, c in enumerate(chunks) if c.num_new == 1] if len(chunks) > 1 else []
        self.decode_rows = torch.tensor([self.spans[i][0] for i in self.decodes], dtype=torch.int64,
                                        device=store.device)
        self.decode_totals = torch.tensor([chunks[i].num_cached + 1 for i in self.decodes], dtype=torch.int64,
                                          device=store.device)

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [1, N, Hq, D], k/v [1, N, Hkv, D] -> [1, N, Hq, D]; stores k/v in the sequences' staged blocks."""
        for block, off, at, n in self.writes:
            self.store.write(layer, block, off, k[0, at : at + n], v[0, at : at + n])
        out = torch.empty_like(q[0])  # [N, Hq, D]
        bs, chunk = self.store.config.block_size, self.store.config.chunk_tokens
        batched = set(self.decodes)
        if self.decodes:
            res, lse = self._decode(layer, q[0, self.decode_rows])  # [Bd, Hq, D], [Bd, Hkv, G]
            out[self.decode_rows] = res.to(q.dtype)
            if self.store.config.mixed:
                for row, i in enumerate(self.decodes):
                    start, end = self.spans[i]
                    self._accumulate(layer, q[0, start:end], self.positions[0, start:end], lse[row], self.chunks[i])
        for i, (c, (start, end)) in enumerate(zip(self.chunks, self.spans, strict=True)):
            if i in batched:
                continue
            total = c.num_cached + c.num_new
            q_pos = self.positions[0, start:end]

            def read(lo: int, hi: int, table: list[int] = c.block_table) -> tuple[Tensor, Tensor]:
                keys, values = self.store.read(layer, table[lo // bs : -(-hi // bs)])
                return keys[: hi - lo], values[: hi - lo]

            res, lse = chunked_attention(q[0, start:end], q_pos, total, read, chunk, self.group)
            out[start:end] = res.to(q.dtype)
            if self.store.config.mixed:
                self._accumulate(layer, q[0, start:end], q_pos, lse, c)
        if layer == self.store.layers - 1:
            self._seal()
        return out.unsqueeze(0)

    def _decode(self, layer: int, q: Tensor) -> tuple[Tensor, Tensor]:
        """q [Bd, Hq, D], one query per decode sequence -> (out [Bd, Hq, D], lse [Bd, Hkv, G]): the online
        softmax of chunked_attention, batched over the sequences (shorter ones are masked past their end)."""
        bd, hq, d = q.shape
        hkv, g = hq // self.group, self.group
        bs, per_chunk = self.store.config.block_size, self.store.config.chunk_tokens // self.store.config.block_size
        work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        qg = q.to(work).view(bd, hkv, g, d) / math.sqrt(d)  # GQA: kv head j serves query heads j*G .. j*G+G-1
        tables = [self.chunks[i].block_table[: -(-(self.chunks[i].num_cached + 1) // bs)] for i in self.decodes]
        m = torch.full((bd, hkv, g), -math.inf, dtype=work, device=q.device)
        l = torch.zeros_like(m)  # noqa: E741 - the normaliser's name in the flash-attention papers
        acc = torch.zeros(bd, hkv, g, d, dtype=work, device=q.device)
        for c0 in range(0, max(len(t) for t in tables), per_chunk):
            width = min(per_chunk, max(len(t) for t in tables) - c0)
            # a sequence with fewer blocks pads with its first block: read, then masked out
            flat = [b for t in tables for b in (t[c0 : c0 + width] + [t[0]] * width)[:width]]
            k, v = self.store.read(layer, flat)  # [Bd * width * bs, Hkv, D]
            k, v = k.view(bd, width * bs, hkv, d), v.view(bd, width * bs, hkv, d)
            s = torch.einsum("bhgd,bkhd->bhgk", qg, k)  # [Bd, Hkv, G, C]
            key_pos = torch.arange(c0 * bs, (c0 + width) * bs, device=q.device)
            visible = key_pos[None, :] < self.decode_totals[:, None]  # [Bd, C]
            s = s.masked_fill(~visible[:, None, None, :], -math.inf)
            m, l, acc = online_softmax_step(  # noqa: E741
                m, l, acc, s, lambda p: torch.einsum("bhgk,bkhd->bhgd", p, v))  # noqa: B023
        return (acc / l[..., None]).reshape(bd, hq, d), m + torch.log(l)

    def _accumulate(self, layer: int, q: Tensor, q_pos: Tensor, lse: Tensor, c: SequenceChunk) -> None:
        """Attention each staged token received from these queries, summed over heads (H2O's score)."""
        bs, total = self.store.config.block_size, c.num_cached + c.num_new
        t, hq, d = q.shape
        hkv = hq // self.group
        work = lse.dtype
        qg = q.to(work).view(t, hkv, self.group, d).permute(1, 2, 0, 3).reshape(hkv, self.group * t, d)
        rows_pos = q_pos.repeat(self.group)
        for index in range(-(-total // bs)):
            block = c.block_table[index]
            if block not in self.store.scores:
                continue
            keys = self.store.staged[block][layer, 0].to(work)  # [bs, Hkv, D]
            s = qg @ keys.permute(1, 2, 0) / math.sqrt(d)  # [Hkv, G*T, bs]
            key_pos = torch.arange(index * bs, index * bs + bs, device=q.device)
            visible = key_pos[None, :] <= rows_pos[:, None]
            probs = torch.exp(s - lse[..., None]).masked_fill(~visible, 0.0)
            self.store.add_scores(layer, block, probs.sum(dim=(0, 1)))

    def _seal(self) -> None:
        bs = self.store.config.block_size
        for c in self.chunks:
            length = c.num_cached + c.num_new
            for index in range(-(-length // bs)):
                block = c.block_table[index]
                if block in self.store.staged and self.store.sealable(index, length):
                    self.store.seal(block)
