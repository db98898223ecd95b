"""The summary names the paths on, their resolved parameters and the source kinds of the numbers they read."""

from __future__ import annotations

import json

from tests.helpers import SEED, TINY, shipped_scenario_dict
from tripath.simulator.paths.provenance import one_line, strategies
from tripath.simulator.report import format_summary
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import load_scenario, scenario_from_dict
from tripath.simulator.summary import _json_ready, summary


def _scenario(strategy: dict, requests: int = 20, profile: str = "seed-llama2-70b-a100"):
    data = shipped_scenario_dict("quickstart")
    data["profile"] = profile
    data["cluster"] = {"gpus": 2}
    data["workload"]["requests"] = requests
    data["strategy"] = strategy
    return scenario_from_dict(data)


def test_baseline_names_no_path():
    report = strategies(load_scenario("quickstart"), SEED)
    assert report["on"] == [] and report["sources"] == []
    assert one_line(report) == "none (baseline)"


def test_speculative_defaults_from_the_profile_and_acceptance_sources():
    report = strategies(_scenario({"speculative": {}}), SEED)
    spec = report["speculative"]
    assert spec["parameters"]["k"] == SEED.speculative.k == 5
    assert spec["parameters"]["k_from"] == "profile speculative.k"
    fields = {n["field"]: n for n in spec["numbers_from"]}
    assert fields["speculative.cost_ratio"]["value"] == SEED.speculative.cost_ratio.value
    assert fields["speculative.cost_ratio"]["source"] == "fitted"
    assert fields["acceptance.dialogue"] == {"field": "acceptance.dialogue", "value": 0.75, "unit": "acceptance rate",
                                             "source": "seed", "k": 5}
    assert report["sources"] == sorted({n["source"] for n in spec["numbers_from"]})


def test_tiered_capacities_resolved_and_overlap_is_an_assumption():
    report = strategies(_scenario({"tiered": {"host_capacity_gib": 64.0, "chunk_tokens": 128}}), SEED)
    p = report["tiered"]["parameters"]
    assert (p["host_capacity_gib"], p["host_from"]) == (64.0, "scenario")
    assert p["ssd_capacity_gib"] == SEED.hardware.ssd_bytes / 2**30 and p["ssd_from"] == "profile hardware.ssd_bytes"
    assert p["overlap"] == 0.0 and "assumption" in p["overlap_from"]
    links = {n["field"].split(".")[1] for n in report["tiered"]["numbers_from"]}
    assert links == {"device_host", "host_ssd"}


def test_sp_and_compression_entries():
    report = strategies(_scenario({"sequence_parallel": {"degree": 2}, "compression": {"mode": "int8"}},
                                  profile="cpu-tiny"), TINY)
    assert report["on"] == ["sequence_parallel", "compression"]
    assert report["sequence_parallel"]["parameters"] == {"degree": 2, "gpus_per_replica": 2}
    rows = report["sequence_parallel"]["numbers_from"][0]
    assert rows["source"] == TINY.sequence_parallel[2].source and rows["value"] == len(TINY.sequence_parallel[2].rows)
    comp = {n["field"]: n for n in report["compression"]["numbers_from"]}
    ratio = comp["compression.int8.kv_bytes_ratio"]
    assert (ratio["value"], ratio["source"]) == (TINY.compression["int8"].kv_bytes_ratio.value, "measured")
    assert one_line(report).startswith("sequence_parallel (degree 2, 2 GPUs per replica) + compression (mode int8)")


def test_summary_json_and_text_carry_paths_loop_and_sp_extrapolations():
    scenario = _scenario({"sequence_parallel": {"degree": 2}})
    data = summary(simulate(scenario, SEED, seed=0))
    json.dumps(_json_ready(data), allow_nan=False)
    assert data["strategies"]["on"] == ["sequence_parallel"]
    ext = data["extrapolations"]
    # every prompt is one prefill chunk priced on the SP rows
    assert ext["sp_prefill_queries"] == data["counts"]["completed"] == 20
    assert 0 <= ext["sp_prefill_outside_domain"] <= 20
    text = format_summary(data)
    assert "paths    sequence_parallel (degree 2, 2 GPUs per replica)" in text
    assert "loop     replica: compression / sequence parallelism only" in text
