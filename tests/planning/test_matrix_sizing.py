"""A matrix cell or a plan whose scenario has fewer GPUs than one replica of the profile is sized, not refused.

The shipped cells were written for the seed profile (TP1): four of five have 1 GPU. In the matrix a row's GPUs
are model replicas (the seed holds a 70B model on one GPU), so on a TP2 profile every row's GPUs double. A plan or
a stack whose scenario cannot hold one replica is sized to the smallest cluster holding one replica of every
candidate the profile supports; one that holds the baseline keeps its GPUs.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers import SEED
from tripath.planning.candidates import BASELINE, candidates, matrix_sizing, size_to_profile, tiering_idle
from tripath.planning.capacity import plan
from tripath.planning.matrix import cell_rate, decision_matrix
from tripath.planning.scenario_dict import load_scenario_dict, with_fields
from tripath.profile.profile import resolve_profile

# the shipped TP2 profile without its SP sections, and with the seed's degree-2 rows (a known, small SP section)
TP2 = dataclasses.replace(resolve_profile("published-llama2-70b-tp2-a100"), sequence_parallel={})
TP2_SP = dataclasses.replace(TP2, sequence_parallel=SEED.sequence_parallel)
REQUESTS = 10


def one_gpu_cell() -> dict:
    data, _ = load_scenario_dict("dialogue-medium")
    assert data["cluster"]["gpus"] == 1
    return data


def test_sizing_rule_by_hand() -> None:
    data = one_gpu_cell()
    assert TP2.sequence_parallel == {} and 2 in TP2_SP.sequence_parallel
    plain = size_to_profile(TP2, data, candidates(TP2))  # no SP rows: the largest replica is TP2
    assert plain is not None and (plain.scenario_gpus, plain.gpus, plain.largest.name) == (1, 2, "baseline")
    sized = size_to_profile(TP2_SP, data, candidates(TP2_SP))  # tp 2 x SP degree 2
    assert sized is not None and sized.gpus == 2 * 2 and sized.largest.paths == ("sequence_parallel",)
    assert sized.note().startswith("sized to 4 GPUs: the scenario's 1 GPU cannot hold one replica of the "
                                   "profile's TP2") and "TP2 x SP2" in sized.note()
    # a cluster that holds the baseline is kept as given, even when an SP candidate needs more
    assert size_to_profile(TP2_SP, with_fields(data, {"cluster.gpus": 2}), candidates(TP2_SP)) is None
    assert size_to_profile(SEED, data, candidates(SEED)) is None  # TP1: every shipped cell holds the baseline
    assert size_to_profile(TP2, data, [BASELINE]).gpus == 2


def test_matrix_on_tp2_scales_every_row_by_the_tp_and_runs() -> None:
    # the seed's rows count GPUs that each hold the 70B model; on TP2 each is 2 GPUs (candidates.matrix_sizing)
    cells = [("dialogue-medium", "speculative"), ("fixed-length-multi-gpu", "sequence_parallel")]
    assert matrix_sizing(SEED, one_gpu_cell()) is None  # TP1: the rows as written
    matrix = decision_matrix(TP2_SP, cells, requests=REQUESTS)
    dialogue, multi = matrix.cells
    assert dialogue.gpus == 2 and dialogue.sizing is not None and dialogue.to_dict()["sized"]["gpus"] == 2
    assert dialogue.sizing.note().startswith("sized to 2 GPUs: the seed's rows count GPUs that each hold one "
                                             "model replica")
    ran = {r.candidate.name: r.outcome.data for r in dialogue.results if r.outcome is not None}
    assert "baseline" in ran and ran["baseline"]["replicas"] == 1 and "sequence_parallel" not in ran
    sp = next(r for r in dialogue.results if r.candidate.name == "sequence_parallel")
    assert sp.not_applicable == "needs 4 GPUs per replica, the cluster has 2"  # as SP on the seed's 1-GPU rows
    # the 2-GPU row is 4 GPUs: one TP2 x SP2 replica, or two baseline replicas, on the same GPUs
    assert multi.gpus == 4 and multi.to_dict()["sized"]["gpus"] == 4
    ran = {r.candidate.name: r.outcome.data for r in multi.results if r.outcome is not None}
    assert {"baseline", "sequence_parallel"} <= set(ran) and all(o["gpus"] == 4 for o in ran.values())
    assert ran["baseline"]["replicas"] == 2 and ran["sequence_parallel"]["replicas"] == 1


def test_tiering_that_pages_nothing_says_so() -> None:
    cells = [("dialogue-medium", None), ("very-long-single-gpu", None)]
    dialogue, very_long = decision_matrix(TP2, cells, requests=REQUESTS).cells

    def row(cell, name):
        return next(r for r in cell.results if r.candidate.name == name)

    base, tiered = row(dialogue, "baseline").outcome.data, row(dialogue, "tiered").outcome.data
    # 8-16K prompts at max_batch_size 1: at most 16K + output tokens live, under the TP2 KV budget
    assert tiered["peak_kv_bytes"] <= tiered["kv_capacity_bytes"] and tiered["paging_ms_per_request"] == 0.0
    assert tiered["p99_ms"] == base["p99_ms"]
    remark = row(dialogue, "tiered").remark
    assert remark is not None and remark.startswith("tiered never engaged") and "max_batch_size 1" in remark
    assert row(dialogue, "tiered").to_dict()["remark"] == remark
    assert row(dialogue, "baseline").remark is None and "remark" not in row(dialogue, "baseline").to_dict()
    # 32-64K prompts exceed the budget: tiering pages, admits what the baseline rejects, and has no remark
    long_tiered = row(very_long, "tiered")
    assert long_tiered.outcome.data["paging_ms_per_request"] > 0.0 and long_tiered.remark is None
    assert row(very_long, "baseline").outcome.data["rejected_share"] > long_tiered.outcome.data["rejected_share"]


def test_tiering_idle_needs_no_paging_and_a_peak_within_budget() -> None:
    tiered = next(c for c in candidates(TP2) if c.name == "tiered")
    fits = {"paging_ms_per_request": 0.0, "peak_kv_bytes": 2**30, "kv_capacity_bytes": 2**31}
    assert tiering_idle(tiered, fits, 1) is not None
    assert tiering_idle(BASELINE, fits, 1) is None
    assert tiering_idle(tiered, {**fits, "paging_ms_per_request": 0.5}, 1) is None
    assert tiering_idle(tiered, {**fits, "peak_kv_bytes": 2**32}, 1) is None
    assert tiering_idle(tiered, {k: v for k, v in fits.items() if k != "paging_ms_per_request"}, 1) is None


def test_plan_on_tp2_with_a_one_gpu_scenario_sizes_each_candidate() -> None:
    data = with_fields(one_gpu_cell(), {"workload.requests": REQUESTS})
    result = plan(data, None, TP2_SP, 0.005, candidate_names=["baseline", "sequence_parallel"], max_replicas=4,
                  attainment_levels=(0.9,)).to_dict()
    rows = {r["candidate"]["name"]: r for r in result["candidates"]}
    assert rows["baseline"]["gpus_per_replica"] == 2 and rows["sequence_parallel"]["gpus_per_replica"] == 4
    for row in rows.values():
        assert row["not_applicable"] is None
        if row["replicas"] is not None:
            assert row["gpus"] == row["replicas"] * row["gpus_per_replica"]
            assert row["outcome"]["gpus"] == row["gpus"]
    assert "TP2" in result["sizing"] and "cluster.gpus (1) is not used" in result["sizing"]


def test_the_cells_rate_is_the_sized_baselines() -> None:
    # the load fraction is taken of the sized cluster's baseline: the 2-GPU row on TP2 runs 2 replicas on 4 GPUs,
    # twice the rate of 1 replica on 2 GPUs
    name = "fixed-length-multi-gpu"
    data, source = load_scenario_dict(name)
    cell = decision_matrix(TP2, [(name, None)], requests=REQUESTS).cells[0]
    one = cell_rate(with_fields(data, {"cluster.gpus": 2}), source, TP2)
    assert cell.gpus == 4 and one is not None
    assert cell.rate_per_s == pytest.approx(2.0 * one)


def test_stack_on_tp2_with_a_one_gpu_scenario_is_sized_too() -> None:
    from tripath.planning.stack import stack

    data = with_fields(one_gpu_cell(), {"workload.requests": REQUESTS})
    result = stack(data, None, TP2_SP, replications=1)
    assert result.sizing is not None and result.sizing.gpus == 4 and result.to_dict()["sized"]["gpus"] == 4
    assert {"tiered", "sequence_parallel"} <= set(result.paths)  # SP fits the sized cluster
    assert all("error" not in s for s in result.subsets.values())


def test_a_lossy_candidate_ranks_after_every_lossless_one_on_as_few_gpus() -> None:
    from tripath.planning.candidates import Candidate
    from tripath.planning.matrix import rank_key
    from tripath.planning.sweep import Outcome

    def outcome(gpus: int, margin: float) -> Outcome:
        return Outcome({"gpus": gpus, "sla_margin": margin})

    tiered, int4 = Candidate("tiered", {"tiered": {}}), Candidate("compression:int4", {"compression": {"mode": "int4"}})
    # int4 has the larger margin, but KV compression costs answer quality: the lossless candidate ranks first
    assert rank_key(tiered, outcome(2, 0.41)) < rank_key(int4, outcome(2, 0.79))
    assert rank_key(int4, outcome(2, 0.79)) < rank_key(BASELINE, outcome(4, 0.9))  # fewer GPUs first
    assert rank_key(BASELINE, outcome(2, 0.5)) < rank_key(tiered, outcome(2, 0.4))  # then the margin


def test_a_speculative_candidate_keeps_the_users_own_acceptance() -> None:
    data = with_fields(one_gpu_cell(), {"strategy": {"speculative": {"k": 3, "acceptance": {"dialogue": 0.9}}}})
    spec = next(c for c in candidates(SEED) if c.name == "speculative")
    applied = spec.apply(data)["strategy"]
    assert applied == {"speculative": {"acceptance": {"dialogue": 0.9}}}  # the candidate's K (none), the user's a
    assert BASELINE.apply(data).get("strategy") is None  # the baseline has no speculative path to carry it
    assert spec.strategy == {"speculative": {}}  # the candidate itself is unchanged


def test_plan_recommends_lossless_before_lossy_on_as_few_gpus() -> None:
    from tripath.planning.capacity import Plan

    def row(name: str, paths: list[str], gpus: int, margin: float) -> dict:
        return {"candidate": {"name": name, "paths": paths}, "gpus": gpus, "outcome": {"sla_margin": margin}}

    rows = [row("compression:int4", ["compression"], 4, 0.8), row("speculative", ["speculative"], 4, 0.5),
            row("baseline", [], 8, 0.9)]
    result = Plan("s", "p", "published", 1.0, {}, None, tuple(rows))
    assert result.recommended["candidate"]["name"] == "speculative"  # int4's larger margin does not buy quality
