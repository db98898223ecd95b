"""The planning pages of the Streamlit app (decision matrix, capacity planner, SLA what-if) through AppTest.

Each page must show what tripath/planning/'s function computes for the same inputs (small cases; the
on-disk result cache is switched off so every number is computed in the test), and change when
its inputs change.
"""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.app_driver import SEED, app, frame, num
from tripath.app.widgets import display
from tripath.profile.profile import resolve_profile


def test_matrix_page_shows_planning_decision_matrix() -> None:
    from tripath.planning.matrix import decision_matrix

    at = app("matrix", **SEED)
    at.number_input(key="matrix_requests").set_value(20)
    at.checkbox(key="matrix.cache").uncheck()
    at.button(key="matrix_run").click().run()
    assert not at.exception and not at.error
    expected = decision_matrix(resolve_profile("seed-llama2-70b-a100"), requests=20).to_dict()
    summary_table = frame(at, "seed recommends")
    assert list(summary_table["cell"]) == [c["scenario"] for c in expected["cells"]]
    assert list(summary_table["recommended"]) == [c["recommended"] or "none meets the SLA" for c in expected["cells"]]
    assert list(summary_table["runner-up"]) == [c["runner_up"] or f"{display.DASH} no second candidate meets"
                                                for c in expected["cells"]]
    assert any(d.label == "heatmap (PNG)" for d in at.download_button)
    # selecting a cell shows that cell's numbers
    for cell in expected["cells"][:3]:
        at.selectbox(key="matrix_cell").set_value(cell["scenario"]).run()
        table = frame(at, "not applicable / refused").set_index("candidate")
        for row in cell["candidates"]:
            if "not_applicable" in row:
                assert table.loc[row["candidate"], "not applicable / refused"] == row["not_applicable"]
            elif row["p99_ms"]["tpot"]["mean"] is not None:
                assert num(table.loc[row["candidate"], "TPOT P99 (ms)"]) == pytest.approx(
                    row["p99_ms"]["tpot"]["mean"], rel=1e-3, abs=0.06)
            assert table.loc[row["candidate"], "verdict"] == display.verdict(row)
        assert not display.has_missing(table)
        assert next(m for m in at.metric if m.label == "runner-up").value == (cell["runner_up"] or
                                                                             f"{display.DASH} none")


def _capacity(at: AppTest, qps: float) -> pd.DataFrame:
    at.number_input(key="capacity_qps").set_value(qps)
    at.button(key="capacity_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return frame(at, "GPUs per replica").set_index("candidate")


def test_capacity_page_more_load_more_gpus() -> None:
    from tripath.planning.capacity import plan
    from tripath.planning.scenario_dict import load_scenario_dict

    at = app("capacity", **SEED)
    at.number_input(key="capacity_requests").set_value(40)
    at.number_input(key="capacity_sla_ttft").set_value(5000.0)
    at.number_input(key="capacity_sla_tpot").set_value(200.0)
    at.number_input(key="capacity_sla_e2e").set_value(0.0)
    at.number_input(key="capacity_price").set_value(2.0)
    at.number_input(key="capacity_max_replicas").set_value(16)
    at.multiselect(key="capacity_candidates").set_value(["baseline", "speculative"])
    at.checkbox(key="capacity.cache").uncheck()
    low = _capacity(at, 0.05)
    high = _capacity(at, 0.5)
    assert num(high.loc["baseline", "GPUs"]) > num(low.loc["baseline", "GPUs"])
    data, source = load_scenario_dict("quickstart")
    data.pop("profile")
    data["workload"]["requests"] = 40
    data["sla"].pop("e2e_p99_ms")  # 0 on the page = no end-to-end term
    expected = plan(data, source, resolve_profile("seed-llama2-70b-a100"), 0.5,
                    {"ttft": 5000.0, "tpot": 200.0, "e2e": None}, 2.0, ["baseline", "speculative"], 0, 1, 16).to_dict()
    for row in expected["candidates"]:
        name = row["candidate"]["name"]
        if row.get("gpus") is None:
            assert high.loc[name, "GPUs"] == display.DASH and high.loc[name, "not applicable"] != display.DASH
            continue
        assert num(high.loc[name, "GPUs"]) == row["gpus"]
        assert num(high.loc[name, "TPOT P99 (ms)"]) == pytest.approx(row["outcome"]["p99_ms"]["tpot"]["mean"],
                                                                     rel=1e-3, abs=0.06)
        assert num(high.loc[name, "USD per hour"]) == pytest.approx(row["gpus"] * 2.0)  # GPUs x the user's price
    assert next(m for m in at.metric if "recommended" in m.label).value == (expected["recommended"] or
                                                                           "none meets the SLA")
    assert any(d.label == "goodput curves (PNG)" for d in at.download_button)


def test_whatif_sla_sweep_changes_attainment_not_latency() -> None:
    """Sweeping an SLA threshold re-judges the same simulation: equal P99s, attainment non-decreasing."""
    at = app("whatif", **SEED)
    at.number_input(key="whatif_requests").set_value(40)
    at.checkbox(key="whatif.cache").uncheck()
    at.selectbox(key="whatif_field").set_value("TTFT P99 target (ms)").run()
    at.text_input(key="whatif_values").set_value("500, 5000, 1000000")
    at.button(key="whatif_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    table = frame(at, "TTFT P99 target (ms)")
    assert list(table["TTFT P99 target (ms)"]) == [500, 5000, 1000000]
    assert table["TTFT P99 (ms)"].nunique() == 1 and table["end-to-end P99 (ms)"].nunique() == 1
    shares = [num(v) for v in table["requests meeting every term"]]
    assert shares == sorted(shares) and shares[0] < shares[-1]


def test_whatif_load_step_fixed_and_adaptive() -> None:
    from tripath.planning.scenario_dict import load_scenario_dict
    from tripath.planning.whatif import load_step

    at = app("whatif", **SEED)
    at.number_input(key="whatif_requests").set_value(60)
    at.checkbox(key="whatif.cache").uncheck()
    at.number_input(key="step_factor").set_value(3.0)
    at.number_input(key="step_at").set_value(150.0)
    at.number_input(key="step_window").set_value(50.0)
    at.button(key="step_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    table = frame(at, "policy")
    data, source = load_scenario_dict("quickstart")
    data.pop("profile")
    data["workload"]["requests"] = 60
    expected = load_step(data, source, resolve_profile("seed-llama2-70b-a100"), 3.0, 150.0, 50.0, 0, 2).to_dict()
    for label in ("fixed", "adaptive"):
        mine = table[table["policy"] == label]
        windows = expected["series"][label]["windows"]
        assert list(mine["arrived"]) == [w["arrived"] for w in windows]
        assert [num(v) for v in mine["TTFT P99 (ms)"]] == pytest.approx(
            [w["ttft_p99_ms"]["mean"] if w["ttft_p99_ms"]["mean"] is not None else float("nan") for w in windows],
            rel=1e-3, abs=0.06, nan_ok=True)
    assert any(d.label == "transient (PNG)" for d in at.download_button)


def test_matrix_page_on_a_tp2_profile_sizes_the_cells_without_an_error() -> None:
    at = app("matrix")
    at.selectbox(key="matrix_profile").set_value("published-llama2-70b-tp2-a100").run()
    at.number_input(key="matrix_requests").set_value(10)
    at.checkbox(key="matrix.cache").uncheck()
    at.button(key="matrix_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    summary = frame(at, "scenario's GPUs").set_index("cell")
    assert num(summary.loc["dialogue-medium", "GPUs"]) == 2
    assert num(summary.loc["dialogue-medium", "scenario's GPUs"]) == 1
    assert num(summary.loc["fixed-length-multi-gpu", "GPUs"]) == 4  # the row's 2 GPUs x TP2 (matrix_sizing)
    assert any(i.value.startswith("Sized to 2 GPUs") for i in at.info)  # the selected (first) cell says so
    table = frame(at, "not applicable / refused").set_index("candidate")
    assert table.loc["tiered", "note"].startswith("tiered never engaged")


def test_matrix_page_shows_a_failed_run_as_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import tripath.planning.matrix
    from tripath.core.errors import InputError

    def refuse(*args, **kwargs):
        raise InputError("cell.toml", "cluster.gpus", "refused for the test")

    monkeypatch.setattr(tripath.planning.matrix, "decision_matrix", refuse)
    at = app("matrix")
    at.checkbox(key="matrix.cache").uncheck()
    at.button(key="matrix_run").click().run()
    assert not at.exception
    assert [e.value for e in at.error] == ["cell.toml: cluster.gpus: refused for the test"]


def test_capacity_page_on_a_tp2_profile_with_a_one_gpu_scenario() -> None:
    at = app("capacity")
    at.selectbox(key="capacity_scenario").set_value("dialogue-medium").run()
    at.selectbox(key="capacity_profile").set_value("published-llama2-70b-tp2-a100").run()
    at.number_input(key="capacity_requests").set_value(10)
    at.number_input(key="capacity_max_replicas").set_value(2)
    at.number_input(key="capacity_sla_ttft").set_value(100_000.0)  # loose: one replica meets it
    at.number_input(key="capacity_sla_tpot").set_value(200.0)
    at.multiselect(key="capacity_candidates").set_value(["baseline"])
    at.checkbox(key="capacity.cache").uncheck()
    table = _capacity(at, 0.005)
    assert num(table.loc["baseline", "GPUs per replica"]) == 2 and num(table.loc["baseline", "GPUs"]) == 2
    assert any("cluster.gpus (1) is not used" in c.value for c in at.caption)
