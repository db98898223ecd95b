"""A matrix cell or a plan whose scenario has fewer GPUs than one replica of the profile is sized, not refused.

The shipped cells were written for the seed profile (TP1): four of five have 1 GPU. On a TP2 profile
the cell is sized to the smallest cluster holding one replica of every candidate the profile supports
(equal GPUs for every candidate of the cell); a cell that holds the baseline keeps its GPUs.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers import SEED
from tripath.planning.candidates import BASELINE, candidates, size_to_profile, tiering_idle
from tripath.planning.capacity import plan
from tripath.planning.matrix import decision_matrix
from tripath.planning.scenario_dict import load_scenario_dict, with_fields
from tripath.profile.profile import resolve_profile

TP2 = resolve_profile("published-llama2-70b-tp2-a100")
TP2_SP = dataclasses.replace(TP2, sequence_parallel=SEED.sequence_parallel)  # SP rows of degree 2 borrowed
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


def test_matrix_on_tp2_sizes_the_one_gpu_cells_and_runs() -> None:
    cells = [("dialogue-medium", "speculative"), ("fixed-length-multi-gpu", "sequence_parallel")]
    matrix = decision_matrix(TP2_SP, cells, requests=REQUESTS)
    dialogue, multi = matrix.cells
    assert dialogue.gpus == 4 and dialogue.sizing is not None and dialogue.to_dict()["sized"]["gpus"] == 4
    ran = {r.candidate.name: r.outcome.data for r in dialogue.results if r.outcome is not None}
    assert {"baseline", "sequence_parallel"} <= set(ran)
    assert all(o["gpus"] == 4 for o in ran.values())  # every candidate on the same GPUs
    assert ran["baseline"]["replicas"] == 2 and ran["sequence_parallel"]["replicas"] == 1
    # the 2-GPU cell holds one TP2 replica: kept, and SP (4 GPUs per replica) is not applicable there
    assert multi.gpus == 2 and multi.sizing is None and "sized" not in multi.to_dict()
    sp = next(r for r in multi.results if r.candidate.name == "sequence_parallel")
    assert sp.not_applicable == "needs 4 GPUs per replica, the cluster has 2"


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
    name = "dialogue-medium"
    # the load fraction is taken of the sized cluster's baseline: twice the replicas, twice the rate
    two = decision_matrix(TP2, [(name, None)], requests=REQUESTS).cells[0]
    four = decision_matrix(TP2_SP, [(name, None)], requests=REQUESTS).cells[0]
    assert four.rate_per_s == pytest.approx(2.0 * two.rate_per_s)


def test_stack_on_tp2_with_a_one_gpu_scenario_is_sized_too() -> None:
    from tripath.planning.stack import stack

    data = with_fields(one_gpu_cell(), {"workload.requests": REQUESTS})
    result = stack(data, None, TP2_SP, replications=1)
    assert result.sizing is not None and result.sizing.gpus == 4 and result.to_dict()["sized"]["gpus"] == 4
    assert set(result.paths) == {"tiered", "sequence_parallel"}  # SP fits the sized cluster
    assert all("error" not in s for s in result.subsets.values())
