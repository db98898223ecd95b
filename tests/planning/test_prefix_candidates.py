"""Prefix caching as a planning candidate: applicable only where the workload has prefix structure."""

from __future__ import annotations

import tomllib

from tests.helpers import SEED
from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.planning.candidates import NO_PREFIX_STRUCTURE, by_names
from tripath.planning.stack import stack
from tripath.planning.sweep import make_job, run_job


def _shipped(name: str) -> dict:
    with open(SCENARIOS_DIR / f"{name}.toml", "rb") as fh:
        return tomllib.load(fh)


def test_not_applicable_without_prefix_structure_so_the_default_is_unchanged() -> None:
    for name in ("default", "quickstart", "azure-conv-replay", "mooncake-long-context"):
        for candidate in by_names(SEED, ["prefix_cache", "prefix_cache+tiered"]):
            assert NO_PREFIX_STRUCTURE in (candidate.applicability(SEED, _shipped(name)) or ""), name
            # plan and recommend size by profile_support (any cluster size): the same verdict there
            assert NO_PREFIX_STRUCTURE in (candidate.profile_support(SEED, _shipped(name)) or ""), name


def test_applicable_on_a_mooncake_replay_and_on_a_prefix_table() -> None:
    prefix = by_names(SEED, ["prefix_cache"])[0]
    assert prefix.applicability(SEED, _shipped("mooncake-prefix-replay")) is None
    data = _shipped("quickstart")
    data["workload"]["prefix"] = {"kind": "share", "share": {"dialogue": 0.5}}
    assert prefix.applicability(SEED, data) is None
    data["batching"] = {"preemption": "swap"}
    assert "preemption 'none' only" in prefix.applicability(SEED, data)


def _chat() -> dict:
    """Short multi-turn chats sharing two system prompts, on the seed profile at a moderate load."""
    return {"name": "chat", "workload": {"requests": 48, "arrival": {"kind": "poisson", "rate_per_s": 0.1},
                                         "tasks": {"dialogue": 1.0},
                                         "prompt_tokens": {"kind": "fixed", "value": 200},
                                         "output_tokens": {"kind": "fixed", "value": 16},
                                         "prefix": {"kind": "shared", "system_prompts": 2, "system_tokens": 2048,
                                                    "users_per_prompt": 4, "turns": 3}},
            "cluster": {"gpus": 1}, "batching": {"max_batch_size": 4}, "sla": {"ttft_p99_ms": 5000.0}}


def test_the_candidate_saves_prefill_and_the_sweep_reports_its_hit_rate() -> None:
    data = _chat()
    prefix = by_names(SEED, ["prefix_cache"])[0]
    on = run_job(make_job(prefix.apply(data), None, SEED))
    off = run_job(make_job(data, None, SEED))
    assert "prefix_cache" not in off
    assert on["prefix_cache"]["hit_rate_tokens"] > 0.5  # 2,048 of each ~2,400-token prompt is a system prompt
    assert on["p99_ms"]["ttft"]["mean"] < off["p99_ms"]["ttft"]["mean"]


def test_stack_reports_prefix_couplings_with_speculation() -> None:
    result = stack(_chat(), None, SEED, replications=1)
    assert "prefix_cache" in result.paths
    pairs = {(c["path"], c["after"]) for c in result.couplings}
    assert {("prefix_cache", "speculative"), ("speculative", "prefix_cache"), ("prefix_cache", "tiered")} <= pairs
    ttft = {c["after"]: c for c in result.couplings if c["path"] == "prefix_cache" and c["term"] == "ttft"}
    assert ttft["speculative"]["gain_alone_ms"] > 0  # prefix caching alone cuts TTFT on shared system prompts
