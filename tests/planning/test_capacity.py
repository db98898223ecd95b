"""Capacity planning: the replica search equals a brute-force scan; goodput falls as the SLA tightens."""

from __future__ import annotations

import json

import pytest

from tests.helpers import SEED as PROFILE
from tripath.planning.candidates import BASELINE
from tripath.planning.capacity import (
    PlanRow,
    SearchSpec,
    goodput_curve,
    plan,
    search_rate,
    search_replicas,
    sized_job,
)
from tripath.planning.sweep import run_cached


def small_scenario(ttft_ms: float = 4000.0, tpot_ms: float = 80.0) -> dict:
    """Short fixed-length requests that fit the seed profile's 8K-token KV budget."""
    return {"name": "small", "workload": {"requests": 80, "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                                          "tasks": {"dialogue": 1.0},
                                          "prompt_tokens": {"kind": "fixed", "value": 1024},
                                          "output_tokens": {"kind": "fixed", "value": 64}},
            "cluster": {"gpus": 1}, "batching": {"max_batch_size": 8},
            "sla": {"ttft_p99_ms": ttft_ms, "tpot_p99_ms": tpot_ms}}


@pytest.mark.parametrize("threshold", [1, 2, 3, 5, 8, 13, 31, 64])
def test_search_replicas_finds_the_threshold_of_a_monotone_predicate(threshold):
    found, trace = search_replicas(lambda n: n >= threshold, 64)
    assert found == threshold
    assert len(trace) <= 2 * 7 + 1  # O(log n): at most doubling steps plus bisection steps


def test_search_replicas_reports_none_when_the_bound_never_meets():
    found, trace = search_replicas(lambda n: False, 10)
    assert found is None
    assert [n for n, _ in trace] == [1, 2, 4, 8, 10]


@pytest.mark.parametrize("threshold", [0.013, 0.7, 1.0, 3.3, 250.0])
def test_search_rate_brackets_the_threshold_within_tolerance(threshold):
    rate = search_rate(lambda r: r <= threshold, start=1.0, rel_tol=0.01)
    assert rate is not None and rate <= threshold
    assert rate >= threshold * (1 - 0.0101)


def test_replica_search_equals_brute_force_scan_on_a_small_case():
    qps = 2.5
    spec = SearchSpec(json.dumps(small_scenario()), None, PROFILE.to_json(), BASELINE, qps)
    scan = [run_cached(sized_job(spec, n, qps)).meets_sla for n in range(1, 9)]
    assert scan[-1], "the case must become feasible within the scan"
    brute = scan.index(True) + 1
    assert brute > 1, "the case must need more than one replica to test the search"
    result = plan(small_scenario(), None, PROFILE, qps, candidate_names=["baseline"], attainment_levels=(0.99,))
    row = result.rows[0]
    assert row["replicas"] == brute
    assert row["gpus"] == brute * PROFILE.key.tp
    assert result.recommended["candidate"]["name"] == "baseline"


def test_goodput_does_not_increase_as_the_sla_tightens():
    curves = []
    for scale in (1.0, 0.8, 0.6, 0.45):
        data = small_scenario(4000.0 * scale, 80.0 * scale)
        spec = SearchSpec(json.dumps(data), None, PROFILE.to_json(), BASELINE, 1.0, attainment_levels=(0.9, 0.99),
                          rel_tol=0.05)
        curves.append(goodput_curve(spec, 2))
    for level in ("0.9", "0.99"):
        values = [c[level] or 0.0 for c in curves]
        assert all(a >= b for a, b in zip(values, values[1:], strict=False)), (level, values)
        assert values[0] > values[-1], f"the tightest SLA should cost goodput here: {values}"
    for curve in curves:  # a stricter attainment level cannot admit more load
        assert (curve["0.9"] or 0.0) >= (curve["0.99"] or 0.0)


def test_plan_reports_a_candidate_the_profile_cannot_support():
    result = plan(small_scenario(), None, PROFILE, 1.0, candidate_names=["compression"], attainment_levels=(0.99,))
    assert "not in the profile" in result.rows[0]["not_applicable"]
    assert result.recommended is None


def test_plan_needs_an_sla_term():
    data = small_scenario()
    data["sla"] = {}
    with pytest.raises(ValueError, match="no SLA term"):
        plan(data, None, PROFILE, 1.0, candidate_names=["baseline"])


def test_plan_rows_typed_once_round_trip_and_say_why_a_size_is_missing():
    """PlanRow: the plan's rows as the CLI and the app read them; its codec round-trips, a sized row has its size
    and P99s, one that never meets says up to where it searched and the P99s there, an inapplicable one why."""
    result = plan(small_scenario(tpot_ms=1.0), None, PROFILE, 1.0, candidate_names=["baseline", "compression"],
                  max_replicas=2, attainment_levels=(0.99,))
    rows = {r.candidate: r for r in result.summaries()}
    for row in rows.values():
        assert PlanRow.from_dict(json.loads(json.dumps(row.to_dict()))) == row
    base = rows["baseline"]
    assert base.replicas is None and base.searched_replicas == 2 and base.p99_ms["tpot"] > 1.0
    assert base.status().startswith("no replica count up to 2 meets the SLA (P99 there ")
    assert rows["compression"].status().startswith("not applicable: ") and not rows["compression"].ran
    sized = PlanRow.of_row(plan(small_scenario(), None, PROFILE, 1.0, candidate_names=["baseline"],
                                attainment_levels=(0.99,)).rows[0])
    assert sized.status() == "" and f"{sized.replicas} replica(s) = {sized.gpus} GPU(s)" in sized.line()
    with pytest.raises(ValueError, match="missing"):
        PlanRow.from_dict({"candidate": "x"})
