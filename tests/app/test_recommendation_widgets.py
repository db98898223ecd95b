"""The recommendation page's pure parts: the scenario its form makes, the TOML it exports, the memory-fit
breakdown (hand-computed from the profile's rows), and the Pareto points and front."""

from __future__ import annotations

import dataclasses
import math
import tomllib

import pytest

from tripath.app.widgets import memory_fit, pareto
from tripath.app.widgets import recommend_form as form
from tripath.planning.candidates import by_names
from tripath.planning.export.files import scenario_toml
from tripath.planning.scenario_dict import build, load_scenario_dict
from tripath.profile.profile import resolve_profile
from tripath.simulator.scenario.workload import mean_lengths

GIB = 2**30


def _default() -> tuple[dict, str, form.Choices]:
    base, source = load_scenario_dict("default")
    d = form.defaults(base)
    return base, source, form.Choices(d["profile"], d["workload"], d["qps"], d["ttft_s"], d["tpot_ms"],
                                      d["requests"])


def test_unchanged_form_is_the_default_scenario() -> None:
    base, _, choices = _default()
    assert form.scenario(base, choices) == base


def test_none_terms_are_deleted_from_the_sla_table() -> None:
    base, _, choices = _default()
    data = form.scenario(base, dataclasses.replace(choices, tpot_ms=None))
    assert data["sla"] == {"ttft_p99_ms": base["sla"]["ttft_p99_ms"]}
    data = form.scenario(base, dataclasses.replace(choices, ttft_s=1.5))
    assert data["sla"]["ttft_p99_ms"] == 1500.0


def test_distribution_workload_and_fixed_rate() -> None:
    base, _, choices = _default()
    spec = form.Lengths(100, 200, 50.0, 0.5)
    data = form.scenario(base, dataclasses.replace(choices, workload=form.DISTRIBUTION, qps=1.25,
                                                   lengths=spec))
    assert data["workload"]["prompt_tokens"] == {"kind": "uniform", "low": 100, "high": 200}
    assert data["workload"]["output_tokens"] == {"kind": "lognormal", "median": 50.0, "sigma": 0.5}
    assert data["workload"]["arrival"] == {"kind": "poisson", "rate_per_s": 1.25}


def test_a_replayed_trace_keeps_its_rows_paced_to_the_rate_and_back() -> None:
    """Replay: the trace's first N rows with their own lengths and block ids, arrivals paced to the rate; the
    defaults read it back; switching to bootstrapped lengths puts Poisson arrivals back."""
    base, source, choices = _default()
    replay = form.REPLAY + "mooncake-conversation"
    data = form.scenario(base, dataclasses.replace(choices, workload=replay, qps=0.3, requests=60))
    workload = data["workload"]
    assert workload["arrival"] == {"kind": "trace", "trace": "mooncake-conversation", "rate_per_s": 0.3}
    assert workload["prompt_tokens"] == workload["output_tokens"] == {"kind": "trace"}
    scenario = build(data, source)
    assert scenario.workload.requests == 60 and scenario.workload.arrival.rate_per_s == 0.3
    assert form.defaults(data)["workload"] == replay
    back = form.scenario(data, dataclasses.replace(choices, workload="mooncake-conversation"))
    assert back["workload"]["arrival"] == {"kind": "poisson", "rate_per_s": choices.qps}
    assert back["workload"]["prompt_tokens"]["kind"] == "empirical"


def test_toml_round_trips() -> None:
    base, _, _ = _default()
    data = {**base, "strategy": {"speculative": {"k": 4, "acceptance": {"prompt_lookup:math": 0.5}},
                                 "tiered": {}}, "tags": ["a", "b"], "flag": True}
    assert tomllib.loads(scenario_toml(data)) == data
    with pytest.raises(ValueError, match="no place in a scenario"):
        scenario_toml({"x": math.inf})


def test_memory_fit_from_the_profile_rows() -> None:
    base, source, _ = _default()
    profile = resolve_profile(base["profile"])
    names = ["baseline", "tiered", "sequence_parallel", "compression:int8"]
    lengths, rows = memory_fit.breakdown(base, source, profile, by_names(profile, names))
    by = {r["candidate"]: r for r in rows}
    prompt, output = mean_lengths(build(base, source).workload)
    assert (lengths["mean_prompt"], lengths["mean_output"]) == (prompt, output)
    assert lengths["p99_total"] > prompt + output  # long-tailed lengths: the P99 request is above the mean
    b, budget, weights = profile.model.kv_bytes_per_token, profile.kv_capacity_bytes, profile.model.weight_bytes
    mean_total = prompt + output
    base_row = by["baseline"]
    assert base_row["weights GiB"] == weights / GIB
    assert base_row["KV per mean request GiB"] == mean_total * b / GIB
    assert base_row["KV per P99 request GiB"] == lengths["p99_total"] * b / GIB
    # the simulator's batch rule: min(max_batch_size, floor(device tokens / request tokens))
    limit = base["batching"]["max_batch_size"]
    assert base_row["batch that fits (mean)"] == min(limit, math.floor((budget // b) / mean_total))
    assert base_row["batch that fits (P99)"] == min(limit, math.floor((budget // b) / lengths["p99_total"]))
    assert base_row["to host GiB (mean batch)"] is None
    # SP pools its ranks' budgets and holds the model once per rank; compression shrinks bytes per token
    sp = by["sequence_parallel"]
    assert sp["device KV budget GiB"] == 2 * budget / GIB and sp["weights GiB"] == 2 * weights / GIB
    ratio = profile.compression["int8"].kv_bytes_ratio.value
    assert by["compression:int8"]["KV MiB per token"] == math.ceil(b * ratio) / 2**20
    assert by["compression:int8"]["batch that fits (mean)"] >= base_row["batch that fits (mean)"]
    # tiering admits more than the device holds; what does not fit the device goes to host (then SSD)
    tiered = by["tiered"]
    assert tiered["batch that fits (mean)"] > base_row["batch that fits (mean)"]
    live = round(tiered["batch that fits (mean)"] * mean_total)
    off_gib = tiered["to host GiB (mean batch)"] + tiered["to SSD GiB (mean batch)"]
    assert off_gib >= (live - budget // b) * b / GIB > 0


def _summary(name: str, gpus: int | None, p99_ms: float, searched: int = 4, per: int = 2) -> dict:
    return {"id": f"{name} on p", "candidate": name, "replicas": None if gpus is None else gpus // per, "gpus": gpus,
            "gpus_per_replica": per, "searched_replicas": searched,
            "cost_usd_per_hour": None if gpus is None else gpus * 2.0, "layout": {},
            "terms": {"ttft": {"p99_ms": p99_ms}}, "binding_term": "ttft"}


def per_gpu(summary: dict) -> int:
    return int(summary["gpus_per_replica"])


def test_pareto_points_and_front() -> None:
    result = {"recommended": _summary("a", 4, 900.0),
              "runner_up": _summary("b", 6, 500.0), "closest": None,
              "others": [_summary("c", 8, 950.0), _summary("d", None, 3000.0)]}
    for summary in [result["recommended"], result["runner_up"], *result["others"]]:
        summary["layout"] = {"gpu": "a100-80gb", "tp": per_gpu(summary), "usd_per_gpu_hour": 2.0}
    pts = {p["candidate"].split(" (")[0]: p for p in pareto.points(result, "ttft", "cost")}
    assert pts["a"] == {"candidate": "a (a100-80gb TP2)", "x": 0.9, "y": 8.0, "gpus": 4, "meets": True,
                        "recommended": True}
    assert pts["d"]["gpus"] == 8 and not pts["d"]["meets"]  # a miss sits at the largest count searched
    assert [p["candidate"] for p in pareto.front(list(pts.values()))] == ["b (a100-80gb TP2)", "a (a100-80gb TP2)"]
    by_gpus = pareto.points(result, "ttft", "gpus")
    assert [p["y"] for p in by_gpus] == [4, 6, 8, 8]
    fig = pareto.figure(list(pts.values()), "ttft", "cost", 1000.0, "simulated on a 'published' profile")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "TTFT P99 (s)" and ax.get_ylabel() == "cost (USD per hour)"


def test_profiles_are_offered_measured_kernels_first():
    from tripath.app.widgets.recommend_form import ordered_profiles

    names = ["cpu-tiny", "projected-llama3-8b-h100", "published-llama2-7b-a100", "aic-llama2-7b-a100", "seed-x"]
    assert ordered_profiles(names) == ["aic-llama2-7b-a100", "published-llama2-7b-a100", "projected-llama3-8b-h100",
                                       "cpu-tiny", "seed-x"]
