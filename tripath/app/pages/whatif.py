"""Page 4 — SLA what-if: sweeps of the batching window, the load and the SLA thresholds; a load step
under fixed vs adaptive batching.

Calls tripath.planning.whatif.whatif and load_step, the functions behind `tripath whatif --vary ...` and
`tripath whatif --load-step FACTOR@SECONDS`. Opens on data/scenarios/quickstart-gpu.toml on the shared default GPU
profile, sweeping the load over 1-4 req/s: one TP4 replica meets the SLA at the low end and misses it at the high
end, so the points differ and the sweep answers "up to which load".
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from tripath.app.widgets import charts, display, planning_runs, profiles, scenario_form, state
from tripath.core.errors import InputError
from tripath.core.metrics import TERMS
from tripath.planning.scenario_dict import load_scenario_dict
from tripath.planning.sweep import MAX_REJECTED
from tripath.planning.whatif import load_step, parse_value, rate_of, whatif
from tripath.profile.profile import Profile

FIELDS = {"load (req/s)": "workload.arrival.rate_per_s",
          "batching window (ms)": "batching.max_wait_ms",
          "load (fraction of the saturation estimate)": "workload.arrival.load_fraction",
          "max batch size (requests)": "batching.max_batch_size",
          "TTFT P99 target (ms)": "sla.ttft_p99_ms", "TPOT P99 target (ms)": "sla.tpot_p99_ms",
          "end-to-end P99 target (ms)": "sla.e2e_p99_ms"}
LABELS = {field: label for label, field in FIELDS.items()}
# The first field (the load) is the default sweep; each list is chosen so that its points differ on the default
# scenario and profile (max batch size: 8 and 16 queue, 32 and up do not)
DEFAULTS = {"batching.max_wait_ms": "0, 50, 200, 1000", "workload.arrival.rate_per_s": "1, 2, 3, 4",
            "workload.arrival.load_fraction": "0.3, 0.6, 0.9", "batching.max_batch_size": "8, 16, 32, 64",
            "sla.ttft_p99_ms": "1000, 2000, 5000", "sla.tpot_p99_ms": "50, 100, 200",
            "sla.e2e_p99_ms": "10000, 30000, 60000"}
TERM_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end"}
SWEEP, STEP = "whatif_sweep", "whatif_step"


def _values(field: str, key: str) -> list[Any]:
    text = st.text_input(f"values of {LABELS[field]} (comma-separated)", DEFAULTS[field], key=key)
    values = [parse_value(v) for v in text.split(",") if v.strip()]
    if not values:
        raise ValueError(f"{LABELS[field]}: give at least one value")
    return values


def main() -> None:
    st.title("SLA what-if")
    st.caption("What happens to P99 if the batching window, the load or the SLA changes (`tripath whatif`). "
               "Every point sees the same seeded draws, so differences come from the change.")
    names = scenario_form.shipped_scenarios()
    cols = st.columns(3)
    scenario = cols[0].selectbox("scenario", names, **state.bind("whatif_scenario", state.DEFAULT_SCENARIO,
                                                                 state.SCENARIO, names))
    try:
        data, source = load_scenario_dict(scenario)
    except InputError as err:
        st.error(str(err))
        return
    own = data.get("profile")
    data = {k: v for k, v in data.items() if k != "profile"}
    choices = profiles.choices()
    default = own if own in choices else state.default_profile(choices)
    name = cols[1].selectbox("profile", choices, **state.bind("whatif_profile", default, state.PROFILE, choices))
    if "requests" in data["workload"]:
        requests = int(cols[2].number_input("requests per simulation", 10, 1_000_000,
                                            **state.bind("whatif_requests", int(data["workload"]["requests"]))))
        data = {**data, "workload": {**data["workload"], "requests": requests}}
    profile = profiles.load_shown(name)
    if profile is None:
        return
    settings = planning_runs.controls("whatif", replications=2)
    text = profiles.profile_text(name)
    sweep_tab, step_tab = st.tabs(["Sweep", "Load step: fixed vs adaptive batching"])
    with sweep_tab:
        _sweep(data, source, profile, text, settings)
    with step_tab:
        _step(data, source, profile, text, settings)


def _sweep(data: dict[str, Any], source: str, profile: Profile, text: str,
           settings: planning_runs.SweepSettings) -> None:
    labels = list(FIELDS)
    cols = st.columns(2)
    first = FIELDS[cols[0].selectbox("vary", labels, key="whatif_field")]
    second_label = cols[1].selectbox("and (optional)", ["nothing else", *labels], index=0, key="whatif_field2")
    try:
        vary = [(first, _values(first, "whatif_values"))]
        if second_label != "nothing else" and FIELDS[second_label] != first:
            second = FIELDS[second_label]
            vary.append((second, _values(second, "whatif_values2")))
    except ValueError as err:
        st.error(str(err))
        return
    policies = ("as in the scenario", *scenario_form.POLICIES)
    policy = st.selectbox("batching policy for the sweep", policies, key="whatif_policy",
                          help="the window (max_wait_ms) only matters for static, dynamic and adaptive batching")
    if policy != policies[0]:
        data = {**data, "batching": {**data.get("batching", {}), "policy": policy}}
    if first == "batching.max_wait_ms" and data.get("batching", {}).get("policy", "continuous") in ("continuous",
                                                                                                    "chunked"):
        st.caption(f"Note: under {data.get('batching', {}).get('policy', 'continuous')} batching nothing waits "
                   "for a window, so every point gives the same latencies; pick dynamic, static or adaptive.")
    if st.button("Run the sweep", type="primary", key="whatif_run"):
        try:
            result = planning_runs.run("what-if", {"scenario": data, "profile": text, "vary": vary}, settings,
                                       lambda executor, cache: whatif(data, source, profile, vary, settings.seed,
                                                                      settings.replications, executor,
                                                                      cache).to_dict())
        except (InputError, ValueError) as err:
            st.error(str(err))
            return
        st.session_state[SWEEP] = {**result, "requests_per_point": data["workload"].get("requests"),
                                   "replications": settings.replications}
    result = st.session_state.get(SWEEP)
    if result is None:
        st.info("Choose what to vary and **Run the sweep**.")
        return
    st.caption(f"{result['numbers_from']}.{_sample(result, 'requests_per_point', 'each point')} A point meets the "
               f"SLA when every P99 is within its target and at most {MAX_REJECTED:.0%} of the requests are "
               "rejected; an interval that does not hold its point is not shown (the note says why).")
    rows = [_point(p) for p in result["points"]]
    st.dataframe(display.frame(rows, {f"{TERM_NAMES[t]} P99 (ms)": ",.1f" for t in TERMS}), hide_index=True,
                 key="whatif_table")
    term = st.radio("plot", TERMS, horizontal=True, key="whatif_term", format_func=TERM_NAMES.__getitem__)
    fig = _sweep_figure(result, term, data.get("sla", {}).get(f"{term}_p99_ms"))
    st.pyplot(fig)
    st.download_button("sweep (PNG)", charts.png_bytes(fig), "whatif.png", "image/png", key="whatif_png")
    st.download_button("sweep (JSON)", json.dumps(result, indent=2), "whatif.json", "application/json",
                       key="whatif_json")


def _sample(result: dict[str, Any], key: str, what: str) -> str:
    """" Each point is over 1000 requests x 2 replication(s)." (empty when the result does not say)."""
    requests = result.get(key)
    return "" if requests is None else (f" {what[:1].upper()}{what[1:]} is over {requests} requests x "
                                        f"{result.get('replications', 1)} replication(s).")


def _point(p: dict[str, Any]) -> dict[str, Any]:
    """One point of the sweep: its settings, P99 per term (ms) with the interval when it holds the point, the
    verdict (a point rejecting more than MAX_REJECTED misses), rejected and attained shares, and notes."""
    row: dict[str, Any] = {LABELS.get(field, field): value for field, value in p["settings"].items()}
    if "error" in p:
        row["verdict"] = f"{display.DASH} refused by the simulator"
        row["note"] = p["error"]
        return row
    counts = p.get("counts") or {}
    arrived = counts.get("arrived") or 0
    judged = {"meets_sla": p["meets_sla"], "rejected_share": counts.get("rejected", 0) / arrived if arrived else 0.0}
    notes = []
    for term in TERMS:
        est = p["p99_ms"][term] or {}
        row[f"{TERM_NAMES[term]} P99 (ms)"] = est.get("mean")
        row[f"{TERM_NAMES[term]} 95% interval"] = display.interval_text(est)
        if display.why(est):
            notes.append(f"{TERM_NAMES[term]}: {display.why(est)}")
    row["verdict"] = display.verdict(judged)
    row["rejected"] = display.pct(judged["rejected_share"], digits=1)
    share = (p.get("attainment") or {}).get("all")
    row["requests meeting every term"] = display.pct(share, digits=1) if share is not None else (
        f"{display.DASH} {display.NO_REQUEST}")
    row["note"] = "; ".join(notes)
    return row


def _sweep_figure(result: dict[str, Any], term: str, target_ms: float | None) -> Any:
    fields = result["fields"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in result["points"]:
        label = "P99" if len(fields) == 1 else f"{LABELS.get(fields[1], fields[1])} = {p['settings'][fields[1]]}"
        groups.setdefault(label, []).append(p)
    x = [p["settings"][fields[0]] for p in next(iter(groups.values()))]
    ys, bands = {}, {}
    for label, points in groups.items():
        ys[label], low, high = display.plotted([(p.get("p99_ms") or {}).get(term) for p in points])
        bands[label] = (low, high)
    target = None if f"sla.{term}_p99_ms" in fields else target_ms  # a swept target has no single line
    return charts.lines(x, ys, LABELS.get(fields[0], fields[0]), f"{TERM_NAMES[term]} P99 (ms)",
                        f"what-if — {result['numbers_from']}",
                        bands, target, "SLA")


def arrival_span(data: dict[str, Any], source: str, profile: Profile) -> float | None:
    """Expected seconds of arrivals without the step: requests / the scenario's rate (None for a trace or a
    scenario the reader refuses: the run says why)."""
    requests = data.get("workload", {}).get("requests")
    try:
        rate = rate_of(data, source, profile)
    except (InputError, ValueError):
        return None
    return None if rate is None or not requests else requests / rate


def _step(data: dict[str, Any], source: str, profile: Profile, text: str,
          settings: planning_runs.SweepSettings) -> None:
    st.caption("The scenario's arrivals with the rate multiplied by FACTOR after T seconds; served once with the "
               "scenario's batching policy (fixed) and once with policy = adaptive.")
    cols = st.columns(3)
    factor = cols[0].number_input("load multiplier (FACTOR)", 0.1, 100.0, **state.bind("step_factor", 2.0))
    given_at = cols[1].number_input("step at T (simulated s; 0 = the middle of the arrivals)", 0.0, 1e7,
                                    **state.bind("step_at", 0.0))
    window = cols[2].number_input("window (s; 0 = T / 5)", 0.0, 1e7, **state.bind("step_window", 0.0))
    span = arrival_span(data, source, profile)
    at_s = given_at or (span / 2.0 if span else 0.0)
    if span is not None:
        st.caption(f"The arrivals span about {span:,.0f} s before the step ({data['workload'].get('requests')} "
                   f"requests at the scenario's rate); the step comes at {at_s:,.0f} s.")
        if at_s >= span:
            st.warning(f"T = {at_s:,.0f} s is after the last arrival (about {span:,.0f} s): the load never steps "
                       "within the run. Lower T or raise the requests.")
    if st.button("Run the load step", type="primary", key="step_run"):
        inputs = {"scenario": data, "profile": text, "factor": factor, "at": at_s, "window": window}
        try:
            result = planning_runs.run("load step", inputs, settings,
                                       lambda executor, cache: load_step(data, source, profile, factor, at_s,
                                                                         window or None, settings.seed,
                                                                         settings.replications, executor,
                                                                         cache).to_dict())
        except (InputError, ValueError) as err:
            st.error(str(err))
            return
        st.session_state[STEP] = {**result, "requests": data["workload"].get("requests"),
                                  "replications": settings.replications}
    result = st.session_state.get(STEP)
    if result is None:
        st.info("Set the step and **Run the load step**.")
        return
    st.caption(f"{result['numbers_from']}.{_sample(result, 'requests', 'each policy')} The band is drawn only "
               "where the interval holds its point.")
    ok = {label: s["windows"] for label, s in result["series"].items() if "windows" in s}
    for label, s in result["series"].items():
        if "error" in s:
            st.error(f"{label} (policy {s['policy']}): the simulator refused it: {s['error']}")
    if not ok:
        return
    term = st.radio("plot", TERMS, horizontal=True, key="step_term", format_func=TERM_NAMES.__getitem__)
    fig = charts.windows(ok, term, result["load_step"]["at_s"], f"load step x{result['load_step']['factor']:g} — "
                                                                 f"{result['numbers_from']}")
    st.pyplot(fig)
    st.download_button("transient (PNG)", charts.png_bytes(fig), "load_step.png", "image/png", key="step_png")
    rows = [{"policy": label, "window": f"{w['start_s']:.0f}-{w['end_s']:.0f} s", "arrived": w["arrived"],
             **{f"{TERM_NAMES[t]} P99 (ms)": w[f"{t}_p99_ms"]["mean"] for t in TERMS},
             "note": "" if all(w[f"{t}_p99_ms"]["mean"] is not None for t in TERMS) else
             f"no request that arrived in this window completed ({display.NO_REQUEST})"}
            for label, windows in ok.items() for w in windows]
    st.dataframe(display.frame(rows, {f"{TERM_NAMES[t]} P99 (ms)": ",.1f" for t in TERMS}), hide_index=True,
                 key="step_table")


main()
