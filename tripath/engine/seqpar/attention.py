"""Per-rank partial attention with its log-sum-exp, and the K/V exchange between ranks.

Each rank holds the queries of its own positions and, after the exchange, the keys of every
rank, both as runs of contiguous positions (sharding.Segment).  For causal attention a
(query run, key run) pair is one of four kinds, which decides the kernel call:

- full:     every key precedes every query -> no mask (GQA folded into query rows, no K/V copy)
- diagonal: the same run -> plain causal attention
- none:     every key follows every query -> skipped (an empty partial, weight 0 in the merge)
- partial:  overlapping runs of different lengths -> explicit mask (only uneven custom layouts)

Kernel: ``aten._scaled_dot_product_flash_attention_for_cpu`` returns the LSE next to the
output in one pass; computing the LSE separately made SP slower than one rank in a trial
here, so it is the default on CPU.  It is a private op: tests pin its LSE (natural log,
fp32), its grouped-query heads (fewer K/V heads are served in HF repeat_kv order, so no
copy) and its fully masked rows (out 0 and lse 0, not -inf, so we overwrite those rows).
``fused=False`` (and every non-CPU device) uses the public fallback: fp32 scores,
logsumexp and softmax in query blocks, K/V heads expanded for GQA.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from tripath.engine.seqpar.sharding import Segment
from tripath.engine.softmax_merge import merge_partials

_FALLBACK_QUERY_BLOCK = 512  # bounds the fallback's score matrix to [B, H, 512, Tk]


@dataclass
class PhaseTimes:
    """Wall seconds spent per phase on this rank (accumulated; comm includes waiting for peers).

    comm_cpu_s is this thread's CPU time inside the collectives, so comm_s - comm_cpu_s is the time
    it waited (for the peer, the socket, a core): real time that a thread-CPU clock cannot see.
    """

    attention_s: float = 0.0
    comm_s: float = 0.0
    merge_s: float = 0.0
    comm_cpu_s: float = 0.0

    def reset(self) -> None:
        self.attention_s = self.comm_s = self.merge_s = self.comm_cpu_s = 0.0

    @property
    def comm_wait_s(self) -> float:
        """Wall time in collectives that this thread did not spend on a CPU."""
        return max(0.0, self.comm_s - self.comm_cpu_s)

    @contextmanager
    def communicating(self) -> Iterator[None]:
        """Time a collective on both clocks (wall into comm_s, thread CPU into comm_cpu_s)."""
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.comm_cpu_s += time.thread_time() - cpu
            self.comm_s += time.perf_counter() - wall


def fused_kernel_available(device: torch.device) -> bool:
    return device.type == "cpu" and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")


def reference_attention_with_lse(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Public-op fallback. q [B,Hq,Tq,D], k/v [B,Hkv,Tk,D], mask [Tq,Tk] bool (True = visible) or None.

    Returns out [B,Hq,Tq,D] fp32 and lse [B,Hq,Tq] fp32; rows with no visible key: out 0, lse -inf.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    group = q.shape[1] // k.shape[1]
    kf, vf = k.float(), v.float()
    if group > 1:  # HF repeat_kv order: kv head j serves query heads j*G .. j*G+G-1
        kf, vf = kf.repeat_interleave(group, dim=1), vf.repeat_interleave(group, dim=1)  # [B, Hq, Tk, D]
    outs, lses = [], []
    for start in range(0, q.shape[2], _FALLBACK_QUERY_BLOCK):
        end = min(start + _FALLBACK_QUERY_BLOCK, q.shape[2])
        scores = torch.matmul(q[:, :, start:end].float(), kf.transpose(-1, -2)) * scale  # [B, H, t, Tk]
        if mask is not None:
            scores = scores.masked_fill(~mask[start:end], float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)  # [B, H, t]
        safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        probs = torch.exp(scores - safe.unsqueeze(-1))  # masked -> exp(-inf) = 0
        outs.append(torch.matmul(probs, vf))  # [B, H, t, D]
        lses.append(lse)
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


def attention_with_lse(q: Tensor, k: Tensor, v: Tensor, causal: bool, fused: bool) -> tuple[Tensor, Tensor]:
    """q [B,Hq,Tq,D], k/v [B,Hkv,Tk,D] (Hq a multiple of Hkv) -> out [B,Hq,Tq,D], lse [B,Hq,Tq] fp32.

    causal means query i sees keys 0..i (top-left aligned; callers use it only with Tq == Tk).
    """
    if fused and fused_kernel_available(q.device):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        return out, lse.float()
    mask = None
    if causal:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    return reference_attention_with_lse(q, k, v, mask)


def relation(q_seg: Segment, k_seg: Segment) -> str:
    """How causal masking treats a (query run, key run) pair: full | none | diagonal | partial."""
    if k_seg.end - 1 <= q_seg.start:
        return "full"
    if k_seg.start > q_seg.end - 1:
        return "none"
    if k_seg == q_seg:
        return "diagonal"
    return "partial"


def full_attention(q: Tensor, k: Tensor, v: Tensor, fused: bool) -> tuple[Tensor, Tensor]:
    """Every query sees every key: q [B,Hq,Tq,D] contiguous, k/v [B,Hkv,Tk,D] -> out, lse fp32."""
    b, hq, tq, d = q.shape
    hkv = k.shape[1]
    # no mask, so query rows are interchangeable: the G query heads of a KV head become
    # G*Tq rows of that head (HF repeat_kv order: kv head j serves q heads j*G..j*G+G-1)
    qg = q.reshape(b, hkv, (hq // hkv) * tq, d)  # [B, Hkv, G*Tq, D]
    out, lse = attention_with_lse(qg, k, v, causal=False, fused=fused)
    return out.reshape(b, hq, tq, d), lse.reshape(b, hq, tq)  # [B, Hq, Tq, D], [B, Hq, Tq]


def segment_attention(
    q: Tensor, q_seg: Segment, k: Tensor, v: Tensor, k_seg: Segment, fused: bool
) -> tuple[Tensor, Tensor] | None:
    """Causal attention of one query run over one key run; None when no key is visible.

    q [B,Hq,Tq,D] contiguous, k/v [B,Hkv,Tk,D] -> out [B,Hq,Tq,D], lse [B,Hq,Tq] fp32.
    """
    kind = relation(q_seg, k_seg)
    if kind == "none":
        return None
    if kind == "full":
        return full_attention(q, k, v, fused)
    if kind == "diagonal":
        return attention_with_lse(q, k, v, causal=True, fused=fused)
    q_pos = torch.arange(q_seg.start, q_seg.end, device=q.device)
    k_pos = torch.arange(k_seg.start, k_seg.end, device=q.device)
    visible = k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)  # [Tq, Tk]
    if fused and fused_kernel_available(q.device):
        bias = torch.zeros(visible.shape, dtype=q.dtype, device=q.device).masked_fill(~visible, float("-inf"))
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=bias)
        # the kernel reports lse = 0 (not -inf) for a row that sees nothing: make it an empty partial
        blind = ~visible.any(dim=1)  # [Tq]
        return out.masked_fill(blind[:, None], 0.0), lse.float().masked_fill(blind, float("-inf"))
    return reference_attention_with_lse(q, k, v, visible)


def local_causal_attention(
    q: Tensor,
    q_segments: tuple[Segment, ...],
    kv_shards: list[tuple[Tensor, tuple[Segment, ...]]],
    fused: bool,
    times: PhaseTimes,
) -> tuple[Tensor, Tensor]:
    """This rank's queries over every rank's keys.

    q [B,Hq,Tq,D] (the rank's runs concatenated in q_segments order); kv_shards: per rank,
    kv [2,B,Hkv,T_j,D] and its runs.  Returns out [B,Hq,Tq,D] fp32, lse [B,Hq,Tq] fp32.
    """
    outs, lses, offset = [], [], 0
    if not q_segments:  # this rank holds no position (a prompt shorter than the layout's pieces)
        b, hq, _, d = q.shape
        return q.new_zeros(b, hq, 0, d, dtype=torch.float32), q.new_zeros(b, hq, 0, dtype=torch.float32)
    for q_seg in q_segments:
        qs = q[:, :, offset : offset + q_seg.length].contiguous()  # [B, Hq, t, D]
        offset += q_seg.length
        partials, full_k, full_v = [], [], []
        start = time.perf_counter()
        for kv, k_segments in kv_shards:
            k_off = 0
            for k_seg in k_segments:
                k, v = kv[0, :, :, k_off : k_off + k_seg.length], kv[1, :, :, k_off : k_off + k_seg.length]
                k_off += k_seg.length
                if relation(q_seg, k_seg) == "full":  # pooled below: one kernel call, one partial
                    full_k.append(k)
                    full_v.append(v)
                    continue
                part = segment_attention(qs, q_seg, k, v, k_seg, fused)
                if part is not None:
                    partials.append(part)
        if full_k:
            # every pooled key precedes every query, so their positions no longer matter: concatenate
            k = full_k[0] if len(full_k) == 1 else torch.cat(full_k, dim=2)  # [B, Hkv, sum T_j, D]
            v = full_v[0] if len(full_v) == 1 else torch.cat(full_v, dim=2)
            partials.append(full_attention(qs, k, v, fused))
        middle = time.perf_counter()
        times.attention_s += middle - start
        # every query run sees at least its own diagonal, so partials is never empty
        if len(partials) == 1:
            out, lse = partials[0][0].float(), partials[0][1]
        else:
            out, lse = merge_partials([p[0] for p in partials], [p[1] for p in partials])
        times.merge_s += time.perf_counter() - middle
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


def allgather_padded(local: Tensor, lengths: list[int], dim: int, group: dist.ProcessGroup | None) -> list[Tensor]:
    """All-gather tensors that differ only in size along `dim` (gloo needs equal sizes: pad, then trim)."""
    longest = max(lengths)
    pad = longest - local.shape[dim]
    if pad:
        shape = list(local.shape)
        shape[dim] = pad
        local = torch.cat([local, local.new_zeros(shape)], dim=dim)
    buffers = [torch.empty_like(local) for _ in lengths]
    dist.all_gather(buffers, local.contiguous(), group=group)
    return [buf.narrow(dim, 0, n) for buf, n in zip(buffers, lengths, strict=True)]


def sharded_causal_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    segments: list[tuple[Segment, ...]],
    group: dist.ProcessGroup | None,
    fused: bool,
    times: PhaseTimes,
) -> tuple[Tensor, Tensor]:
    """Causal attention of a sequence sharded over the ranks of `group` (every rank calls it).

    q [B,Hq,T_r,D], k/v [B,Hkv,T_r,D]: this rank's positions, runs in segments[rank] order;
    segments: every rank's runs.  Returns this rank's out [B,Hq,T_r,D] and lse [B,Hq,T_r], fp32.
    """
    rank = dist.get_rank(group) if len(segments) > 1 else 0
    kv = torch.stack((k, v)).contiguous()  # [2, B, Hkv, T_r, D]
    with times.communicating():
        if len(segments) == 1:
            shards = [kv]
        else:
            lengths = [sum(s.length for s in segs) for segs in segments]
            shards = allgather_padded(kv, lengths, dim=3, group=group)
    return local_causal_attention(q, segments[rank], list(zip(shards, segments, strict=True)), fused, times)
