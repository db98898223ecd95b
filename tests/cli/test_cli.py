"""The `tripath` command line end to end: real scenario files, real profile, real subprocess exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tripath.cli.main import main
from tripath.core.data_dirs import PROFILES_DIR, SCENARIOS_DIR

SMALL = """
name = "small"
description = "a short Poisson run for the CLI tests"
profile = "seed-llama2-70b-a100"
[workload]
requests = 40
[workload.arrival]
kind = "poisson"
rate_per_s = 0.05
[workload.prompt_tokens]
kind = "fixed"
value = 512
[workload.output_tokens]
kind = "fixed"
value = 16
[cluster]
gpus = 1
[batching]
max_batch_size = 8
max_batched_tokens = 4096
[sla]
ttft_p99_ms = 5000.0
"""


def _write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_json_output_has_summary_counts_and_profile(tmp_path, capsys):
    scenario = _write(tmp_path, SMALL)
    assert main(["simulate", str(scenario), "--json", "--replications", "3", "--seed", "7"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"arrived": 120, "completed": 120, "rejected": 0}
    assert report["profile"]["source"] == "seed"
    assert report["profile"]["key"].startswith("a100-80gb/llama-2-70b")
    ttft = report["latency_ms"]["ttft"]
    for level in ("p50", "p90", "p99", "p999"):  # order-statistic intervals: observed values, never below 0
        est = ttft[level]
        assert 0 <= est["ci_low"] <= est["mean"]
        assert est["ci_high"] is None or est["mean"] <= est["ci_high"]
    assert ttft["p90"]["ci_high"] is not None and ttft["p99"]["ci_high"] is None  # 120 pooled: P99 needs 368
    # One request alone on the replica pays exactly the profile's prefill of 512 tokens.
    from tripath.profile.profile import resolve_profile

    floor_ms = resolve_profile("seed-llama2-70b-a100").prefill_ms(512, 0)
    assert ttft["p50"]["mean"] >= floor_ms * (1 - 1e-9)


def test_same_seed_same_json_different_seed_differs(tmp_path, capsys):
    scenario = _write(tmp_path, SMALL)
    outs = []
    for seed in (1, 1, 2):
        assert main(["simulate", str(scenario), "--json", "--replications", "2", "--seed", str(seed)]) == 0
        outs.append(json.loads(capsys.readouterr().out)["latency_ms"])
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]


def test_out_writes_records_and_summary(tmp_path, capsys):
    scenario = _write(tmp_path, SMALL)
    out = tmp_path / "run"
    assert main(["simulate", str(scenario), "--replications", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "TTFT" in text and "seed" in text
    lines = (out / "records.csv").read_text().splitlines()
    assert len(lines) == 1 + 80
    assert json.loads((out / "summary.json").read_text())["counts"]["completed"] == 80
    assert sorted(p.name for p in out.iterdir()) == ["records.csv", "summary.json"]


@pytest.mark.parametrize(
    ("mutation", "field"),
    [
        (("rate_per_s = 0.05", "rate_per_s = -1"), "workload.arrival.rate_per_s"),
        (("max_batch_size = 8", "max_batch_sise = 8"), "batching.max_batch_sise"),
        (("requests = 40", 'requests = "forty"'), "workload.requests"),
    ],
)
def test_bad_scenario_exits_2_names_file_and_field_writes_nothing(tmp_path, mutation, field):
    scenario = _write(tmp_path, SMALL.replace(*mutation))
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "tripath.cli.main", "simulate", str(scenario), "--out", str(out)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 2
    assert str(scenario) in proc.stderr and field in proc.stderr
    assert proc.stdout == ""
    assert not out.exists()


def test_malformed_profile_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    shutil.copy(PROFILES_DIR / "seed-llama2-70b-a100.json", bad)
    bad.write_text(bad.read_text().replace('"schema_version": 1', '"schema_version": 99'))
    scenario = _write(tmp_path, SMALL)
    assert main(["simulate", str(scenario), "--profile", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "schema_version" in err


def test_missing_scenario_and_unknown_profile_exit_2(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "nope.toml")]) == 2
    assert "nope.toml" in capsys.readouterr().err
    scenario = _write(tmp_path, SMALL)
    assert main(["simulate", str(scenario), "--profile", "no-such-profile"]) == 2
    assert "no-such-profile" in capsys.readouterr().err


def test_shipped_quickstart_runs_by_name(capsys):
    assert (SCENARIOS_DIR / "quickstart.toml").exists()
    assert main(["simulate", "quickstart", "--replications", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    counts = report["counts"]
    assert counts["arrived"] == counts["completed"] + counts["rejected"] > 0


def test_trace_replay_prints_its_table(capsys):
    # a trace replay has no single arrival rate: the table says where its arrivals come from instead
    assert main(["simulate", "azure-conv-replay", "--replications", "1"]) == 0
    out = capsys.readouterr().out
    assert "arrivals trace" in out and "req/s (" not in out.split("\n")[2]


def test_help_works_for_every_command():
    for argv in (["--help"], ["simulate", "--help"]):
        proc = subprocess.run([sys.executable, "-m", "tripath.cli.main", *argv], capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0 and "usage" in proc.stdout


def test_serve_replays_on_the_real_engine_and_reports_json(tmp_path, capsys):
    import torch

    before = torch.get_num_threads()
    scenario = _write(tmp_path, SMALL.replace("value = 512", "value = 24").replace("value = 16", "value = 4"))
    out = tmp_path / "engine.csv"
    try:
        code = main(["serve", str(scenario), "--preset", "tiny-mha", "--rate", "200", "--requests", "5",
                     "--threads", "1", "--out", str(out), "--json"])
    finally:
        torch.set_num_threads(before)
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"arrived": 5, "completed": 5, "rejected": 0}
    assert report["numbers_from"].startswith("measured on the real engine")
    ttft, e2e = report["latency_ms"]["ttft"], report["latency_ms"]["e2e"]
    assert 0 < ttft["p50"] <= e2e["p50"]
    assert len(out.read_text().splitlines()) == 1 + 5


@pytest.mark.parametrize("scenario", ["prefix-shared", "prefix-tiered"])
def test_serve_with_prefix_caching_reuses_the_workloads_shared_blocks(tmp_path, capsys, scenario):
    """The same requests with and without the cache; with it, prompts share blocks where the workload's keys
    repeat and the engine takes those tokens from the cache (hit rate = hit / prompt tokens admitted)."""
    import csv

    import torch

    before = torch.get_num_threads()
    path = str(SCENARIOS_DIR / "validation" / f"{scenario}.toml")
    reports, rows = {}, {}
    try:
        for flag in ("--prefix-caching", "--no-prefix-caching"):
            out = tmp_path / f"{flag}.csv"
            assert main(["serve", path, "--rate", "50", "--requests", "12", "--threads", "1", "--out", str(out),
                         "--json", flag]) == 0
            reports[flag] = json.loads(capsys.readouterr().out)
            with out.open() as f:
                rows[flag] = [(r["request_id"], r["prompt_tokens"], r["output_tokens"]) for r in csv.DictReader(f)]
    finally:
        torch.set_num_threads(before)
    assert rows["--prefix-caching"] == rows["--no-prefix-caching"]  # the same requests
    assert "prefix_cache" not in reports["--no-prefix-caching"]
    prefix = reports["--prefix-caching"]["prefix_cache"]
    assert prefix["prompt_tokens"] == sum(int(p) for _, p, _ in rows["--prefix-caching"])  # all 12 admitted
    assert 0 < prefix["hit_tokens"] < prefix["prompt_tokens"]
    assert prefix["hit_rate"] == prefix["hit_tokens"] / prefix["prompt_tokens"]
    assert "shared-prefix generator" in prefix["blocks"] and "note" not in prefix
    assert reports["--prefix-caching"]["prompts"].startswith("simulator prefix keys")
