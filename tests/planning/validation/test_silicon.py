"""data/validation/silicon_rows.csv and docs/silicon_validation.md are what the code gives: a sample of rows and the
doc's MAPE table are recomputed here (a stale file fails), with a check that the selection and the simulation
are what the method says."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("aiconfigurator_core")  # the silicon sample ships inside it (the test extra installs it)

from tests.helpers import load_script  # noqa: E402
from tripath.planning.validation.silicon import (  # noqa: E402
    SiliconRow,
    load_rows,
    mape_table,
    not_covered,
    not_covered_table,
    rank_count,
    read_results,
    requests_for,
    row_scenario,
    shipped_profile,
    simulate_row,
)
from tripath.simulator.scenario.scenario import scenario_from_dict  # noqa: E402


@pytest.fixture(scope="module")
def rows() -> list[SiliconRow]:
    return load_rows()


def cheapest_per_group(rows: list[SiliconRow]) -> list[SiliconRow]:
    """The row with the fewest simulated output tokens in each (system, backend, model): a deterministic sample
    that touches every profile family and backend in seconds."""
    picked: dict[tuple[str, str, str], SiliconRow] = {}
    for row in rows:
        best = picked.get(row.group)
        if best is None or (requests_for(row.users) * row.osl, row.id) < (
                requests_for(best.users) * best.osl, best.id):
            picked[row.group] = row
    return [picked[g] for g in sorted(picked)]


def test_the_selection_is_the_covered_agg_rows(rows: list[SiliconRow]) -> None:
    assert len(rows) == 818 and len({r.id for r in rows}) == len(rows)
    assert {r.system for r in rows} == {"h100_sxm", "h200_sxm", "b200_sxm"}
    assert {r.backend for r in rows} == {"vllm", "sglang"}
    # NVFP4 only as gpt-oss-120b's own mxfp4 experts
    assert all(r.gemm_quant_mode in ("", "fp8", "fp8_block") or r.model == "gpt-oss-120b" for r in rows)
    assert {r.weights for r in rows if r.model == "gpt-oss-120b"} == {"fp4"}
    by_id = {r.id: r for r in rows}
    block = next(r for r in rows if r.gemm_quant_mode == "fp8_block")
    assert block.weights == "fp8" and block.profile.endswith("-fp8-sglang")
    moe = [r for r in rows if r.moe_tp]
    assert len(moe) == 409 and {r.model for r in moe} == {"qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b"}
    # experts by TP or by EP over the replica's GPUs: tp x attention dp of them
    assert all((r.moe_tp, r.moe_ep) in ((r.tp * r.attention_dp, 1), (1, r.tp * r.attention_dp)) for r in moe)
    dp = [r for r in moe if r.attention_dp > 1]
    assert len(dp) == 10 and {(r.tp, r.attention_dp) for r in dp} == {(1, 4), (2, 2)}
    assert {r.profile for r in dp} == {"aic-qwen3-235b-a22b-dp4-h200-fp8", "aic-qwen3-235b-a22b-tp2-dp2-h200-fp8"}
    ep = [r for r in moe if r.expert_parallel]
    assert ep and all(r.profile.endswith("-fp8-ep") and r.moe_ep == r.tp > 1 for r in ep)
    assert {r.profile for r in moe if r.model_path == "deepseek-ai/DeepSeek-R1"} <= {
        r.profile for r in moe if r.model_path == "deepseek-ai/DeepSeek-V3"}  # R1 on V3's profiles
    written = read_results()
    assert [w["id"] for w in written] == [r.id for r in rows]
    assert all(by_id[w["id"]].profile == w["profile"] for w in written)


def test_a_row_is_a_closed_loop_of_its_concurrency_with_fixed_lengths(rows: list[SiliconRow]) -> None:
    row = max(rows, key=lambda r: r.concurrency)
    scenario = scenario_from_dict(row_scenario(row), None)
    workload, batching = scenario.workload, scenario.batching
    assert workload.arrival.kind == "closed" and workload.arrival.users == row.concurrency
    assert workload.requests == requests_for(row.concurrency) == 4 * row.concurrency
    assert workload.prompt_tokens.value == row.isl and workload.output_tokens.value == row.osl
    assert (batching.policy, batching.preemption, batching.max_batched_tokens) == ("chunked", "recompute", 8192)
    assert batching.max_batch_size >= row.concurrency and scenario.cluster.gpus == row.tp
    assert requests_for(1) == 40


def test_sampled_rows_recompute_to_the_written_csv(rows: list[SiliconRow]) -> None:
    written = {w["id"]: w for w in read_results()}
    sample = cheapest_per_group(rows)
    assert len(sample) == 14
    script = load_script("scripts/silicon_validation.py")
    for row in sample:
        assert script.evaluate_row(row) == written[row.id], f"{row.id}: run scripts/silicon_validation.py --write"


def test_the_doc_holds_the_table_the_csv_gives() -> None:
    script = load_script("scripts/silicon_validation.py")
    text = script.DOC.read_text(encoding="utf-8")
    block = text.split(script.START, 1)[1].split(script.END, 1)[0].strip("\n")
    assert block == mape_table(read_results()), "docs/silicon_validation.md is stale: rerun with --write"
    block = text.split(script.UNCOVERED_START, 1)[1].split(script.UNCOVERED_END, 1)[0].strip("\n")
    assert block == not_covered_table(), "docs/silicon_validation.md is stale: rerun with --write"


def test_every_row_in_scope_is_covered_or_counted_with_its_reason(rows: list[SiliconRow]) -> None:
    missing = not_covered()
    assert len(missing) == 265 and not {r["id"] for r, _ in missing} & {r.id for r in rows}
    reasons = {why for _, why in missing}
    # Qwen3-235B on vLLM with attention data parallelism at tp 1 x D 2: one rank's 123 GB leaves under 10 % for KV
    dp2 = [why for _, why in missing if "aic-qwen3-235b-a22b-dp2-h200-fp8" in why]
    assert len(dp2) == 9 and all("under 10 %" in why for why in dp2)
    assert any(why.startswith("no profile aic-deepseek-v3-tp4-b200-fp8-sglang") for why in reasons)
    assert {why for r, why in missing if r["model_path"] == "meta-llama/Llama-3.1-70B"} == {
        "NVFP4 weights: not modelled"}


def test_one_user_waits_at_least_a_batch_one_decode_step_per_token(rows: list[SiliconRow]) -> None:
    row = replace(min(rows, key=lambda r: (r.osl, r.id)), concurrency=1)
    profile = shipped_profile(row.profile)
    sim = simulate_row(row, profile)
    assert sim.requests == requests_for(1) - 1
    # the shortest context it decodes at; 1e-4 slack: the simulator composes the iteration from its own cost
    # model (tripath/simulator/costs.py), which agrees with the profile's point value to a few parts per million
    assert sim.tpot_mean >= profile.decode_ms(1, row.isl) * (1 - 1e-4)
    assert sim.ttft_mean >= profile.prefill_ms(row.isl, 0) * (1 - 1e-4)  # a lone prompt, nothing queued ahead


def test_a_dp_row_is_d_ranks_of_batch_size_users_each(rows: list[SiliconRow]) -> None:
    raw = {"model_path": "Qwen/Qwen3-235B-A22B-FP8", "attention_dp_size": "", "tp_size": "1", "moe_tp_size": "4",
           "moe_ep_size": "1"}
    assert rank_count(raw) == 4  # blank attention_dp_size: the experts' GPUs over tp
    assert rank_count({**raw, "tp_size": "2"}) == 2 and rank_count({**raw, "moe_tp_size": "1"}) == 1
    assert rank_count({**raw, "attention_dp_size": "8", "moe_tp_size": "8"}) == 8
    assert rank_count({**raw, "model_path": "Qwen/Qwen3-32B"}) == 1  # a dense model
    row = next(r for r in rows if r.attention_dp == 4)
    assert (row.tp, row.moe_tp, row.moe_ep, row.expert_parallel) == (1, 4, 1, False)
    assert row.users == 4 * row.concurrency and row.profile == "aic-qwen3-235b-a22b-dp4-h200-fp8"
    scenario = scenario_from_dict(row_scenario(row), None)
    assert scenario.workload.arrival.users == row.users and scenario.cluster.gpus == 4
    assert scenario.workload.requests == requests_for(row.users)
    assert scenario.batching.max_batch_size == max(256, row.concurrency)  # per rank
    assert shipped_profile(row.profile).key.attention_dp == 4
    ep = replace(row, moe_tp=1, moe_ep=4)
    assert ep.expert_parallel and ep.profile == "aic-qwen3-235b-a22b-dp4-h200-fp8-ep"
