"""`tripath validate --quick` end to end: a complete error table for every quick scenario, or an explicit reason."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tripath.cli.main import main
from tripath.fidelity.compare import LATENCY_METRICS, LEVELS, THROUGHPUT
from tripath.fidelity.validate import QUICK_REQUESTS, QUICK_SCENARIOS, ValidateConfig, run_validation

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("validate") / "latest"
    folder, _, _ = run_validation(ValidateConfig(quick=True, out=str(out), progress=False))
    return folder, json.loads((folder / "error_table.json").read_text(encoding="utf-8"))


def _ids(path: Path) -> list[tuple[str, str, str, str]]:
    with path.open(newline="") as f:
        return [(r["request_id"], r["arrival_s"], r["prompt_tokens"], r["output_tokens"]) for r in csv.DictReader(f)]


@pytest.mark.slow  # the quick validation: 42 s on a loaded 2-core machine
def test_every_quick_scenario_has_every_metric_or_a_reason(report: tuple[Path, dict]) -> None:
    folder, doc = report
    assert [s["name"] for s in doc["scenarios"]] == sorted(QUICK_SCENARIOS)
    assert doc["profile_source"] == "measured" and doc["quick"] is True
    assert doc["measured_ci"]["resamples"] == 1000 and doc["measured_ci"]["level"] == 0.95
    for sc in doc["scenarios"]:
        assert sc["requests"] == QUICK_REQUESTS
        if sc["status"] == "not run":
            assert sc["reason"] and ("engine:" in sc["reason"] or "simulator:" in sc["reason"])
            continue
        assert sc["reason"] is None
        rows = {(r["metric"], r["stat"]): r for r in sc["rows"]}
        expected = [(m, lv) for m in LATENCY_METRICS for lv in LEVELS] + [("throughput", t) for t in THROUGHPUT]
        for key in expected:
            row = rows[key]
            assert row["sim"] is not None and row["sim"] > 0, key
            assert row["real"] is not None and row["real"] > 0, key
            assert row["error"] == pytest.approx((row["sim"] - row["real"]) / row["real"])
            lo, hi = row["real_ci"]  # the measured 95 % bootstrap interval, and what it implies
            assert lo <= hi and row["within_noise"] == (lo <= row["sim"] <= hi)
            band = [(row["sim"] - hi) / row["real"], (row["sim"] - lo) / row["real"]]
            assert row["error_band"] == pytest.approx(band)
        cpu = {(r["metric"], r["stat"]) for r in sc["cpu_rows"] if r["error"] is not None}
        assert set(expected) <= cpu
        assert sc["real"]["completed"] == sc["sim"]["completed"] == QUICK_REQUESTS


@pytest.mark.slow  # the quick validation: 42 s on a loaded 2-core machine
def test_both_sides_served_the_same_requests(report: tuple[Path, dict]) -> None:
    folder, doc = report
    for sc in doc["scenarios"]:
        files = sc["records"]
        if "real" in files and "sim" in files:
            assert _ids(folder / files["real"]) == _ids(folder / files["sim"])
            assert _ids(folder / files["cpu"]) == _ids(folder / files["real"])


@pytest.mark.slow  # the quick validation: 42 s on a loaded 2-core machine
def test_figures_and_markdown_are_written(report: tuple[Path, dict]) -> None:
    folder, doc = report
    md = (folder / "error_table.md").read_text(encoding="utf-8")
    for sc in doc["scenarios"]:
        assert f"| {sc['name']} |" in md
        if sc["cdf_png"]:
            assert (folder / sc["cdf_png"]).read_bytes()[:8] == PNG_MAGIC
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".latest")]  # no temp folder left


@pytest.mark.slow  # the quick validation: 42 s on a loaded 2-core machine
def test_speculative_side_reports_acceptance_when_measured(report: tuple[Path, dict]) -> None:
    _, doc = report
    spec = next(s for s in doc["scenarios"] if s["name"] == "speculative-code")
    rows = {r["metric"]: r for r in spec["rows"] + spec["cpu_rows"] if r["stat"] == "mean"}
    if spec["real"] is not None:  # the engine served it: greedy acceptance on code is a fraction in (0, 1]
        assert 0.0 < rows["acceptance"]["real"] <= 1.0
        assert 0.0 < rows["accepted_per_round"]["real"] <= 4.0  # at most K = 4 drafts accepted per round


def test_cli_missing_folder_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "never"
    assert main(["validate", "--scenarios", str(tmp_path / "missing"), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "missing" in err and err.count("\n") == 1
    assert not out.exists()
