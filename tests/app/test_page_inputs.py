"""The app pages' inputs and what they mean, through AppTest: the load in req/s, SLA terms, inputs that hold
across pages, plain labels, intervals, the matrix's readable view, the load step's default, the capacity
planner's default run and its answer when nothing meets the SLA.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.app_driver import SEED, app, frame, num
from tests.helpers import shipped_scenario_dict
from tripath.app.widgets import display, state
from tripath.profile.profile import resolve_profile
from tripath.simulator.runner import arrival_rate, cluster_config
from tripath.simulator.scenario.scenario import scenario_from_dict

SEED_PROFILE = "seed-llama2-70b-a100"


def _run_explorer(at: AppTest, requests: int = 40) -> dict:
    at.number_input(key="explorer_replications").set_value(2)
    at.number_input(key="interval").set_value(0.0)
    at.number_input(key="quickstart.requests").set_value(requests)
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at.session_state["explorer_result"]["outcome"].report


def _rate(data: dict, profile_name: str = SEED_PROFILE) -> float:
    """The simulator's own arrival rate for a scenario dict (load_fraction against its own paths' saturation)."""
    profile = resolve_profile(profile_name)
    scenario = scenario_from_dict(data)
    return arrival_rate(scenario, profile, cluster_config(scenario, profile)[0])[0]


# ---- 1. the load in req/s does not move when a path is switched on


def test_load_fraction_is_of_the_baselines_saturation_so_toggling_a_path_keeps_the_rate() -> None:
    at = app("explorer", **SEED)
    assert at.radio(key="quickstart.rate_mode").value == "load_fraction"  # quickstart gives 0.6 of saturation
    baseline = _run_explorer(at)
    data = shipped_scenario_dict("quickstart")
    data.pop("profile")
    expected = _rate(data)  # 0.6 x the baseline's saturation, as tripath simulate computes it
    assert baseline["arrival_rate_per_s"]["value"] == pytest.approx(expected, rel=1e-12)
    note = next(c.value for c in at.caption if c.value.startswith("Load:"))
    assert f"{expected:.4g} req/s = 0.6 of the baseline's saturation {expected / 0.6:.4g} req/s" in note
    at.checkbox(key="quickstart.tiered").check().run()
    tiered = _run_explorer(at)
    assert tiered["strategies"]["on"] == ["tiered"]
    assert tiered["arrival_rate_per_s"]["value"] == baseline["arrival_rate_per_s"]["value"]
    # what the simulator would have done with the fraction against the tiered path's own saturation
    data["strategy"] = {"tiered": {"chunk_tokens": 256, "policy": "lru"}}
    assert _rate(data) != pytest.approx(expected, rel=0.01)


# ---- 2. "0 = none" removes an SLA term


def test_explorer_sla_zero_removes_the_term() -> None:
    at = app("explorer", **SEED)
    at.number_input(key="quickstart.ttft_p99_ms").set_value(0.0)
    report = _run_explorer(at)
    assert report["sla"]["targets_ms"] == {"ttft": None, "tpot": 100.0, "e2e": 30000.0}
    assert report["sla"]["p99_meets_target"]["ttft"] is None
    assert list(frame(at, "target (ms)")["term"]) == ["TPOT P99", "end-to-end P99"]
    assert not any(m.label == "TTFT P99" for m in at.metric)


def test_capacity_sla_zero_removes_the_term() -> None:
    at = app("capacity", **SEED)
    at.number_input(key="capacity_requests").set_value(20)
    at.number_input(key="capacity_max_replicas").set_value(2)
    at.number_input(key="capacity_sla_ttft").set_value(0.0)  # quickstart's own TTFT term is 2000 ms
    at.number_input(key="capacity_sla_e2e").set_value(0.0)
    at.multiselect(key="capacity_candidates").set_value(["baseline"])
    at.checkbox(key="capacity.cache").uncheck()
    at.button(key="capacity_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    result = at.session_state["capacity_result"]
    assert result["sla_ms"] == {"ttft": None, "tpot": 100.0, "e2e": None}
    outcome = result["candidates"][0]["outcome"]
    assert outcome["sla_targets_ms"] == {"ttft": None, "tpot": 100.0, "e2e": None}
    # judged on TPOT alone: the margin is TPOT's
    tpot = outcome["p99_ms"]["tpot"]["mean"]
    assert outcome["sla_margin"] == pytest.approx((100.0 - tpot) / 100.0)


# ---- 3. inputs and the chosen profile hold across pages


def test_inputs_and_the_profile_persist_across_pages() -> None:
    at = app("explorer", scenario="quickstart")
    at.selectbox(key="explorer_profile").set_value("published-llama2-7b-a100").run()
    at.number_input(key="quickstart.requests").set_value(77).run()
    at.checkbox(key="quickstart.spec").check().run()
    at.number_input(key="quickstart.tpot_p99_ms").set_value(123.0).run()
    assert at.session_state[state.PROFILE] == "published-llama2-7b-a100"
    at.switch_page("tripath/app/pages/capacity.py").run()
    assert not at.exception
    assert at.selectbox(key="capacity_profile").value == "published-llama2-7b-a100"
    assert at.number_input(key="capacity_sla_tpot").value == 123.0  # the same SLA slot
    at.number_input(key="capacity_qps").set_value(0.5).run()
    at.switch_page("tripath/app/pages/calibration.py").run()
    assert at.selectbox(key="calibration_profile").value == "published-llama2-7b-a100"
    at.selectbox(key="calibration_profile").set_value("cpu-tiny").run()
    at.switch_page("tripath/app/pages/explorer.py").run()
    assert not at.exception
    assert at.selectbox(key="explorer_profile").value == "cpu-tiny"  # chosen on the calibration page
    assert at.number_input(key="quickstart.requests").value == 77
    assert at.checkbox(key="quickstart.spec").value is True
    assert at.number_input(key="quickstart.tpot_p99_ms").value == 123.0
    at.switch_page("tripath/app/pages/capacity.py").run()
    assert at.number_input(key="capacity_qps").value == 0.5
    assert at.session_state[state.QPS] == 0.5


# ---- 4. plain labels; throughput, utilisation and the paths' quantities in the explorer


RAW_NAMES = ("_p99_ms", "load_fraction", "rate_per_s", "[strategy", "max_wait_ms", "device_memory_gib")


def test_explorer_labels_are_plain_and_it_shows_throughput_and_path_quantities() -> None:
    at = app("explorer", **SEED)
    at.checkbox(key="quickstart.spec").check().run()
    at.checkbox(key="quickstart.tiered").check().run()
    labels = [w.label for kind in (at.number_input, at.selectbox, at.radio, at.checkbox, at.text_input) for w in kind]
    assert labels and not [label for label in labels if any(raw in label for raw in RAW_NAMES)]
    report = _run_explorer(at)
    table = frame(at, "quantity").set_index("quantity")
    throughput = table["value"]
    assert num(throughput["completed requests (req/s)"]) == pytest.approx(
        report["throughput"]["requests_per_s"]["mean"], rel=1e-3)
    assert num(throughput["replica 0 busy (% of the makespan)"]) == pytest.approx(
        100 * report["utilisation"][0]["mean"], rel=1e-3)
    busy_high = num(table.loc["replica 0 busy (% of the makespan)", "95% high"])
    high = report["utilisation"][0]["ci_high"]
    assert (high is None and pd.isna(busy_high)) or (busy_high == pytest.approx(100 * high, rel=1e-3)
                                                     and busy_high <= 100.0)
    paths = frame(at, "path")
    values = dict(zip(paths["quantity"], paths["value"], strict=True))
    profile = resolve_profile(SEED_PROFILE)
    assert values["draft tokens per round (K)"] == str(profile.speculative.k)
    assert float(values["acceptance rate, task dialogue"]) == pytest.approx(profile.acceptance["dialogue"].mean)
    rounds = report["per_request_paths"]["draft_rounds"]["mean"]
    assert float(values["draft rounds per request"]) == pytest.approx(rounds, rel=1e-3)  # 4 significant digits
    assert float(values["host memory (GiB)"]) == pytest.approx(profile.hardware.host_memory_bytes / 2**30, rel=1e-3)
    assert "paging stall per request (ms)" in values


# ---- 5. latency intervals never below zero, and the method named


def test_explorer_intervals_are_order_statistic_never_negative_and_hold_their_point() -> None:
    at = app("explorer", **SEED)
    at.number_input(key="quickstart.requests").set_value(300)  # the shipped size: Student-t went below 0 here
    report = _run_explorer(at, requests=300)
    assert report["latency_interval"]["method"] == "order-statistic 95 %"
    table = frame(at, "95% low (ms)")
    assert not display.has_missing(table)
    for row in table.to_dict("records"):
        mean, low, high = num(row["mean (ms)"]), num(row["95% low (ms)"]), num(row["95% high (ms)"])
        assert mean >= 0
        if pd.isna(low) or pd.isna(high):  # an end withheld says why; an end shown is never negative
            assert row["note"] != display.DASH, row
        assert pd.isna(low) or 0 <= low <= mean
        assert pd.isna(high) or mean <= high
    assert any("order-statistic 95 %" in m.value for m in at.markdown)


# ---- 6. a readable decision matrix


def test_matrix_shows_the_best_per_cell_with_margins_and_filters_candidates() -> None:
    at = app("matrix", **SEED)
    at.number_input(key="matrix_requests").set_value(10)
    at.checkbox(key="matrix.cache").uncheck()
    at.button(key="matrix_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    result = at.session_state["matrix_result"]
    best = frame(at, "its SLA margin")
    for cell, row in zip(result["cells"], best.itertuples(index=False), strict=True):
        chosen = next((r for r in cell["candidates"] if r["candidate"] == cell["recommended"]), None)
        shown = row[best.columns.get_loc("its SLA margin")]
        if chosen is None:
            assert shown.startswith(display.DASH)
        else:
            assert shown == f"{100 * chosen['sla_margin']:+.0f} %"
    margins = frame(at, "candidate")
    # by default the candidates the profile can run somewhere: the seed has no compression section
    assert "compression" not in set(margins["candidate"]) and "baseline" in set(margins["candidate"])
    at.multiselect(key="matrix_shown").set_value(["speculative", "baseline"]).run()
    margins = frame(at, "candidate")
    assert list(margins["candidate"]) == ["baseline", "speculative"]  # the matrix's order
    for cell in result["cells"]:
        base = next(r for r in cell["candidates"] if r["candidate"] == "baseline")
        shown = margins.loc[0, cell["scenario"]]
        assert shown.startswith(display.margin_text(base))  # "rejects N %" for a miss by rejection, never a margin
        if display.rejected_share(base) > 0.01:
            assert shown.startswith("rejects") and "★" not in shown


# ---- 7. the load step falls within the run by default


def test_load_step_default_steps_in_the_middle_of_the_arrivals() -> None:
    from tripath.planning.whatif import rate_of

    at = app("whatif", **SEED)
    at.number_input(key="whatif_requests").set_value(60)
    at.checkbox(key="whatif.cache").uncheck()
    at.button(key="step_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    result = at.session_state["whatif_step"]
    data = shipped_scenario_dict("quickstart")
    data.pop("profile")
    data["workload"]["requests"] = 60
    span = 60 / rate_of(data, None, resolve_profile(SEED_PROFILE))
    assert result["load_step"]["at_s"] == pytest.approx(span / 2)
    for series in result["series"].values():
        after = [w for w in series["windows"] if w["start_s"] >= result["load_step"]["at_s"]]
        assert sum(w["arrived"] for w in after) > 0  # requests arrive after the step


def test_load_step_after_the_last_arrival_is_flagged() -> None:
    at = app("whatif", **SEED)
    at.number_input(key="whatif_requests").set_value(20)
    at.number_input(key="step_at").set_value(100_000.0).run()
    assert any("never steps" in w.value for w in at.warning)


# ---- 8. the capacity planner's default run, and its answer when nothing meets


def test_capacity_default_is_a_short_search_and_names_the_failing_term_and_the_closest() -> None:
    from tripath.app.pages import capacity
    from tripath.planning.candidates import candidates
    from tripath.planning.recommend import closest_candidate

    at = app("capacity", **SEED)
    profile = resolve_profile(SEED_PROFILE)
    singles = [c.name for c in candidates(profile) if len(c.paths) <= 1]
    assert at.multiselect(key="capacity_candidates").value == singles  # no combinations by default
    assert at.number_input(key="capacity_requests").value == capacity.DEFAULT_REQUESTS
    assert at.number_input(key="capacity_max_replicas").value == 8
    at.number_input(key="capacity_requests").set_value(40)  # smaller still for the test
    at.number_input(key="capacity_qps").set_value(0.2)
    at.checkbox(key="capacity.cache").uncheck()
    at.button(key="capacity_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    result = at.session_state["capacity_result"]
    assert result["recommended"] is None  # quickstart's long prompts miss a 2 s TTFT at any size searched
    name = closest_candidate(tuple(result["candidates"]))
    row = next(r for r in result["candidates"] if r["candidate"]["name"] == name)
    ran = [r for r in result["candidates"] if (r.get("outcome") or {}).get("sla_margin") is not None]
    assert row["outcome"]["sla_margin"] == max(r["outcome"]["sla_margin"] for r in ran)
    ttft = row["outcome"]["p99_ms"]["ttft"]["mean"]
    over = (ttft - 2000.0) / 2000.0
    assert over > 0
    warning = next(w.value for w in at.warning if "No candidate meets" in w.value)
    assert "The term that fails is TTFT" in warning and f"**{name}**" in warning
    assert f"{over:.1%} over the 2,000 ms target" in warning
    table = frame(at, "GPUs per replica").set_index("candidate")
    # the numbers at the largest size searched
    assert num(table.loc[name, "TTFT P99 (ms)"]) == pytest.approx(ttft, rel=1e-3, abs=0.06)
    assert table.loc[name, "GPUs"] == display.DASH and not display.has_missing(table)
    assert "no replica count up to 8 meets the SLA" in table.loc[name, "not applicable"]
    json.dumps(result)  # the plan stays JSON-ready (it is downloadable)
