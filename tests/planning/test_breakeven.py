"""Break-even acceptance of speculative decoding against hand-computed values (batch 1)."""

from __future__ import annotations

import math

import pytest

from tests.helpers import SEED
from tripath.planning.breakeven import breakeven, breakeven_acceptance, effective_verify_ratio
from tripath.profile.formulas import expected_tokens_per_round


@pytest.mark.parametrize("c, v", [(0.3, 1.0), (0.5, 1.0), (0.2, 1.3)])
def test_k1_is_c_plus_v_minus_one(c, v):
    # K = 1: E = 1 + a, so 1 + a* = c + v
    assert breakeven_acceptance(1, c, v) == pytest.approx(c + v - 1.0, abs=1e-10)


@pytest.mark.parametrize("c, v", [(0.3, 1.0), (0.25, 1.1), (0.4, 1.0)])
def test_k2_solves_the_quadratic(c, v):
    # K = 2: 1 + a + a^2 = 2c + v  ->  a* = (-1 + sqrt(1 - 4 (1 - 2c - v))) / 2
    expected = (-1.0 + math.sqrt(1.0 - 4.0 * (1.0 - 2.0 * c - v))) / 2.0
    assert breakeven_acceptance(2, c, v) == pytest.approx(expected, abs=1e-10)


def test_seed_profile_k5_matches_its_stated_breakeven_and_solves_the_equation():
    c = SEED.speculative.cost_ratio.value
    a = breakeven_acceptance(5, c, 1.0)
    # the seed profile's note: "break-even acceptance at K=5: 0.588"
    assert a == pytest.approx(0.588, abs=5e-4)
    assert (1 - a**6) / (1 - a) == pytest.approx(5 * c + 1.0, rel=1e-10)
    # the first seed document's reading: c about 0.3 gives a* about 0.62 at K = 5
    assert breakeven_acceptance(5, 0.3, 1.0) == pytest.approx(0.6235, abs=5e-4)


def test_boundaries_always_and_never():
    assert breakeven_acceptance(4, 0.0, 0.9) == 0.0  # a round costs less than one step: pays even at a = 0
    assert breakeven_acceptance(3, 1.0, 1.0) is None  # K c + v = K + 1: can never pay
    with pytest.raises(ValueError):
        breakeven_acceptance(0, 0.3, 1.0)


def test_batch1_verify_ratio_is_the_profiles_v():
    assert effective_verify_ratio(SEED, 5, 1, 8192.0) == pytest.approx(SEED.verify_cost_ratio(5))


def test_report_per_task_verdicts_follow_the_formula():
    report = breakeven(SEED, ks=(5,), batches=(1,))
    tasks = report.tasks
    assert tasks["math"]["pays"] is False and tasks["dialogue"]["pays"] is True
    for task, row in tasks.items():
        a = SEED.acceptance[task].mean
        ratio = (5 * SEED.speculative.cost_ratio.value + 1.0) / expected_tokens_per_round(a, 5)
        assert row["latency_ratio"] == pytest.approx(ratio)
        assert row["pays"] == (ratio < 1.0)
    claim60, claim50 = report.claims
    assert claim60["holds_for_profile"] is True and claim50["holds_for_profile"] is False
    d = report.to_dict()
    assert "not simulated" in d["numbers_from"]
