"""The LSE merge: partials over disjoint key sets merge to attention over all keys (fp64 reference),
empty partials are ignored even when NaN, the order of partials does not matter, and the
shard layouts cover every position once with the causal work balanced as computed by hand."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tripath.engine.seqpar.sharding import Segment, ShardLayout, split_evenly
from tripath.engine.softmax_merge import empty_partial, merge_pair, merge_partials


def _attend64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [H, Tq, D], k/v [H, Tk, D] -> out, lse in fp64 (no mask)."""
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(s, -1)
    return torch.softmax(s, -1) @ v.double(), lse


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def test_merge_of_disjoint_key_sets_is_attention_over_all_keys() -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 7, 16, generator=g)
    k, v = torch.randn(3, 40, 16, generator=g) * 3, torch.randn(3, 40, 16, generator=g)
    cuts = [0, 5, 6, 23, 40]  # uneven pieces, one of a single key
    parts = [_attend64(q.float(), k[:, a:b], v[:, a:b]) for a, b in itertools.pairwise(cuts)]
    out, lse = merge_partials([p[0].float() for p in parts], [p[1].float() for p in parts])
    ref_out, ref_lse = _attend64(q, k, v)
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    assert _rel(out, ref_out) <= 1e-6 and _rel(lse, ref_lse) <= 1e-6


def test_hand_computed_two_key_merge() -> None:
    # keys with scores 0 and log 3 and values 1 and 5: softmax weights 1/4, 3/4 -> out 4, lse log 4
    one, five = torch.tensor([[1.0]]), torch.tensor([[5.0]])
    out, lse = merge_pair(one, torch.tensor([0.0]), five, torch.tensor([math.log(3)]))
    assert out.item() == pytest.approx(4.0, rel=1e-6) and lse.item() == pytest.approx(math.log(4), rel=1e-6)


def test_fully_masked_partial_gives_no_nan_and_is_ignored() -> None:
    out_a, lse_a = torch.randn(2, 5, 8), torch.randn(2, 5)
    masked_out = torch.full((2, 5, 8), float("nan"))  # what a naive softmax over no key returns
    masked_lse = torch.full((2, 5), float("-inf"))
    out, lse = merge_partials([masked_out, out_a], [masked_lse, lse_a])
    assert not torch.isnan(out).any() and torch.equal(out, out_a) and torch.equal(lse, lse_a)
    empty_out, empty_lse = empty_partial((2, 5, 8))
    out, lse = merge_partials([masked_out, empty_out], [masked_lse, empty_lse])  # a row that sees nothing
    assert torch.equal(out, torch.zeros(2, 5, 8)) and bool(torch.isneginf(lse).all())


def test_large_lse_does_not_overflow() -> None:
    # exp(1e4) overflows fp32; the max-shift keeps the weights in [0, 1]
    out, lse = merge_pair(torch.ones(1, 2), torch.tensor([1e4]), 3 * torch.ones(1, 2), torch.tensor([1e4]))
    assert torch.allclose(out, 2 * torch.ones(1, 2)) and lse.item() == pytest.approx(1e4 + math.log(2), rel=1e-7)


def test_merge_is_order_independent() -> None:
    g = torch.Generator().manual_seed(1)
    outs = [torch.randn(4, 9, 8, generator=g) for _ in range(5)]
    lses = [torch.randn(4, 9, generator=g) * 4 for _ in range(5)]
    lses[2][0, :3] = float("-inf")  # some rows of one partial are fully masked
    # two partials: bit-for-bit (IEEE addition commutes)
    ab = merge_pair(outs[0], lses[0], outs[1], lses[1])
    ba = merge_pair(outs[1], lses[1], outs[0], lses[0])
    assert torch.equal(ab[0], ba[0]) and torch.equal(ab[1], ba[1])
    # five: every permutation, and a left fold of pairwise merges (a ring's order), agree to fp32 rounding
    ref_out, ref_lse = merge_partials(outs, lses)
    for perm in itertools.islice(itertools.permutations(range(5)), 0, 120, 7):
        out, lse = merge_partials([outs[i] for i in perm], [lses[i] for i in perm])
        assert _rel(out, ref_out) <= 1e-6 and _rel(lse, ref_lse) <= 1e-6
    out, lse = outs[4], lses[4]
    for i in (3, 0, 2, 1):
        out, lse = merge_pair(out, lse, outs[i], lses[i])
    assert _rel(out, ref_out) <= 1e-6 and _rel(lse, ref_lse) <= 1e-6


def test_merge_rejects_mismatched_inputs() -> None:
    with pytest.raises(ValueError, match="outs/lses"):
        merge_partials([torch.zeros(1, 2)], [])


@pytest.mark.parametrize("kind", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world,length", [(1, 5), (2, 10), (3, 17), (4, 37), (4, 3)])
def test_layouts_cover_every_position_once(kind: str, world: int, length: int) -> None:
    layout = ShardLayout(kind, world, length)
    got = torch.cat([layout.positions(r) for r in range(world)])
    assert sorted(got.tolist()) == list(range(length))
    assert sum(layout.causal_pairs(r) for r in range(world)) == length * (length + 1) // 2
    for r in range(world):
        for pos in layout.positions(r).tolist():
            assert layout.owner(pos) == r


def test_zigzag_by_hand_and_its_balance() -> None:
    assert split_evenly(10, 4) == [3, 3, 2, 2]
    zig = ShardLayout("zigzag", 2, 10)
    assert zig.segments(0) == (Segment(0, 3), Segment(8, 10)) and zig.segments(1) == (Segment(3, 6), Segment(6, 8))
    assert [zig.causal_pairs(r) for r in (0, 1)] == [1 + 2 + 3 + 9 + 10, 4 + 5 + 6 + 7 + 8]
    contiguous = ShardLayout("contiguous", 2, 10)
    assert [contiguous.causal_pairs(r) for r in (0, 1)] == [15, 40]
    # at 16K tokens over 4 ranks: zigzag within 0.1% of even, contiguous 7x between first and last
    zig4, con4 = ShardLayout("zigzag", 4, 16384), ShardLayout("contiguous", 4, 16384)
    zig_work = [zig4.causal_pairs(r) for r in range(4)]
    con_work = [con4.causal_pairs(r) for r in range(4)]
    assert max(zig_work) / min(zig_work) < 1.001 and con_work[3] / con_work[0] == pytest.approx(7.0, rel=1e-3)


def test_explicit_uneven_sizes_and_validation() -> None:
    layout = ShardLayout("contiguous", 3, 9, sizes=(0, 7, 2))
    assert layout.segments(0) == () and layout.segments(1) == (Segment(0, 7),) and layout.shard_length(2) == 2
    with pytest.raises(ValueError, match="sizes"):
        ShardLayout("contiguous", 2, 9, sizes=(4, 4))
    with pytest.raises(ValueError, match="sizes"):
        ShardLayout("zigzag", 2, 8, sizes=(4, 4))
    with pytest.raises(ValueError, match="kind"):
        ShardLayout("striped", 2, 8)
    with pytest.raises(ValueError, match="world_size"):
        ShardLayout("zigzag", 0, 8)


@pytest.mark.parametrize("chunks", [1, 2, 3, 5])
def test_the_online_softmax_step_is_the_merge_with_the_running_state_unnormalised(chunks):
    """Folding key chunks one at a time (online_softmax_step) and merging each chunk's finished attention
    (merge_partials) are the same identity: equal within fp32 rounding, including a chunk with every key masked."""
    from tripath.engine.softmax_merge import online_softmax_step

    g = torch.Generator().manual_seed(chunks)
    q = torch.randn(2, 4, 8, generator=g)
    k, v = torch.randn(2, 20, 8, generator=g), torch.randn(2, 20, 8, generator=g)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)  # [2, 4, 20]
    scores[..., :4] = -math.inf  # the first chunk sees no key when chunks > 1 cut it there
    bounds = [round(i * 20 / chunks) for i in range(chunks + 1)] if chunks > 1 else [0, 20]
    m = torch.full(scores.shape[:-1], -math.inf)
    l = torch.zeros_like(m)  # noqa: E741
    acc = torch.zeros(2, 4, 8)
    outs, lses = [], []
    for lo, hi in itertools.pairwise(bounds):
        s, vv = scores[..., lo:hi], v[:, lo:hi]
        m, l, acc = online_softmax_step(m, l, acc, s, lambda p, vv=vv: p @ vv)  # noqa: E741
        lse = torch.logsumexp(s, dim=-1)
        outs.append(torch.nan_to_num(torch.softmax(s, dim=-1)) @ vv)
        lses.append(lse)
    out, lse = merge_partials(outs, lses)
    torch.testing.assert_close(acc / l[..., None], out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m + torch.log(l), lse, rtol=1e-5, atol=1e-6)
    full = torch.softmax(scores, dim=-1) @ v
    torch.testing.assert_close(out, full, rtol=1e-5, atol=1e-6)
