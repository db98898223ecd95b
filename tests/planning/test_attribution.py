"""tripath/planning/attribution.py and the matrix's seed comparison on hand-made outcomes (rules, not physics).

The outcomes are plain dicts in the shape tripath/planning/sweep.py's run_job returns, with margins and
rejection shares chosen so each rule's answer is known by hand.
"""

from __future__ import annotations

import pytest

from tripath.planning.attribution import GAIN, MEMORY, NO_GAIN, UNKNOWN, WITHIN_NOISE, PathRole, attribute
from tripath.planning.candidates import BASELINE, Candidate
from tripath.planning.matrix import CandidateResult, Cell
from tripath.planning.sweep import Outcome

SPEC, TIER, SP = {"speculative": {}}, {"tiered": {}}, {"sequence_parallel": {"degree": 2}}


def result(name: str, strategy: dict, margin: float | None, rejected: float, meets: bool = False,
           gpus: int = 1) -> CandidateResult:
    p99 = {t: {"mean": None if margin is None else 100.0, "ci_low": None, "ci_high": None}
           for t in ("ttft", "tpot", "e2e")}
    data = {"meets_sla": meets, "gpus": gpus, "sla_margin": margin, "rejected_share": rejected, "p99_ms": p99,
            "reject_reasons": {"KV reservation exceeds the budget": 1} if rejected else {}}
    return CandidateResult(Candidate(name, strategy) if strategy else BASELINE, None, Outcome(data))


def test_memory_gain_and_no_gain_by_hand():
    rows = [result("baseline", {}, None, 1.0), result("speculative", SPEC, None, 1.0),
            result("tiered", TIER, -0.50, 0.0), result("speculative+tiered", {**SPEC, **TIER}, -0.10, 0.0)]
    a = attribute(rows[3], rows)
    assert [(r.path, r.role, r.without) for r in a.roles] == [("speculative", GAIN, "tiered"),
                                                              ("tiered", MEMORY, "speculative")]
    assert a.primary_path == "speculative" and a.memory_paths == ("tiered",)
    assert "+40.0 points" in a.roles[0].detail
    # a path whose removal changes nothing earns no gain; the primary path is then the baseline
    flat = [result("baseline", {}, -0.10, 0.0), result("tiered", TIER, -0.10, 0.0)]
    b = attribute(flat[1], flat)
    assert b.roles[0].role == NO_GAIN and b.primary_path == "baseline"
    # the candidate without the path was not simulated: not compared, not guessed
    assert attribute(rows[3], rows[2:]).roles[1].role == UNKNOWN
    with pytest.raises(ValueError):
        PathRole("tiered", "faster", None, "")


def cell(scenario: str, seed: str, rows: list[CandidateResult], gpus: int = 1) -> Cell:
    return Cell(scenario, {"ttft": 1000.0, "tpot": 100.0, "e2e": None}, gpus, 0.1, tuple(rows), seed)


def test_gain_and_memory_claims_are_compared_with_their_part():
    rows = [result("baseline", {}, None, 1.0), result("speculative", SPEC, None, 1.0),
            result("tiered", TIER, 0.05, 0.0, meets=True),
            result("speculative+tiered", {**SPEC, **TIER}, 0.20, 0.0, meets=True)]
    gain_row = cell("dialogue-medium", "speculative", rows)  # a gain claim: the primary path
    assert gain_row.recommended == "speculative+tiered" and gain_row.compared_path == "speculative"
    assert gain_row.seed_match == "agrees"
    memory_row = cell("summarization-very-long", "tiered", rows)  # a memory claim: the memory paths
    assert memory_row.compared_path == "tiered" and memory_row.seed_match == "agrees"
    baseline_row = cell("math-medium", "baseline", rows)
    assert baseline_row.seed_match == "differs" and "primary path" in baseline_row.why_not_seed()


def test_same_path_for_the_other_reason_is_not_agreement():
    rows = [result("baseline", {}, None, 0.6, gpus=2), result("tiered", TIER, -0.2, 0.0, gpus=2),
            result("sequence_parallel", SP, 0.3, 0.0, meets=True, gpus=2)]
    c = cell("fixed-length-multi-gpu", "sequence_parallel", rows, gpus=2)
    assert c.attribution.memory_paths == ("sequence_parallel",) and c.compared_path == "baseline"
    assert c.seed_agrees is False and c.seed_match == "same path, other reason"


def test_closest_candidate_when_none_meets():
    rows = [result("baseline", {}, None, 1.0), result("tiered", TIER, -0.5, 0.0),
            result("speculative+tiered", {**SPEC, **TIER}, -0.1, 0.0), result("speculative", SPEC, 0.4, 0.02)]
    c = cell("dialogue-medium", "speculative", rows)
    # speculative alone has the best margin but rejects 2% (> 1%): not feasible, not chosen
    assert c.recommended is None and c.chosen.candidate.name == "speculative+tiered"
    assert c.why()[0].startswith("no candidate meets the SLA")


def test_a_gain_inside_the_paired_interval_is_not_a_primary_path():
    sla = {"ttft": 1000.0, "tpot": 100.0, "e2e": None}

    def reps(r: CandidateResult, tpot: list[float]) -> CandidateResult:
        r.outcome.data["p99_ms_by_replication"] = {"ttft": [500.0] * len(tpot), "tpot": tpot, "e2e": [None] * 3}
        return r

    # TPOT binds (ttft margin +0.5): per-replication margin differences +0.10, -0.02, +0.04 (mean +0.04,
    # sd 0.06, t(2) 4.303 -> half-width 0.149): the interval reaches 0
    noisy = [reps(result("tiered", TIER, -0.13, 0.0), [110.0, 112.0, 117.0]),
             reps(result("speculative+tiered", {**SPEC, **TIER}, -0.09, 0.0), [100.0, 114.0, 113.0]),
             result("speculative", SPEC, None, 1.0)]
    a = attribute(noisy[1], noisy, sla)
    assert a.roles[0].role == WITHIN_NOISE and a.primary_path == "baseline"
    assert "paired 95% interval [-10.9, +18.9]" in a.roles[0].detail
    # the same mean gain, consistent in every replication (+0.04 each): a gain
    steady = [reps(result("tiered", TIER, -0.13, 0.0), [110.0, 112.0, 117.0]),
              reps(result("speculative+tiered", {**SPEC, **TIER}, -0.09, 0.0), [106.0, 108.0, 113.0]),
              result("speculative", SPEC, None, 1.0)]
    assert attribute(steady[1], steady, sla).roles[0].role == GAIN
    assert attribute(noisy[1], noisy).roles[0].role == GAIN  # without targets there is nothing to pair
