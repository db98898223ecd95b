"""The decision rule: verdicts only when the replication interval is on one side of the target, samples sized
for the tail, warm-up left out, and a sizing answer that holds across seeds and ten times the requests."""

from __future__ import annotations

import math

import pytest

from tests.helpers import SEED as PROFILE
from tripath.core.records import COMPLETED, RequestRecord
from tripath.planning.candidates import BASELINE
from tripath.planning.capacity import SearchSpec, plan_candidate
from tripath.planning.decision import (
    DecisionRule,
    RefusedError,
    decide,
    judge,
    replication_interval,
    steady_p99s,
    tail_minimum,
    term_verdict,
)


def record(i: int, arrival: float, ttft: float, tpot: float = 0.01, output: int = 11) -> RequestRecord:
    first = arrival + ttft
    return RequestRecord(i, "dialogue", arrival, 100, output, 0, arrival, first, first + tpot * (output - 1),
                         COMPLETED)


def test_tail_minimum_samples_ten_requests_beyond_the_p99():
    assert tail_minimum() == 1000
    assert tail_minimum(10, 0.9) == 100
    assert tail_minimum(5, 0.99) == 500


def test_steady_tail_leaves_the_first_arrivals_out():
    # 100 requests: the first 10 arrivals have a huge TTFT; with a 10 % warm-up they are not in the tail
    runs = [[record(i, float(i), 50.0 if i < 10 else 1.0) for i in range(100)]]
    assert steady_p99s(runs, warmup=0.1)["ttft"] == [pytest.approx(1000.0)]
    assert steady_p99s(runs, warmup=0.0)["ttft"][0] == pytest.approx(50_000.0)


def test_replication_interval_is_the_student_t_interval_by_hand():
    values = [10.0, 12.0, 14.0]
    mean, low, high = replication_interval(values)
    half = 4.302652729911275 * 2.0 / math.sqrt(3)  # t(0.975, 2) x s / sqrt(n), s = 2
    assert mean == pytest.approx(12.0)
    assert low == pytest.approx(12.0 - half)
    assert high == pytest.approx(12.0 + half)
    assert replication_interval([1.0, None]) == (None, None, None)


@pytest.mark.parametrize(("low", "high", "verdict"), [(1.0, 9.0, "meets"), (1.0, 10.0, "meets"),
                                                      (9.0, 11.0, "undecided"), (10.5, 12.0, "misses"),
                                                      (None, 5.0, "undecided")])
def test_term_verdict_needs_the_whole_interval_on_one_side(low, high, verdict):
    assert term_verdict(low, high, 10.0) == verdict


def outcome(ttft: list[float], tpot: list[float], rejected: float = 0.0) -> dict:
    return {"sla_targets_ms": {"ttft": 1000.0, "tpot": 50.0, "e2e": None}, "replications": len(ttft),
            "p99_steady_ms_by_replication": {"ttft": ttft, "tpot": tpot, "e2e": [1.0] * len(ttft)},
            "rejected_share": rejected}


def test_judge_combines_terms_and_rejections():
    assert judge(outcome([800, 810, 790, 805], [40, 41, 40, 39]), 1000).verdict == "meets"
    assert judge(outcome([1200, 1210, 1190, 1205], [40, 41, 40, 39]), 1000).verdict == "misses"
    assert judge(outcome([950, 1050, 990, 1010], [40, 41, 40, 39]), 1000).verdict == "undecided"
    # a term that misses outweighs one that is undecided
    assert judge(outcome([950, 1050, 990, 1010], [60, 61, 60, 62]), 1000).verdict == "misses"
    # any rejection misses, whatever the latencies: the rejected requests are the tail's longest prompts
    rejected = judge(outcome([800, 810, 790, 805], [40, 41, 40, 39], rejected=0.002), 1000)
    assert rejected.verdict == "misses" and "rejected" in rejected.why
    # a term with no completed request has no tail: undecided, never meets
    assert judge(outcome([800, None, 790, 805], [40, 41, 40, 39]), 1000).verdict == "undecided"


def test_stages_double_from_the_tail_minimum_up_to_the_budget():
    rule = DecisionRule(replications=4, budget_requests=8000)
    assert rule.stages(100) == [1000, 2000, 4000, 8000]
    assert rule.stages(3000) == [3000, 6000]
    assert DecisionRule(budget_requests=500).stages(100) == [1000]
    with pytest.raises(ValueError):
        DecisionRule(replications=1)


def test_decide_simulates_more_only_while_undecided():
    # the spread of the replications' P99s shrinks as 1/sqrt(requests): undecided at 1,000, decided later
    asked = []

    def run_stage(n: int) -> dict:
        asked.append(n)
        spread = 300.0 * math.sqrt(1000.0 / n)
        return outcome([800 - spread, 800, 800 + spread, 800], [40, 40, 40, 40])

    verdict, _ = decide(run_stage, DecisionRule(4, 16000), 100)
    assert verdict.verdict == "meets" and asked[-1] == verdict.requests and asked[0] == 1000
    assert asked == sorted(asked) and len(asked) == verdict.stages > 1

    asked.clear()
    verdict, _ = decide(lambda n: asked.append(n) or outcome([900, 1100, 950, 1050], [40] * 4), DecisionRule(4, 4000),
                        100)
    assert verdict.verdict == "undecided" and verdict.budget_reached and asked == [1000, 2000, 4000]
    assert "at this budget" in verdict.why

    # an undecided stage far over the target stops at once: the search would conclude the same at the budget
    asked.clear()
    verdict, _ = decide(lambda n: asked.append(n) or outcome([900, 3000, 100, 2000], [40] * 4), DecisionRule(4, 4000),
                        100)
    assert verdict.verdict == "undecided" and verdict.stopped and asked == [1000]
    assert "not simulated further" in verdict.why

    with pytest.raises(RefusedError):
        decide(lambda n: {"error": "scenario.toml: strategy: no"}, DecisionRule(), 100)


def small(rate: float) -> dict:
    """Short fixed-length requests on the seed profile, Poisson arrivals (the exact fast path: quick)."""
    return {"name": "small", "workload": {"requests": 100, "arrival": {"kind": "poisson", "rate_per_s": rate},
                                          "tasks": {"dialogue": 1.0},
                                          "prompt_tokens": {"kind": "uniform", "low": 256, "high": 2048},
                                          "output_tokens": {"kind": "fixed", "value": 32}},
            "cluster": {"gpus": 1}, "batching": {"max_batch_size": 8},
            "sla": {"ttft_p99_ms": 2500.0, "tpot_p99_ms": 120.0}}


def sized(seed: int, requests: int) -> tuple[int | None, dict]:
    import json

    data = small(3.0)
    data["workload"]["requests"] = requests
    spec = SearchSpec(json.dumps(data, sort_keys=True), None, PROFILE.to_json(), BASELINE, 3.0, seed, 4, 12, (),
                      rule=DecisionRule(4, 2000))
    row = plan_candidate(spec)
    return row["replicas"], row


def test_the_sized_answer_holds_for_five_seeds_and_ten_times_the_requests():
    answers = {sized(seed, 100)[0] for seed in range(5)} | {sized(0, 1000)[0]}
    assert len(answers) == 1 and None not in answers
    replicas, row = sized(0, 100)
    assert row["verdict"]["verdict"] == "meets"
    # the count below did not meet with confidence: it missed, or stayed undecided at the budget
    below = next(s for s in row["search"] if s["replicas"] == replicas - 1) if replicas > 1 else None
    assert below is None or below["verdict"]["verdict"] in ("misses", "undecided")
