"""Per-rank partial attention: the private fused CPU kernel is pinned (LSE, GQA, fully masked rows),
every (query run, key run) relation matches an fp64 masked reference with the fused kernel and
with the public fallback, and a sequence cut into runs the way P ranks hold it (simulated
in-process here; over gloo in test_seqpar_dist.py) gives exactly single-device causal attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tripath.engine.seqpar.attention import (
    PhaseTimes,
    fused_kernel_available,
    local_causal_attention,
    relation,
    segment_attention,
)
from tripath.engine.seqpar.sharding import Segment, ShardLayout

FUSED = fused_kernel_available(torch.device("cpu"))


def causal_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor):
    """fp64 attention where query at q_pos sees keys with k_pos <= q_pos; q [B,Hq,Tq,D], k/v [B,Hkv,Tk,D]."""
    group = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    visible = k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, -1)
    probs = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0).unsqueeze(-1))
    return probs @ v, lse


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    finite = torch.isfinite(b)
    return float((a.double()[finite] - b[finite]).abs().max() / b[finite].abs().max())


def qkv(t_q: int, t_k: int, seed: int, hq: int = 4, hkv: int = 2, d: int = 16):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(1, hq, t_q, d, generator=g),
        torch.randn(1, hkv, t_k, d, generator=g) * 2,
        torch.randn(1, hkv, t_k, d, generator=g),
    )


@pytest.mark.skipif(not FUSED, reason="this torch has no aten._scaled_dot_product_flash_attention_for_cpu")
def test_fused_kernel_behaviour_is_pinned() -> None:
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    q, k, v = qkv(33, 33, seed=0)
    pos = torch.arange(33)
    for causal in (True, False):
        out, lse = op(q, k, v, 0.0, causal)  # GQA: 2 K/V heads for 4 query heads, passed as is
        ref_out, ref_lse = causal_reference(q, k, v, pos, pos if causal else torch.full((33,), -1))
        assert lse.shape == (1, 4, 33) and lse.dtype == torch.float32  # natural-log LSE per query row
        assert rel_err(out, ref_out) <= 1e-5 and rel_err(lse, ref_lse) <= 1e-5
        sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        assert torch.allclose(out, sdpa, atol=1e-6)
    # a row whose every key is masked: the kernel returns out 0 and lse 0 (not -inf): we must fix it
    bias = torch.zeros(4, 4).masked_fill(torch.tensor([[False] * 4, [True, False, False, False]] * 2), -math.inf)
    bias[0] = -math.inf
    out, lse = op(q[:, :, :4], k[:, :, :4], v[:, :, :4], 0.0, False, attn_mask=bias)
    assert torch.equal(out[:, :, 0], torch.zeros(1, 4, 16)) and torch.equal(lse[:, :, 0], torch.zeros(1, 4))


def test_relations_by_hand() -> None:
    assert relation(Segment(5, 10), Segment(0, 6)) == "full"  # key 5 is visible to query 5
    assert relation(Segment(5, 10), Segment(0, 7)) == "partial"
    assert relation(Segment(5, 10), Segment(5, 10)) == "diagonal"
    assert relation(Segment(0, 5), Segment(5, 10)) == "none"
    assert relation(Segment(0, 5), Segment(4, 10)) == "partial"


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize(
    "q_seg,k_seg", [((20, 31), (0, 21)), ((20, 31), (20, 31)), ((20, 31), (15, 27)), ((0, 8), (4, 12))]
)
def test_segment_attention_matches_reference(fused: bool, q_seg: tuple, k_seg: tuple) -> None:
    qs, ks = Segment(*q_seg), Segment(*k_seg)
    q, k, v = qkv(qs.length, ks.length, seed=qs.start + ks.end)
    out, lse = segment_attention(q, qs, k, v, ks, fused)
    ref_out, ref_lse = causal_reference(q, k, v, torch.arange(qs.start, qs.end), torch.arange(ks.start, ks.end))
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    # rows that see no key (query 0..3 vs keys 4..11) are empty partials: out 0, lse -inf
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    assert rel_err(out, ref_out) <= 1e-5 and rel_err(lse, ref_lse) <= 1e-5
    assert segment_attention(q, Segment(0, 4), k, v, Segment(4, 4 + ks.length), fused) is None


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize(
    "layout",
    [
        ShardLayout("contiguous", 1, 45),
        ShardLayout("zigzag", 2, 45),
        ShardLayout("zigzag", 4, 45),
        ShardLayout("contiguous", 4, 45, sizes=(0, 19, 3, 23)),  # uneven, one rank empty
    ],
    ids=lambda layout: f"{layout.kind}-P{layout.world_size}",
)
def test_ranks_simulated_in_process_equal_single_device(fused: bool, layout: ShardLayout) -> None:
    q, k, v = qkv(45, 45, seed=7)
    pos = torch.arange(45)
    ref_out, ref_lse = causal_reference(q, k, v, pos, pos)
    segments = [layout.segments(r) for r in range(layout.world_size)]
    shards = [(torch.stack((k, v))[:, :, :, layout.positions(r)], segments[r]) for r in range(layout.world_size)]
    for rank in range(layout.world_size):
        mine = layout.positions(rank)
        times = PhaseTimes()
        out, lse = local_causal_attention(q[:, :, mine].contiguous(), segments[rank], shards, fused, times)
        assert out.shape == (1, 4, mine.numel(), 16) and lse.shape == (1, 4, mine.numel())
        if mine.numel():
            assert rel_err(out, ref_out[:, :, mine]) <= 1e-5 and rel_err(lse, ref_lse[:, :, mine]) <= 1e-5
        assert (times.attention_s > 0.0) == bool(mine.numel()) and times.comm_s == 0.0
