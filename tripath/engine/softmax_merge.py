"""Merging partial attention results by their log-sum-exp: the one identity under sequence parallelism (finished
partials merged pairwise) and chunked attention (the running online-softmax state, ``online_softmax_step``).

Split the keys of one query row into disjoint sets S_1..S_N.  Attention over set i gives
    lse_i = log sum_{j in S_i} exp(s_j)          out_i = sum_{j in S_i} softmax_i(s)_j v_j
and attention over all keys is exactly
    lse = log sum_i exp(lse_i)                   out = sum_i exp(lse_i - lse) out_i
(Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"; the same identity
flash attention uses between tiles and ring-flash-attention uses between ranks).

Computed stably: subtract the largest lse before exponentiating, in fp32 whatever the input
dtype.  A partial with no visible key (every score masked: lse_i = -inf) gets weight exactly 0
and its output is ignored even if it is NaN, so fully masked shards never poison the result;
a row that sees no key at all merges to out = 0, lse = -inf.

Order: exp and max are elementwise, so the weights do not depend on the order of partials;
for two partials the sum is bit-for-bit order-independent (a + b == b + a in IEEE), for more
it is equal up to fp32 rounding of the summation order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


def merge_partials(outs: Sequence[Tensor], lses: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Merge N partial results over disjoint key sets.

    outs: N tensors [..., T, D] (any float dtype); lses: N tensors [..., T] (natural log).
    Returns (out [..., T, D] fp32, lse [..., T] fp32).
    """
    if len(outs) != len(lses) or not outs:
        raise ValueError(f"outs/lses: need the same number (>= 1) of outputs and LSEs, got {len(outs)}/{len(lses)}")
    if len(outs) == 2:
        return merge_pair(outs[0], lses[0], outs[1], lses[1])
    lse_all = torch.stack([x.float() for x in lses])  # [N, ..., T]
    top = lse_all.amax(dim=0)  # [..., T]
    # rows where every partial is empty: shift by 0 so exp(-inf - 0) = 0 instead of exp(nan)
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(lse_all - shift)  # [N, ..., T], in [0, 1]; the largest partial has weight 1
    total = weights.sum(dim=0)  # [..., T], >= 1 unless the row saw no key (then 0)
    lse = shift + torch.log(total)  # log(0) = -inf for empty rows
    scale = weights / torch.where(total > 0, total, torch.ones_like(total))  # exp(lse_i - lse)
    out_all = torch.stack([x.float() for x in outs])  # [N, ..., T, D]
    # 0 * NaN is NaN: drop empty partials explicitly instead of multiplying them by zero
    contrib = torch.where((scale > 0).unsqueeze(-1), out_all * scale.unsqueeze(-1), torch.zeros_like(out_all))
    return contrib.sum(dim=0), lse


def merge_pair(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Two partials -> one: the form sequence parallelism uses (a ring step, or diagonal + earlier keys).

    Same formula as merge_partials, written for two so the [..., T, D] tensors are touched by
    two multiplies and one add only (the general form stacks and masks them: ~4x slower on CPU).
    Symmetric in a and b term by term, so swapping them gives the same bits.
    """
    la, lb = lse_a.float(), lse_b.float()
    top = torch.maximum(la, lb)
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # both empty: 0, not nan
    wa, wb = torch.exp(la - shift), torch.exp(lb - shift)  # [..., T]
    total = wa + wb
    lse = shift + torch.log(total)
    safe = torch.where(total > 0, total, torch.ones_like(total))
    oa, ob = out_a.float(), out_b.float()
    # an empty partial's output may be NaN (softmax over nothing) and 0 * NaN is NaN: zero it first
    if bool(torch.isneginf(la).any()):
        oa = torch.nan_to_num(oa, nan=0.0)
    if bool(torch.isneginf(lb).any()):
        ob = torch.nan_to_num(ob, nan=0.0)
    return oa * (wa / safe).unsqueeze(-1) + ob * (wb / safe).unsqueeze(-1), lse


def empty_partial(shape_out: Sequence[int], device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """The identity of the merge: out = 0, lse = -inf (attention over no key)."""
    out = torch.zeros(*shape_out, dtype=torch.float32, device=device)
    lse = torch.full(tuple(shape_out[:-1]), float("-inf"), dtype=torch.float32, device=device)
    return out, lse


def online_softmax_step(m: Tensor, l: Tensor, acc: Tensor, s: Tensor,  # noqa: E741
                        weighted_values: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """One chunk of keys folded into the running (max ``m``, normaliser ``l``, unnormalised output ``acc``): the same
    identity as ``merge_pair`` with the running state kept unnormalised (out = acc / l, lse = m + log l), so a
    chunk costs no division; the prefill and decode passes over compressed KV both use it.

    ``s`` [..., C] are the chunk's scores (masked keys -inf), ``weighted_values(p)`` the chunk's values
    weighted by ``p`` [..., C] ([..., D]). A row with no visible key yet keeps shift 0 (not -inf - -inf).
    """
    m_new = torch.maximum(m, s.amax(-1))
    shift = torch.where(torch.isinf(m_new), 0.0, m_new)  # rows with no visible key yet stay at 0
    p = torch.exp(s - shift[..., None])
    alpha = torch.exp(m - shift)
    return m_new, l * alpha + p.sum(-1), acc * alpha[..., None] + weighted_values(p)
