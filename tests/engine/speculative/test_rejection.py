"""Modified rejection sampling is lossless: whatever the draft distribution q, the emitted tokens
follow the target p (chi-square, n = 200,000 rounds per case, significance 0.001), including
adversarial q; greedy verification matches hand-computed rounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from tripath.engine.sampling import SamplingParams
from tripath.engine.speculative.rejection import greedy_verify, rejection_sample, sampling_probs

N = 200_000
ALPHA = 1e-3
V = 6
K = 2


def _rand_dist(g: torch.Generator, zero: list[int] | None = None) -> torch.Tensor:
    x = -torch.rand(V, generator=g, dtype=torch.float64).log()  # Exp(1) -> normalised = Dirichlet(1)
    if zero:
        x[zero] = 0.0
    return (x / x.sum()).float()


def _one_hot(i: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(i), V).float()


def _cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """name -> (p [K+1, V], q [K, V]); every position gets its own pair."""
    g = torch.Generator().manual_seed(11)
    cases = {}
    cases["random"] = (
        torch.stack([_rand_dist(g) for _ in range(K + 1)]),
        torch.stack([_rand_dist(g) for _ in range(K)]),
    )
    p = torch.stack([_rand_dist(g) for _ in range(K + 1)])
    cases["p_equals_q"] = (p, p[:K].clone())
    cases["disjoint_supports"] = (
        torch.stack([_rand_dist(g, zero=[3, 4, 5]) for _ in range(K + 1)]),
        torch.stack([_rand_dist(g, zero=[0, 1, 2]) for _ in range(K)]),
    )
    cases["one_hot_p"] = (
        torch.stack([_one_hot(2), _one_hot(4), _one_hot(0)]),
        torch.stack([_rand_dist(g) for _ in range(K)]),
    )
    cases["q_zero_where_p_not"] = (
        torch.stack([_rand_dist(g) for _ in range(K + 1)]),
        torch.stack([_rand_dist(g, zero=[0, 1, 5]), _rand_dist(g, zero=[2, 3])]),
    )
    cases["one_hot_q"] = (torch.stack([_rand_dist(g) for _ in range(K + 1)]), torch.stack([_one_hot(1), _one_hot(5)]))
    return cases


def _run(p: torch.Tensor, q: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    draft = torch.stack([torch.multinomial(q[i], N, replacement=True, generator=g) for i in range(K)], dim=1)  # [N, K]
    num_draft = torch.full((N,), K, dtype=torch.int64)
    return rejection_sample(draft, num_draft, q.expand(N, K, V), p.expand(N, K + 1, V), g)


def _assert_follows(tokens: torch.Tensor, p: torch.Tensor) -> None:
    counts = np.bincount(tokens.numpy(), minlength=V)
    support = p.numpy() > 0
    assert counts[~support].sum() == 0, "emitted a token the target gives probability 0"
    if support.sum() == 1:
        return  # every draw is the one token: nothing left to test
    pp = p.double().numpy()[support]
    expected = pp / pp.sum() * counts.sum()
    assert chisquare(counts[support], expected).pvalue > ALPHA


@pytest.mark.parametrize("case", list(_cases()))
def test_emitted_tokens_follow_the_target_at_every_position(case: str) -> None:
    p, q = _cases()[case]
    n_acc, emitted = _run(p, q, seed=list(_cases()).index(case))
    assert emitted.shape == (N, K + 1)
    assert torch.equal((emitted >= 0).sum(1), n_acc + 1)  # accepted drafts + exactly one target token
    # position 0 is always emitted; position i is emitted iff i-1 drafts were accepted, and given
    # that (an event of the earlier positions only) it must follow p_i: the bonus at i = K too
    for i in range(K + 1):
        reached = n_acc >= i
        if i and float(torch.minimum(p[i - 1], q[i - 1]).sum()) == 0.0:
            assert not reached.any()  # disjoint supports: a draft token is never accepted
            continue
        assert reached.sum() > N // 100
        _assert_follows(emitted[reached, i], p[i])


def test_the_chi_square_check_has_power_against_a_lossy_sampler() -> None:
    p, q = _cases()["random"]
    g = torch.Generator().manual_seed(3)
    draft_only = torch.multinomial(q[0], N, replacement=True, generator=g)  # accept every draft: follows q
    counts = np.bincount(draft_only.numpy(), minlength=V)
    pp = p[0].double().numpy()
    assert chisquare(counts, pp / pp.sum() * N).pvalue < ALPHA


def test_acceptance_probability_is_the_overlap_of_p_and_q() -> None:
    # P(accept x ~ q) = sum_x min(p(x), q(x)) (Leviathan et al. 2023, section 3.1)
    p, q = _cases()["random"]
    n_acc, _ = _run(p, q, seed=5)
    overlap = float(torch.minimum(p[0], q[0]).sum())
    rate = float((n_acc >= 1).double().mean())
    assert abs(rate - overlap) < 4 * (overlap * (1 - overlap) / N) ** 0.5


def test_fewer_drafts_per_row_take_the_bonus_from_the_target_at_that_slot() -> None:
    p = torch.stack([_one_hot(1), _one_hot(2), _one_hot(3)])
    q = torch.stack([_one_hot(1), _one_hot(2)])
    draft = torch.tensor([[1, 2], [1, 0], [4, 0]])
    n_acc, emitted = rejection_sample(draft, torch.tensor([2, 1, 1]), q.expand(3, K, V), p.expand(3, K + 1, V), None)
    assert n_acc.tolist() == [2, 1, 0]
    assert emitted.tolist() == [[1, 2, 3], [1, 2, -1], [1, -1, -1]]


def test_greedy_verify_hand_computed_rounds() -> None:
    logits = torch.full((3, 4, 5), -1.0)
    best = torch.tensor([[3, 1, 4, 2], [0, 0, 0, 0], [2, 2, 2, 2]])
    logits.scatter_(2, best.unsqueeze(2), 5.0)
    draft = torch.tensor([[3, 1, 4], [1, 0, 0], [2, 2, 0]])
    n, out = greedy_verify(draft, torch.tensor([3, 3, 2]), logits)
    assert n.tolist() == [3, 0, 2]  # full accept; zero accept; full accept of a shorter proposal
    assert out.tolist() == [[3, 1, 4, 2], [0, -1, -1, -1], [2, 2, 2, -1]]


def test_sampling_probs_matches_the_plain_sampler_and_is_one_hot_for_greedy() -> None:
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    probs = sampling_probs(logits, [SamplingParams(), SamplingParams(temperature=0.5)])
    assert torch.equal(probs[0], torch.nn.functional.one_hot(logits[0].argmax(-1), 7).float())
    assert torch.allclose(probs[1], torch.softmax(logits[1] / 0.5, -1))
