"""Mixture-of-experts and FP8 models through recommend: every model the catalogue ships answers, the search covers
both expert layouts of a model (experts sharded by TP, or by expert parallelism), and the exported command serves
the layout and weights that were simulated."""

from __future__ import annotations

import pytest

from tripath.planning.export.files import recommended_sglang, recommended_suggestion
from tripath.planning.recommend import SearchOptions, recommend
from tripath.profile.catalog import layouts
from tripath.profile.profile import resolve_profile

# one shipped profile per model the issue names (H100 / H200), and the repository each must be served from
ANSWERS = {
    "aic-mixtral-8x7b-tp4-h100": "mistralai/Mixtral-8x7B-v0.1",
    "aic-qwen3-235b-a22b-tp8-h200-fp8-ep": "Qwen/Qwen3-235B-A22B-FP8",
    "aic-deepseek-v3-tp8-h200-fp8": "deepseek-ai/DeepSeek-V3",
    "aic-gpt-oss-120b-tp8-h100-fp4": "openai/gpt-oss-120b",
    "aic-llama3.1-70b-tp4-h100-fp8": "meta-llama/Llama-3.1-70B",
    # attention data parallel: 8 ranks of one GPU, the experts by EP over all 8
    "aic-qwen3-235b-a22b-dp8-h200-fp8-ep": "Qwen/Qwen3-235B-A22B-FP8",
    "aic-deepseek-v3-dp8-h200-fp8-ep": "deepseek-ai/DeepSeek-V3",
}
FAST = SearchOptions(replications=2, max_replicas=2, with_robustness=False, candidate_names=["baseline"],
                     batch_sizes=())


def chat(requests: int = 60) -> dict:
    """Short fixed-length chat requests that fit every one of these models' context windows."""
    return {"name": "moe-small", "workload": {"requests": requests, "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                                              "tasks": {"dialogue": 1.0},
                                              "prompt_tokens": {"kind": "fixed", "value": 1024},
                                              "output_tokens": {"kind": "fixed", "value": 64}},
            "cluster": {"gpus": 8}, "batching": {"policy": "chunked", "max_batch_size": 64,
                                                 "max_batched_tokens": 8192},
            "sla": {"ttft_p99_ms": 5000.0, "tpot_p99_ms": 200.0}}


def test_a_moe_family_holds_both_expert_layouts_of_each_gpu_and_tp():
    family = layouts("aic-qwen3-235b-a22b-tp8-h200-fp8-ep")
    keys = [resolve_profile(name).key for name in family]
    assert {k.hardware for k in keys} == {"h100-sxm", "h200"}
    for name, key in zip(family, keys, strict=True):
        assert key.expert_parallel == name.endswith("-ep") and key.dtype == "fp8"
    shapes = {(k.hardware, k.tp) for k in keys}
    both = {(k.hardware, k.tp) for k in keys if k.expert_parallel} & {(k.hardware, k.tp) for k in keys
                                                                       if not k.expert_parallel}
    assert both and both <= shapes


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_every_named_model_gets_a_sized_answer_and_its_serving_command(name):
    rec = recommend(chat(), None, [name], 1.0, options=FAST).to_dict()
    assert rec["meets_sla"], rec["closest"]
    summary = rec["recommended"]
    key = resolve_profile(name).key
    assert summary["layout"]["profile"] == name and summary["replicas"] >= 1
    assert summary["layout"]["expert_parallel"] == key.expert_parallel and summary["layout"]["weights"] == key.dtype
    assert summary["layout"]["attention_dp"] == key.attention_dp
    assert summary["gpus"] == summary["replicas"] * key.gpus  # a replica is tp x attention_dp GPUs
    vllm = recommended_suggestion(rec, resolve_profile(name), chat())
    sglang = recommended_sglang(rec, resolve_profile(name), chat())
    assert vllm is not None and sglang is not None
    assert vllm.model == ANSWERS[name] == sglang.model
    flags = {s.name: s.value for s in vllm.settings}
    assert ("--enable-expert-parallel" in flags) == key.expert_parallel
    assert ("--ep-size" in {s.name for s in sglang.settings}) == key.expert_parallel
    assert ("--quantization" in flags) == (name == "aic-llama3.1-70b-tp4-h100-fp8")


def test_the_search_compares_the_expert_layouts_and_reports_each():
    family = layouts("aic-qwen3-235b-a22b-tp4-h200-fp8")
    rec = recommend(chat(), None, family, 1.0, options=FAST).to_dict()
    searched = {(la["gpu"], la["tp"], la["expert_parallel"]) for la in rec["layouts"]}
    assert any(ep for *_, ep in searched) and any(not ep for *_, ep in searched)
    rows = [rec["recommended"], rec["runner_up"], *rec["others"]]
    assert {r["layout"]["expert_parallel"] for r in rows if r is not None} == {False, True}


def test_sequence_parallelism_is_not_applicable_on_a_moe_profile_and_says_why():
    from tripath.planning.candidates import by_names

    profile = resolve_profile("aic-mixtral-8x7b-tp4-h100")
    why = by_names(profile, ["sequence_parallel"])[0].applicability(profile, chat())
    assert why is not None and "mixture-of-experts profile has no sequence-parallel section" in why
