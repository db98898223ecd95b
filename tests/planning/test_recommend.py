"""tripath recommend: ranking, binding term, closest when impossible, cost scaling, robustness brackets."""

from __future__ import annotations

import json

import pytest

from tests.helpers import SEED as PROFILE
from tripath.planning.candidates import by_names
from tripath.planning.capacity import SearchSpec, sized_job
from tripath.planning.recommend import (
    binding_term,
    recommend,
    scaled_step_costs,
    scenario_qps,
    section_sources,
    threshold,
)
from tripath.planning.sweep import run_cached

QPS = 2.5


def small_scenario(ttft_ms: float = 4000.0, tpot_ms: float = 80.0) -> dict:
    """Short fixed-length requests that fit the seed profile's 8K-token KV budget (tests/planning/test_capacity)."""
    return {"name": "small", "workload": {"requests": 40, "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                                          "tasks": {"dialogue": 1.0},
                                          "prompt_tokens": {"kind": "fixed", "value": 1024},
                                          "output_tokens": {"kind": "fixed", "value": 64}},
            "cluster": {"gpus": 1}, "batching": {"max_batch_size": 8},
            "sla": {"ttft_p99_ms": ttft_ms, "tpot_p99_ms": tpot_ms}}


@pytest.fixture(scope="module")
def feasible():
    return recommend(small_scenario(), None, PROFILE, QPS, gpu_price=3.0, replications=1, max_replicas=8)


@pytest.mark.parametrize("flip", [1.003, 1.049, 1.237, 2.9])
def test_threshold_brackets_the_flip_of_a_monotone_predicate(flip):
    lo, hi = threshold(lambda f: f <= flip, tol=0.01)
    assert hi is not None and lo <= flip < hi and hi - lo <= 0.01


def test_threshold_says_none_when_even_the_largest_factor_meets():
    assert threshold(lambda f: True, max_factor=2.0) == (2.0, None)


def test_scaled_step_costs_multiplies_prefill_and_decode_only():
    scaled = scaled_step_costs(PROFILE, 1.5)
    for model in ("prefill", "decode"):
        old, new = PROFILE.costs[model], scaled.costs[model]
        for name, coef in old.coefficients.items():
            assert new.coefficients[name].value == pytest.approx(coef.value * 1.5)
    assert scaled.paging == PROFILE.paging
    with pytest.raises(ValueError):
        scaled_step_costs(PROFILE, 0.0)


def test_binding_term_is_the_smallest_margin():
    terms = {"ttft": {"margin": 0.4}, "tpot": {"margin": 0.05}, "e2e": {"margin": None}}
    assert binding_term(terms) == "tpot"


def test_recommended_is_the_fewest_gpus_meeting_the_sla(feasible):
    rows = [r for r in feasible.plan.rows if r.get("gpus") is not None]
    assert rows, "the small case must be feasible"
    best = feasible.to_dict()["recommended"]
    assert best["gpus"] == min(r["gpus"] for r in rows)
    assert best["cost_usd_per_hour"] == best["gpus"] * 3.0
    margins = {t: v["margin"] for t, v in best["terms"].items()}
    outcome = feasible.row(best["candidate"])["outcome"]
    for term, margin in margins.items():
        target = outcome["sla_targets_ms"][term]
        assert margin == pytest.approx((target - outcome["p99_ms"][term]["mean"]) / target)
    assert best["binding_term"] == min(margins, key=margins.get)
    assert feasible.closest is None
    if feasible.runner_up is not None:
        assert feasible.runner_up != feasible.recommended


def _meets(cost: float, rate: float, name: str, replicas: int) -> bool:
    profile = PROFILE if cost == 1.0 else scaled_step_costs(PROFILE, cost)
    candidate = by_names(PROFILE, [name])[0]
    spec = SearchSpec(json.dumps(small_scenario()), None, profile.to_json(), candidate, QPS * rate,
                      attainment_levels=())
    return run_cached(sized_job(spec, replicas, spec.qps)).meets_sla


def test_robustness_brackets_the_cost_and_rate_thresholds(feasible):
    robust = feasible.robustness
    assert robust is not None and robust["candidate"] == feasible.recommended
    n = robust["replicas"]
    for key, axis in (("step_costs", 0), ("arrival_rate", 1)):
        met, missed = robust[key]["meets_up_to"], robust[key]["misses_at"]
        assert missed is not None and 1.0 <= met < missed and missed - met <= robust["tolerance"]
        factors = [(met, 1.0), (missed, 1.0)] if axis == 0 else [(1.0, met), (1.0, missed)]
        assert _meets(*factors[0], feasible.recommended, n)
        assert not _meets(*factors[1], feasible.recommended, n)


def test_impossible_sla_gives_the_closest_candidate_and_by_how_much():
    rec = recommend(small_scenario(ttft_ms=1.0), None, PROFILE, QPS, replications=1, max_replicas=2)
    assert rec.recommended is None and rec.robustness is None
    ran = [r for r in rec.plan.rows if r.get("outcome") and not r["outcome"].get("error")]
    best_margin = max(r["outcome"]["sla_margin"] for r in ran)
    closest = rec.to_dict()["closest"]
    assert rec.row(closest["candidate"])["outcome"]["sla_margin"] == best_margin
    ttft = closest["terms"]["ttft"]
    assert ttft["over_by"] == pytest.approx((ttft["p99_ms"] - 1.0) / 1.0)
    assert closest["binding_term"] == "ttft"


def test_scenario_qps_and_sources():
    assert scenario_qps(small_scenario()) == 1.0
    assert scenario_qps({"workload": {"arrival": {"load_fraction": 0.5}}}) is None
    sources = section_sources(PROFILE)
    assert "seed" in sources["costs"] or "fitted" in sources["costs"]


def test_default_scenario_is_a_published_gpu_profile_mooncake_lengths_a_rate_and_an_sla():
    from tripath.planning.scenario_dict import load_scenario_dict
    from tripath.profile.profile import resolve_profile

    data, _ = load_scenario_dict("default")
    assert resolve_profile(data["profile"]).source == "published"
    assert scenario_qps(data) is not None and "load_fraction" not in data["workload"]["arrival"]
    assert {data["workload"][c]["trace"] for c in ("prompt_tokens", "output_tokens")} == {"mooncake-conversation"}
    assert data["sla"]["ttft_p99_ms"] > 0 and data["sla"]["tpot_p99_ms"] > 0
