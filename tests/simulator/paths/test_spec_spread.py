"""Per-request acceptance (tripath/simulator/paths/acceptance_spread.py): the Beta's moments, the law of tokens per
round
it implies, determinism, and the profile without the field behaving exactly as before."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from tests.helpers import SEED
from tests.helpers import TINY as SHIPPED
from tripath.simulator.paths.acceptance_spread import AcceptanceSpread, beta_parameters
from tripath.simulator.paths.speculative import SpeculativeParams, SpeculativePhysics
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import load_scenario
from tripath.simulator.scenario.strategy import SpeculativeSpec
from tripath.simulator.step_model import Decode, DecodeBatch

# SEED: i.i.d. acceptance per task (no per-position), K = 5
# SHIPPED: per-position acceptance at K = 1, 2, 4, 6


def without_spread(profile):
    """The profile as calibrated before the spread was measured: no between_prompt_sd anywhere."""
    def entry(e):
        by_k = {k: dataclasses.replace(v, between_prompt_sd=None, n_prompts=None) for k, v in e.by_k.items()}
        return dataclasses.replace(e, between_prompt_sd=None, n_prompts=None, by_k=by_k)
    return dataclasses.replace(profile, acceptance={t: entry(e) for t, e in profile.acceptance.items()})


TINY = without_spread(SHIPPED)  # each test adds the spread it needs


def with_spread(profile, sd: float, tasks=None):
    """The profile with every (or the named) task's acceptance entries, at every K, given this spread."""
    def entry(e):
        by_k = {k: dataclasses.replace(v, between_prompt_sd=sd, n_prompts=12) for k, v in e.by_k.items()}
        return dataclasses.replace(e, between_prompt_sd=sd, n_prompts=12, by_k=by_k)
    acceptance = {t: entry(e) if tasks is None or t in tasks else e for t, e in profile.acceptance.items()}
    return dataclasses.replace(profile, acceptance=acceptance)


def test_beta_parameters_are_the_moment_match():
    alpha, beta = beta_parameters(0.8, 0.1)
    # hand: nu = 0.8 * 0.2 / 0.01 - 1 = 15, alpha = 12, beta = 3
    assert (alpha, beta) == pytest.approx((12.0, 3.0))
    assert stats.beta(alpha, beta).mean() == pytest.approx(0.8)
    assert stats.beta(alpha, beta).std() == pytest.approx(0.1)
    with pytest.raises(ValueError, match="sd"):
        beta_parameters(0.8, 0.4)  # sqrt(0.16) = 0.4: the widest law, which no Beta reaches


def test_per_request_draws_have_the_beta_moments():
    m, sd, n = 0.87, 0.11, 20_000
    spread = AcceptanceSpread(np.array([m]), np.array([sd]), np.full((1, 4), m), 0.0, np.random.SeedSequence(11))
    a = np.array([spread.acceptance(r, 0) for r in range(n)])
    assert abs(a.mean() - m) < 4 * sd / math.sqrt(n)
    # sd of the sample variance: sqrt((mu4 - sigma^4) / n), with the Beta's own 4th central moment
    law = stats.beta(*beta_parameters(m, sd))
    mu4 = law.expect(lambda x: (x - m) ** 4)
    assert abs(a.var(ddof=1) - sd**2) < 4 * math.sqrt((mu4 - sd**4) / n)
    assert stats.kstest(a, law.cdf).pvalue > 1e-3  # the whole law, not only two moments
    assert a.min() >= 0.0 and a.max() <= 1.0


def test_a_request_keeps_its_draw_whatever_the_order():
    make = lambda: AcceptanceSpread(np.array([0.7]), np.array([0.15]), np.full((1, 3), 0.7), 0.0,  # noqa: E731
                                    np.random.SeedSequence(5))
    forward = [make().acceptance(r, 0) for r in range(50)]
    spread = make()
    backward = [spread.acceptance(r, 0) for r in reversed(range(50))][::-1]
    assert forward == backward
    other = AcceptanceSpread(np.array([0.7]), np.array([0.15]), np.full((1, 3), 0.7), 0.0, np.random.SeedSequence(6))
    assert [other.acceptance(r, 0) for r in range(50)] != forward


def test_per_position_rows_scale_to_the_request_acceptance():
    probs = np.array([[0.8, 0.9, 1.0, 0.7]])
    spread = AcceptanceSpread(np.array([0.8]), np.array([0.1]), probs, 0.0, np.random.SeedSequence(2))
    for r in range(20):
        a_r = spread.acceptance(r, 0)
        row = spread.row(r, 0)
        power = math.log(a_r) / math.log(0.8)
        assert row.tolist() == pytest.approx((probs[0] ** power).tolist())
        assert row[0] == pytest.approx(a_r)  # the position whose p equals the mean gets a_r exactly
        assert row[2] == 1.0  # a measured certainty stays certain
        assert np.all((row >= 0) & (row <= 1))
    dropped = AcceptanceSpread(np.array([0.8]), np.array([0.1]), probs, 0.05, np.random.SeedSequence(2))
    assert dropped.row(3, 0).tolist() == pytest.approx(np.clip(spread.row(3, 0) - 0.05, 0, 1).tolist())


def test_mean_tokens_per_round_is_the_beta_average_of_the_formula():
    """i.i.d. a per request: E[tokens] = sum_{j=0..K} E[a^j], E[a^j] = prod_{i<j} (alpha + i) / (alpha + beta + i)."""
    sd, k, n = 0.15, 5, 40_000
    profile = with_spread(SEED, sd)
    tasks = ["code"]
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(k=k), profile, tasks),
                                 np.random.default_rng(9))
    assert physics.spread is not None
    alpha, beta = beta_parameters(SEED.acceptance["code"].mean, sd)
    expected = sum(math.prod((alpha + i) / (alpha + beta + i) for i in range(j)) for j in range(k + 1))
    decodes = DecodeBatch.of([Decode(r, 0, 100, 1000) for r in range(n)])  # n requests, one round each
    emitted = physics.draw(decodes, physics.choose(decodes)) + 1
    se = emitted.std(ddof=1) / math.sqrt(n)
    assert abs(emitted.mean() - expected) < 4 * se, (emitted.mean(), expected, se)
    a = SEED.acceptance["code"].mean
    assert expected > (1 - a ** (k + 1)) / (1 - a)  # Jensen: E(K, a) = sum_j a^j is convex in a


def test_same_seed_same_draws_and_the_replica_stream_is_the_one_used():
    profile = with_spread(TINY, 0.1)
    decodes = DecodeBatch.of([Decode(r, 0, 100, 1000) for r in range(64)])

    def rounds(seed: int) -> list[list[int]]:
        physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(k=4), profile, ["code"]),
                                     np.random.default_rng(seed))
        return [physics.draw(decodes, physics.choose(decodes)).tolist() for _ in range(5)]

    assert rounds(3) == rounds(3)
    assert rounds(3) != rounds(4)


def test_without_the_field_the_draws_are_todays_inversion():
    """No between_prompt_sd: one uniform per sequence from the replica's stream, accepted = #{j : u < C_j}."""
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(k=4), TINY, ["code", "math"]),
                                 np.random.default_rng(21))
    assert physics.spread is None
    decodes = DecodeBatch.of([Decode(r, r % 2, 100, 1000) for r in range(200)])
    got = physics.draw(decodes, physics.choose(decodes))
    u = np.random.default_rng(21).random(200)
    survival = np.stack([np.cumprod(TINY.acceptance_for(t, 4).per_position) for t in ("code", "math")])
    assert got.tolist() == (u[:, None] < survival[np.arange(200) % 2]).sum(axis=1).tolist()
    zero = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(k=4), with_spread(TINY, 0.0), ["code"]),
                              np.random.default_rng(0))
    assert zero.spread is None  # a measured spread of 0 is the same law


@pytest.fixture(scope="module")
def scenario():
    return load_scenario("data/scenarios/validation/speculative-code.toml")


def test_simulated_records_absent_field_identical_and_spread_widens_tpot(scenario):
    plain = simulate(scenario, TINY, seed=0).runs[0].records
    assert simulate(scenario, with_spread(TINY, 0.0), seed=0).runs[0].records == plain  # sd 0 = the field absent
    spread = simulate(scenario, with_spread(TINY, 0.11), seed=0).runs[0].records
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in spread] == \
        [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in plain]  # the workload's stream untouched
    assert simulate(scenario, with_spread(TINY, 0.11), seed=0).runs[0].records == spread

    def per_request_acceptance(records):
        return np.array([r.accepted_tokens / (r.draft_rounds * 4) for r in records if r.draft_rounds >= 5])

    assert per_request_acceptance(spread).std() > 1.5 * per_request_acceptance(plain).std()


def test_expected_survival_is_the_mean_of_the_per_request_draws():
    """The saturation estimate's tokens per round (path_capacity) = the mean of what the simulator draws."""
    from tripath.simulator.paths.speculative import expected_survival

    k, n = 4, 40_000
    profile = with_spread(TINY, 0.11, tasks={"code"})
    expected = 1 + expected_survival(SpeculativeParams.from_profile(SpeculativeSpec(k=k), profile, ["code"]), k,
                                     0.0)[0].sum()
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(k=k), profile, ["code"]),
                                 np.random.default_rng(4))
    decodes = DecodeBatch.of([Decode(r, 0, 100, 1000) for r in range(n)])
    emitted = physics.draw(decodes, physics.choose(decodes)) + 1
    assert abs(emitted.mean() - expected) < 4 * emitted.std(ddof=1) / math.sqrt(n)
    # without a spread: the cumprod of the task's table, bit for bit (the estimate as before)
    plain = expected_survival(SpeculativeParams.from_profile(SpeculativeSpec(k=k), TINY, ["code", "math"]), k, 0.05)
    table = np.clip(np.array([TINY.acceptance_for(t, k).per_position for t in ("code", "math")]) - 0.05, 0, 1)
    assert plain.tolist() == np.cumprod(table, axis=1).tolist()
