"""The explorer, calibration and fidelity pages of the Streamlit app through AppTest (no browser, no server).

The pages must show what the CLI's functions compute (no simulation logic of their own), change
when their inputs change, and refuse bad uploads without changing anything. The planning pages
are in tests/app/test_planning_pages.py.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.app_driver import SEED, app, frame, num
from tests.helpers import shipped_scenario_dict
from tripath.app.widgets import display, profiles, simulation, validation
from tripath.core.data_dirs import REPO_ROOT
from tripath.profile.profile import MAX_PROFILE_BYTES, resolve_profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.summary import summary


def _p99(at: AppTest, metric: str) -> float:
    table = frame(at, "percentile")
    name = simulation.METRIC_NAMES[metric]
    return num(table[(table["metric"] == name) & (table["percentile"] == "P99")]["mean (ms)"].iloc[0])


def _explore(at: AppTest, rate: float, requests: int = 80, replications: int = 2, interval_s: float = 0.0) -> AppTest:
    """Run the explorer on quickstart at ``rate``; ``interval_s`` > 0 asks for the simulator's time series."""
    at.number_input(key="explorer_replications").set_value(replications)
    at.number_input(key="interval").set_value(interval_s)
    at.number_input(key="quickstart.requests").set_value(requests)
    at.radio(key="quickstart.rate_mode").set_value("rate_per_s").run()
    at.number_input(key="quickstart.rate_per_s").set_value(rate)
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


# ---- page 1: scenario explorer


def test_explorer_shows_what_the_cli_functions_compute() -> None:
    at = _explore(app("explorer", **SEED), rate=0.1, interval_s=20.0)
    # the same scenario built by hand from the shipped file, simulated by the CLI's functions
    data = shipped_scenario_dict("quickstart")
    data.pop("profile")
    data["workload"]["requests"] = 80
    data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 0.1}
    report = summary(simulate(scenario_from_dict(data), resolve_profile("seed-llama2-70b-a100"), seed=0,
                              replications=2))
    table = frame(at, "percentile")
    assert len(table) == 4 * 4
    for metric in ("ttft", "tpot", "e2e", "queueing"):
        for level, label in (("p50", "P50"), ("p99", "P99"), ("p999", "P99.9")):
            row = table[(table["metric"] == simulation.METRIC_NAMES[metric]) & (table["percentile"] == label)].iloc[0]
            expected = report["latency_ms"][metric][level]
            assert num(row["mean (ms)"]) == pytest.approx(expected["mean"], rel=1e-3, abs=0.06)  # shown to 0.1 ms
            low, high, why = display.shown_interval(expected)  # withheld where it does not hold the mean
            for column, end in (("95% low (ms)", low), ("95% high (ms)", high)):
                if end is None:
                    assert row[column] == display.DASH and row["note"] == why
                else:
                    assert num(row[column]) == pytest.approx(end, rel=1e-3, abs=0.06)
    arrived = next(m for m in at.metric if m.label == "arrived")
    assert arrived.value == "160"  # 80 requests x 2 replications
    # where the numbers come from, in words next to them
    assert any("simulated (SimPy) on cost models of kind 'seed'" in c.value for c in at.caption)
    assert {d.label for d in at.download_button} >= {"records (CSV)", "latency CDFs (PNG)", "summary (JSON)",
                                                     "time series (CSV)", "requests (PNG)"}


def test_explorer_raising_the_rate_raises_p99() -> None:
    """Same seed, same lengths, arrivals compressed in time: queueing can only grow (and does)."""
    at = _explore(app("explorer", **SEED), rate=0.05)
    low_ttft, low_e2e = _p99(at, "ttft"), _p99(at, "e2e")
    at.number_input(key="quickstart.rate_per_s").set_value(0.4)  # above the ~0.26 req/s saturation estimate
    at.button(key="run").click().run()
    assert not at.exception and not at.error
    assert not at.warning or all("inputs changed" not in w.value for w in at.warning)
    assert _p99(at, "ttft") > 2 * low_ttft
    assert _p99(at, "e2e") > low_e2e


def test_explorer_reports_bad_input_and_keeps_the_last_result() -> None:
    at = _explore(app("explorer", **SEED), rate=0.1)
    before = frame(at, "percentile").copy()
    at.selectbox(key="quickstart.prompt.kind").set_value("uniform").run()
    at.number_input(key="quickstart.prompt.low").set_value(5000)
    at.number_input(key="quickstart.prompt.high").set_value(100)
    at.button(key="run").click().run()
    assert not at.exception
    assert any("workload.prompt_tokens.high" in e.value for e in at.error), [e.value for e in at.error]
    # the previous result stays, flagged as out of date: nothing half-updated
    assert any("inputs changed" in w.value for w in at.warning)
    pd.testing.assert_frame_equal(frame(at, "percentile"), before)
    at.text_input(key="quickstart.tasks").set_value("dialogue").run()
    assert any("NAME:WEIGHT" in e.value for e in at.error)


# ---- page 5: calibration


def _coefficients(at: AppTest) -> pd.DataFrame:
    return frame(at, "coefficient")


def test_calibration_other_profile_other_coefficients() -> None:
    at = app("explorer", **SEED)
    at.switch_page("tripath/app/pages/calibration.py").run()
    # the profile chosen on the explorer (its default) is the chosen profile here too
    assert at.selectbox(key="calibration_profile").value == "seed-llama2-70b-a100"
    at.selectbox(key="calibration_profile").set_value("cpu-tiny").run()
    tiny = _coefficients(at)
    profile = resolve_profile("cpu-tiny")
    d0 = tiny[(tiny["cost"] == "decode") & (tiny["coefficient"] == "d0")].iloc[0]
    assert d0["value"] == profile.costs["decode"].coefficients["d0"].value
    assert d0["source"] == "fitted"
    at.selectbox(key="calibration_profile").set_value("seed-llama2-70b-a100").run()
    seed = _coefficients(at)
    seed_d0 = seed[(seed["cost"] == "decode") & (seed["coefficient"] == "d0")].iloc[0]
    assert seed_d0["value"] == resolve_profile("seed-llama2-70b-a100").costs["decode"].coefficients["d0"].value
    assert seed_d0["value"] != d0["value"]
    assert any("seed" in m.value and "not measured" in m.value for m in at.markdown)  # the kind, in words
    # the raw samples the seed fits used: the seed tables' rows, every one of them
    raw = (REPO_ROOT / "data/profiles/seed-llama2-70b-a100.samples.csv").read_text().splitlines()
    assert len(frame(at, "used_by")) == len(raw) - 1
    # compare: B / A is the ratio of the two profiles' own coefficients
    at.selectbox(key="compare_with").set_value("cpu-tiny").run()
    table = frame(at, "B / A")
    row = table[(table["cost"] == "decode") & (table["coefficient"] == "d_ctx")].iloc[0]
    a = resolve_profile("seed-llama2-70b-a100").costs["decode"].coefficients["d_ctx"].value
    b = profile.costs["decode"].coefficients["d_ctx"].value
    assert num(row["B / A"]) == pytest.approx(b / a, rel=1e-3)


def _bad_uploads() -> list[tuple[str, bytes, str]]:
    good = json.loads((REPO_ROOT / "data/profiles/cpu-tiny.json").read_text())
    negative = copy.deepcopy(good)
    negative["costs"]["decode"]["coefficients"]["d_ctx"]["value"] = -1.0
    big = json.dumps({**good, "notes": ["x" * (MAX_PROFILE_BYTES + 10)]}).encode()
    return [("broken.json", b'{"schema_version": 1, "key": ', "line 1"),
            ("wrong-schema.json", json.dumps({"schema_version": 7}).encode(), "schema_version"),
            ("negative.json", json.dumps(negative).encode(), "costs.decode.coefficients.d_ctx"),
            ("huge.json", big, "limit")]


@pytest.mark.parametrize("filename, content, expected", _bad_uploads(), ids=lambda v: str(v)[:16])
def test_calibration_bad_upload_shows_an_error_and_changes_nothing(filename: str, content: bytes,
                                                                    expected: str) -> None:
    at = app("calibration")
    at.selectbox(key="calibration_profile").set_value("published-llama2-7b-a100").run()
    options = list(at.selectbox(key="calibration_profile").options)
    table = _coefficients(at).copy()
    at.file_uploader(key="profile_upload").set_value((filename, content, "application/json")).run()
    assert not at.exception
    assert any(expected in e.value and "nothing changed" in e.value for e in at.error), [e.value for e in at.error]
    assert list(at.selectbox(key="calibration_profile").options) == options
    assert at.selectbox(key="calibration_profile").value == "published-llama2-7b-a100"
    pd.testing.assert_frame_equal(_coefficients(at), table)
    assert not at.session_state[profiles.UPLOADED]


def test_calibration_good_upload_is_selected_and_offered_to_the_explorer() -> None:
    at = app("calibration")
    text = (REPO_ROOT / "data/profiles/cpu-tiny.json").read_bytes()
    at.file_uploader(key="profile_upload").set_value(("mine.json", text, "application/json")).run()
    assert not at.exception and not at.error
    assert at.selectbox(key="calibration_profile").value == "uploaded: mine.json"
    shipped = app("calibration")
    shipped.selectbox(key="calibration_profile").set_value("cpu-tiny").run()
    pd.testing.assert_frame_equal(_coefficients(at), _coefficients(shipped))  # same as shipped cpu-tiny
    at.switch_page("tripath/app/pages/explorer.py").run()
    assert "uploaded: mine.json" in at.selectbox(key="explorer_profile").options


# ---- page 6: fidelity


def test_fidelity_without_a_report_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(validation, "SEARCH_ROOTS", (tmp_path / "validation",))
    at = app("fidelity")
    assert any("No validation run yet" in i.value for i in at.info)
    assert not at.dataframe


def test_fidelity_shows_the_latest_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A report written by tripath.fidelity.report.write_report (issue 10's writer), read back by the page."""
    from tripath.fidelity.compare import row
    from tripath.fidelity.report import ScenarioResult, write_report

    meta = {"numbers_from": "real_engine on this CPU (test)", "profile": "cpu-tiny", "profile_source": "measured",
            "seed": 0, "quick": True, "created_utc": "2026-11-29T19:00:00Z"}
    import dataclasses

    # the first row carries a measured 95 % interval that holds the simulated value; the second has none
    rows = [dataclasses.replace(row("ttft", "p50", "ms", 110.0, 100.0), real_ci=(90.0, 115.0)),
            row("ttft", "p99", "ms", 80.0, 100.0)]
    results = [ScenarioResult("steady", "a steady load", "x.toml", 10, rows=rows),
               ScenarioResult("spec", "speculative", "y.toml", 10, reason="engine: not available")]
    write_report(tmp_path / "validation", meta, results)
    monkeypatch.setattr(validation, "SEARCH_ROOTS", (tmp_path / "validation",))
    at = app("fidelity")
    assert not at.info
    errors = frame(at, "within first bar")
    assert list(errors["quantity"]) == ["ttft p50", "ttft p99"]
    # (sim - real) / real, in words: no bare negative number on the page
    assert errors["simulated vs measured"].tolist() == ["10.0 % above measured (pessimistic)",
                                                        "20.0 % below measured (optimistic)"]
    assert errors["within first bar"].tolist() == ["yes", "no"]  # 10 % at P50 is inside, 20 % at P99 is not
    assert errors["within noise"].tolist() == ["yes", display.DASH]  # 110 lies in [90, 115]; no interval: unknown
    assert errors["measured 95% CI"].tolist() == ["[90, 115]", display.DASH]
    assert not display.has_missing(errors)
    status = frame(at, "status")
    assert status.set_index("scenario").loc["spec", "reason"] == "engine: not available"
    assert any("cpu-tiny" in m.value and "measured" in m.value for m in at.markdown)
    assert status.set_index("scenario").loc["steady", "worst error, in words"] == "20.0 % below measured (optimistic)"
    assert math.isclose(validation.status_rows(validation.read_report(validation.report_folders()[0]))[0]
                        ["worst error"], -0.2)


def test_explorer_strategy_tables_reach_the_simulator() -> None:
    """Ticking a path writes its [strategy.*] table (the agreed format) and the result is runner.simulate's."""
    at = _explore(app("explorer", **SEED), rate=0.1, requests=60)
    baseline_tpot = _p99(at, "tpot")
    assert at.checkbox(key="quickstart.compression").disabled  # the seed profile has no compression modes
    at.checkbox(key="quickstart.spec").check().run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    profile = resolve_profile("seed-llama2-70b-a100")
    data = shipped_scenario_dict("quickstart")
    data.pop("profile")
    data["workload"]["requests"] = 60
    data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 0.1}
    data["strategy"] = {"speculative": {"k": profile.speculative.k, "adaptive": False, "proposer": "draft"}}
    expected = summary(simulate(scenario_from_dict(data), profile, seed=0, replications=2))
    shown = at.session_state["explorer_result"]["outcome"].report
    assert shown["latency_ms"]["tpot"]["p99"]["mean"] == pytest.approx(expected["latency_ms"]["tpot"]["p99"]["mean"],
                                                                      rel=1e-12)
    assert _p99(at, "tpot") == pytest.approx(expected["latency_ms"]["tpot"]["p99"]["mean"], abs=0.06)  # to 0.1 ms
    assert _p99(at, "tpot") != baseline_tpot


def test_tripath_app_subcommand_is_registered() -> None:
    from tripath.cli.main import build_parser

    args = build_parser().parse_args(["app", "--port", "8600"])
    assert args.port == 8600 and args.address == "localhost"
    assert (REPO_ROOT / "app.py").is_file()  # what `tripath app` serves (tests/app/test_browser.py runs it for real)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["app", "--port", "0"])
