"""Speculative decoding physics: tokens per round against the formula, caps, round cost, adaptive K."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tests.helpers import SEED, TINY
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.speculative import SpeculativeParams, SpeculativePhysics, acceptance_table
from tripath.simulator.paths.step import PathStep
from tripath.simulator.scenario.strategy import SpeculativeSpec, StrategySpec
from tripath.simulator.step_model import Decode, DecodeBatch

# SEED: i.i.d. acceptance per task, K = 5, c = 0.265, v = 1
# TINY: measured per-position acceptance at K = 4


def _mean_tokens(physics: SpeculativePhysics, task: int, n: int) -> tuple[float, float]:
    decodes = DecodeBatch.of([Decode(i, task, 100, 1000) for i in range(n)])
    ks = physics.choose(decodes)
    emitted = physics.draw(decodes, ks) + 1
    return float(emitted.mean()), float(emitted.std(ddof=1) / math.sqrt(n))


@pytest.mark.parametrize("task", ["dialogue", "math", "code", "summarization"])
def test_mean_tokens_per_round_equals_formula_iid(task):
    tasks = list(SEED.acceptance)
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(), SEED, tasks),
                                 np.random.default_rng(7))
    a, k = SEED.acceptance[task].mean, 5
    expected = (1 - a ** (k + 1)) / (1 - a)
    mean, se = _mean_tokens(physics, tasks.index(task), 40_000)
    assert abs(mean - expected) < 4 * se, (mean, expected, se)


def test_mean_tokens_per_round_per_position():
    tasks = ["math"]
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(), TINY, tasks),
                                 np.random.default_rng(3))
    p = TINY.acceptance["math"].per_position
    # E = 1 + sum_j prod_{i <= j} p_i: token j+1 is emitted iff drafts 1..j were all accepted
    expected = 1 + sum(math.prod(p[: j + 1]) for j in range(len(p)))
    mean, se = _mean_tokens(physics, 0, 40_000)
    assert abs(mean - expected) < 4 * se, (mean, expected, se)


def test_positions_beyond_measured_k_use_the_mean():
    code = TINY.acceptance["code"]
    k = max([code.k, *code.by_k]) + 2  # beyond every K the profile measured
    table = acceptance_table(SpeculativeParams.from_profile(SpeculativeSpec(k=k), TINY, ["code"]), k, drop=0.0)
    entry = TINY.acceptance_for("code", k)  # the nearest K the profile measured
    measured = len(entry.per_position)
    assert measured < k  # else this test checks nothing
    assert table[0, :measured].tolist() == list(entry.per_position)
    assert table[0, measured:].tolist() == [entry.mean] * (k - measured)


def test_acceptance_drop_lowers_every_position_and_clips_at_zero():
    base = acceptance_table(SpeculativeParams.from_profile(SpeculativeSpec(k=5), SEED, ["dialogue"]), 5, drop=0.0)
    dropped = acceptance_table(SpeculativeParams.from_profile(SpeculativeSpec(k=5), SEED, ["dialogue"]), 5, drop=0.1)
    assert np.allclose(dropped, base - 0.1)
    assert (acceptance_table(SpeculativeParams.from_profile(SpeculativeSpec(k=5), SEED, ["math"]), 5,
                             drop=0.9) == 0).all()


def test_k_capped_by_remaining_tokens():
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(k=5), SEED, ["dialogue"]),
                                 np.random.default_rng(0))
    decodes = DecodeBatch.of([Decode(0, 0, 10, 1), Decode(1, 0, 10, 3), Decode(2, 0, 10, 50)])
    ks = physics.choose(decodes)
    assert ks.tolist() == [0, 2, 5]
    for _ in range(200):
        emitted = physics.draw(decodes, ks) + 1
        assert (emitted >= 1).all() and (emitted <= [1, 3, 6]).all()


def test_round_cost_is_k_c_plus_v_times_decode_step():
    step = PathStep(RunCosts.from_profile(SEED, StrategySpec(speculative=SpeculativeSpec(k=3)), ["code"],
                                          SEED.kv_capacity_bytes), np.random.default_rng(0))
    decodes = [Decode(0, 0, 4000, 100), Decode(1, 0, 6000, 100)]
    result = step.step([], decodes, 10_000)
    c = 0.265262  # the seed profile's speculative.cost_ratio, v = 1.0
    d = 2.15916 + 0.884316 * 2 + 0.00964886 * 10_000  # decode_v1 at B = 2, S = 10,000 (seed coefficients)
    assert result.seconds == pytest.approx((3 * c + 1.0) * d / 1000, rel=1e-9)
    assert result.rounds.tolist() == [1, 1]
    assert (result.emitted == result.accepted + 1).all()


def test_prompt_lookup_needs_its_acceptance_and_costs_no_draft():
    with pytest.raises(ValueError, match=r"strategy\.speculative\.proposer.*prompt_lookup:code"):
        PathStep(RunCosts.from_profile(SEED, StrategySpec(speculative=SpeculativeSpec(proposer="prompt_lookup")),
                                       ["code"], SEED.kv_capacity_bytes), np.random.default_rng(0))
    lookup = dataclasses.replace(SEED.acceptance["code"], mean=0.5, note="test entry")
    profile = dataclasses.replace(SEED, acceptance={**SEED.acceptance, "prompt_lookup:code": lookup})
    params = SpeculativeParams.from_profile(SpeculativeSpec(proposer="prompt_lookup"), profile, ["code"])
    physics = SpeculativePhysics(params, np.random.default_rng(1))
    assert physics.c == 0.0 and physics.round_factor(5) == 1.0  # v = 1: only the verify pass
    assert physics.probs[0].tolist() == [0.5] * 5


def test_same_seed_same_draws():
    def run(seed):
        params = SpeculativeParams.from_profile(SpeculativeSpec(adaptive=True), TINY, ["code", "math"])
        physics = SpeculativePhysics(params, np.random.default_rng(seed))
        out = []
        for r in range(50):
            decodes = DecodeBatch.of([Decode(i, i % 2, 100 + r, 500) for i in range(4)])
            ks = physics.choose(decodes)
            acc = physics.draw(decodes, ks)
            physics.observe(decodes, ks, acc)
            out.append((ks.tolist(), acc.tolist()))
        return out

    assert run(11) == run(11)
    assert run(11) != run(12)


def _adaptive_ks(spec, profile, task, rounds=300):
    physics = SpeculativePhysics(SpeculativeParams.from_profile(spec, profile, [task]), np.random.default_rng(5))
    ks = []
    for _ in range(rounds):
        decodes = DecodeBatch.of([Decode(0, 0, 100, 10_000)])
        k = physics.choose(decodes)
        physics.observe(decodes, k, physics.draw(decodes, k))
        ks.append(int(k[0]))
    return ks


def test_adaptive_falls_back_below_fallback_acceptance():
    # dialogue a = 0.75: above the seed's break-even (0.588 at K = 5), so it keeps speculating ...
    ks = _adaptive_ks(SpeculativeSpec(adaptive=True), SEED, "dialogue")
    assert sum(k > 0 for k in ks[50:]) == len(ks[50:])
    # ... but a fallback threshold of 0.9 sends it to plain decoding, apart from the controller's probes
    ks = _adaptive_ks(SpeculativeSpec(adaptive=True, fallback_acceptance=0.9), SEED, "dialogue")
    late = ks[100:]
    assert sum(k == 0 for k in late) > 0.8 * len(late)
    assert set(late) <= {0, 2}  # 2 = ControllerConfig.probe_k


def test_adaptive_picks_shorter_k_where_acceptance_is_lower():
    # math a = 0.55 is below K = 5's break-even (0.588) but K = 1 still pays (E / (c + 1) = 1.23): the
    # controller's argmax over K keeps speculating, with shorter proposals than dialogue's (a = 0.75,
    # best K = 3 at the seed's c)
    math_ks = _adaptive_ks(SpeculativeSpec(adaptive=True), SEED, "math", rounds=400)[200:]
    dialogue_ks = _adaptive_ks(SpeculativeSpec(adaptive=True), SEED, "dialogue", rounds=400)[200:]
    assert 0 not in math_ks
    assert np.mean(math_ks) < np.mean(dialogue_ks)


def test_accepted_tokens_follow_the_per_position_law():
    """P(accepted = j) = p_1..p_j (1 - p_{j+1}) for j < K and p_1..p_K for j = K, each within 4 SE."""
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(), TINY, ["summarization"]),
                                 np.random.default_rng(9))
    p = TINY.acceptance["summarization"].per_position
    n = 50_000
    decodes = DecodeBatch.of([Decode(i, 0, 100, 1000) for i in range(n)])
    accepted = physics.draw(decodes, physics.choose(decodes))
    for j in range(len(p) + 1):
        law = math.prod(p[:j]) * (1 - p[j] if j < len(p) else 1.0)
        share = float((accepted == j).mean())
        assert abs(share - law) < 4 * math.sqrt(law * (1 - law) / n), (j, share, law)


def test_round_cost_reads_the_profiles_per_k_verify_cost():
    from tripath.profile.cost_model import Coefficient

    measured = {2: Coefficient(1.2, "target steps", "measured"), 5: Coefficient(1.8, "target steps", "measured")}
    profile = dataclasses.replace(SEED, speculative=dataclasses.replace(SEED.speculative, verify_by_k=measured))
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(k=5), profile, ["code"]),
                                 np.random.default_rng(0))
    c = SEED.speculative.cost_ratio.value
    assert physics.round_factor(5) == pytest.approx(5 * c + 1.8)
    assert physics.round_factor(2) == pytest.approx(2 * c + 1.2)
    assert physics.round_factor(3) == pytest.approx(3 * c + 1.4)  # linear between the measured Ks
    assert physics.round_factor(1) == pytest.approx(c + 1.1)  # from v(0) = 1 up to the smallest measured K
    assert physics.round_factor(0) == 1.0
