"""The planner's break-even report: the seed profile's stated break-even, v_eff at batch 1, per-task verdicts
and the seed claims (the bisection against closed forms: tests/core/test_speculative.py)."""

from __future__ import annotations

import pytest

from tests.helpers import SEED
from tripath.core.speculative import SpecCosts, breakeven_acceptance, expected_tokens
from tripath.planning.breakeven import breakeven, effective_verify_ratio


def test_seed_profile_k5_matches_its_stated_breakeven_and_solves_the_equation():
    c = SEED.speculative.cost_ratio.value
    a = breakeven_acceptance(5, SpecCosts(c, 1.0))
    # the seed profile's note: "break-even acceptance at K=5: 0.588"
    assert a == pytest.approx(0.588, abs=5e-4)
    assert (1 - a**6) / (1 - a) == pytest.approx(5 * c + 1.0, rel=1e-10)
    # the first seed document's reading: c about 0.3 gives a* about 0.62 at K = 5
    assert breakeven_acceptance(5, SpecCosts(0.3, 1.0)) == pytest.approx(0.6235, abs=5e-4)


def test_batch1_verify_ratio_is_the_profiles_v():
    assert effective_verify_ratio(SEED, 5, 1, 8192.0) == pytest.approx(SEED.verify_cost_ratio(5))


def test_report_per_task_verdicts_follow_the_formula():
    report = breakeven(SEED, ks=(5,), batches=(1,))
    tasks = report.tasks
    assert tasks["math"]["pays"] is False and tasks["dialogue"]["pays"] is True
    for task, row in tasks.items():
        a = SEED.acceptance[task].mean
        ratio = (5 * SEED.speculative.cost_ratio.value + 1.0) / expected_tokens(5, a)
        assert row["latency_ratio"] == pytest.approx(ratio)
        assert row["pays"] == (ratio < 1.0)
    claim60, claim50 = report.claims
    assert claim60["holds_for_profile"] is True and claim50["holds_for_profile"] is False
    d = report.to_dict()
    assert "not simulated" in d["numbers_from"]
