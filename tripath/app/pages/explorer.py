"""Page 1 — Scenario explorer: edit a shipped scenario, simulate it, read its tail latencies.

Runs the same functions as `tripath simulate` (tripath.simulator.runner.simulate and summary, through
tripath/app/widgets/simulation.py's cache). Every number is labelled simulated, on which profile kind. Opens on
data/scenarios/quickstart-gpu.toml (1,000 requests x 3 replications on one TP4 A100 replica, under a second).
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from tripath.app.widgets import charts, display, profiles, scenario_form, simulation, state, timeseries
from tripath.app.widgets.provenance import profile_badge, simulated_caption
from tripath.core.errors import InputError
from tripath.planning.scenario_dict import canonical
from tripath.planning.sweep import MAX_REJECTED
from tripath.simulator.loop.timeseries import timeseries_csv
from tripath.simulator.scenario.scenario import scenario_from_dict

RESULT = "explorer_result"  # session_state: {"key": inputs of the run, "outcome": simulation.Outcome}


def main() -> None:
    st.title("Scenario explorer")
    st.caption("Edit a shipped scenario, simulate it on a calibration profile, and read P99s against the SLA "
               "(the same code as `tripath simulate`).")
    cols = st.columns(4)
    names = scenario_form.shipped_scenarios()
    base = cols[0].selectbox("start from scenario", names,
                             **state.bind("base_scenario", state.DEFAULT_SCENARIO, state.SCENARIO, names))
    choices = profiles.choices()
    default = scenario_form.base_dict(base).get("profile")
    profile_name = cols[1].selectbox("profile", choices, **state.bind(
        "explorer_profile", default if default in choices else state.default_profile(choices), state.PROFILE,
        choices))
    seed = int(cols[2].number_input("seed", 0, 2**31 - 1, **state.bind("explorer_seed", 0, state.SEED)))
    replications = int(cols[3].number_input("replications", 1, 100, help="confidence intervals need at least 2",
                                            **state.bind("explorer_replications", 3, state.REPLICATIONS)))
    interval = st.number_input("sample time series every (simulated s; 0 = off, faster)", 0.0, 1e6,
                               help="queue, batch, KV per tier and paging (tripath/simulator/loop/timeseries.py)",
                               **state.bind("interval", 5.0))
    try:
        profile = profiles.load(profile_name)
    except InputError as err:
        st.error(f"profile: {err}")
        st.stop()
    profile_badge(profile)
    try:
        data = scenario_form.edit(base, profile)
    except ValueError as err:
        st.error(str(err))
        st.stop()
    data, load_note = simulation.baseline_rate(data, profile)
    if load_note:
        st.caption(f"Load: {load_note}.")
    key = (canonical(data), profile_name, seed, replications, interval or None)
    if st.button("Run simulation", type="primary", key="run"):
        _run(data, key)
    stored = st.session_state.get(RESULT)
    if stored is None:
        st.info("Set the workload, cluster, batching, paths and SLA above, then **Run simulation**.")
        return
    if stored["key"] != key:
        st.warning("The inputs changed since this result was simulated: run again to update it.")
    _show(stored["outcome"])


def _value(value: object) -> str:
    """A path quantity as text (the column mixes numbers and names): 4 significant digits for a float."""
    if display.missing(value) or value == "":
        return f"{display.DASH} not reported"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _sla_card(col: Any, row: dict[str, Any], rejected: float) -> None:
    """A term's P99 against its target, in words ("808 ms under target"; the target in the help), never a bare negative
    number; green only when the term is met, and never when more than MAX_REJECTED of the requests were rejected."""
    value, target = row["simulated P99 (ms)"], row["target (ms)"]
    if value is None:
        col.metric(row["term"], display.DASH, help=f"{display.NO_REQUEST}: no latency to compare with the target")
        return
    gap = value - target
    words = f"{display.ms(abs(gap))} {'over' if gap > 0 else 'under'} target"
    good = gap <= 0 and rejected <= MAX_REJECTED
    help_text = f"target {display.ms(target)} at P99"
    if rejected > MAX_REJECTED:
        help_text += (f"; {display.pct(rejected)} of the requests were rejected: the SLA is missed whatever the P99 "
                      "of the others")
    col.metric(row["term"], display.ms(value), words, delta_color="green" if good else "red",
               delta_arrow="up" if gap > 0 else "down", help=help_text)


def _run(data: dict, key: tuple) -> None:
    scenario_json, profile_name, seed, replications, interval = key
    try:
        scenario_from_dict(json.loads(scenario_json), None)  # the CLI's validation, before the status box
        with st.status(f"Simulating {replications} replication(s) ...", expanded=False) as status:
            outcome = simulation.run(scenario_json, profiles.profile_text(profile_name), profile_name, seed,
                                     replications, interval)
            status.update(label=f"Simulated {outcome.report['counts']['arrived']:,} requests "
                                f"({outcome.report['events']:,} events)", state="complete")
    except InputError as err:
        st.error(f"scenario: {err}")
        return
    st.session_state[RESULT] = {"key": key, "outcome": outcome}


def _show(outcome: simulation.Outcome) -> None:
    report = outcome.report
    provenance = simulated_caption(report)
    st.subheader("Results")
    st.caption(provenance)
    counts = report["counts"]
    cols = st.columns(3 + len(simulation.sla_rows(report)))
    cols[0].metric("arrived", f"{counts['arrived']:,}")
    cols[1].metric("completed", f"{counts['completed']:,}")
    rejected = simulation.rejected_share(report)
    cols[2].metric("rejected", f"{counts['rejected']:,}", f"{display.pct(rejected, digits=1)} of those arrived",
                   delta_color="red" if rejected > MAX_REJECTED else "gray", delta_arrow="off")
    for col, row in zip(cols[3:], simulation.sla_rows(report), strict=True):
        _sla_card(col, row, rejected)
    if rejected > MAX_REJECTED:
        st.error(f"{display.pct(rejected, digits=1)} of the requests were rejected (more than {MAX_REJECTED:.0%}): "
                 "the SLA is missed, whatever the P99 of the requests that completed.")
    if report["reject_reasons"]:
        st.warning("Rejected: " + "; ".join(f"{n} x {why}" for why, n in report["reject_reasons"].items()))
    prefix = report.get("prefix_cache")  # only with [strategy.prefix_cache] on
    if prefix is not None:
        st.markdown("**Prefix cache** (simulated)")
        hit, saved = prefix["hit_rate"]["tokens"]["mean"], prefix["prefill_tokens_saved"]["mean"]
        ttft = prefix["ttft_ms"]
        cols = st.columns(3)
        cols[0].metric("hit rate (prompt tokens)", f"{hit:.1%}")
        cols[1].metric("prefill tokens saved", f"{saved:,.0f}")
        cached = ttft["cached"]["p50"]["mean"]
        cols[2].metric("TTFT P50 with a hit", display.ms(cached),
                       help="no request hit the cache" if cached is None else None)
        if "note" in prefix:
            st.caption(prefix["note"])
    st.markdown(f"**Percentiles** (ms, over {counts['completed']:,} completed requests; mean over replications; "
                f"interval: {report['latency_interval']['method']}, shown where it holds the mean)")
    rows = simulation.percentile_rows(report)
    st.dataframe(display.frame(rows, {c: ",.1f" for c in ("mean (ms)", "95% low (ms)", "95% high (ms)")}),
                 hide_index=True, key="percentiles", height=36 * (len(rows) + 1) + 2)
    sla = simulation.sla_rows(report)
    if sla:
        st.markdown("**SLA** (terms without a target are not judged)")
        st.dataframe(display.frame(sla, {"simulated P99 (ms)": ",.1f", "requests within target (%)": ".1f"}),
                     hide_index=True, key="sla_table")
    left, right = st.columns(2)
    with left:
        st.markdown("**Throughput and utilisation** (simulated, mean over replications; 95 % Student-t interval "
                    "over replications, cut to the quantity's range)")
        st.dataframe(display.frame(simulation.throughput_rows(report)), hide_index=True, key="throughput_table")
    with right:
        paths = simulation.path_rows(report, outcome)
        st.markdown("**Optimization paths**" + ("" if paths else ": none on (the baseline)"))
        if paths:
            shown = [{**row, "value": _value(row["value"])} for row in paths]
            st.dataframe(display.frame(shown), hide_index=True, key="paths_table")
    short = f"simulated on a '{report['profile']['source']}' profile ({report['profile']['key']})"
    cdf = charts.latency_cdfs(outcome.latencies_s, report["sla"]["targets_ms"], short)
    st.pyplot(cdf)
    st.download_button("latency CDFs (PNG)", charts.png_bytes(cdf), "latency_cdfs.png", "image/png", key="cdf_png")
    _series(outcome, short)
    left, right = st.columns(2)
    left.download_button("records (CSV)", outcome.records_csv, "records.csv", "text/csv", key="records_csv")
    right.download_button("summary (JSON)", json.dumps(report, indent=2, default=str), "summary.json",
                          "application/json", key="summary_json")
    extrap = report["extrapolations"]
    st.caption(f"{extrap['fraction_outside_domain']:.1%} of cost-model queries fell outside the profile's measured "
               "domain (extrapolated, counted by the simulator).")


def _series(outcome: simulation.Outcome, short: str) -> None:
    run = outcome.result.runs[0]
    figures = timeseries.sampled(run.timeseries)
    if not figures:
        series = timeseries.occupancy(run.records)
        fig = charts.step_series(series, f"requests queued and running, replication 0 — exact from the records; "
                                         f"{short}", "requests")
        st.pyplot(fig)
        st.download_button("queue and running (PNG)", charts.png_bytes(fig), "queue.png", "image/png",
                           key="queue_png")
        st.caption("Batch size, memory per tier and paging: set a sampling interval above to have the simulator "
                   "sample them.")
        return
    interval = run.timeseries.interval_s
    for i, (figure, lines) in enumerate(figures.items()):
        label = timeseries.GROUPS[figure][2]
        fig = charts.step_series(lines, f"{figure}, all replicas, replication 0, sampled every {interval:g} s "
                                        f"by the simulator — {short}", label)
        st.pyplot(fig)
        st.download_button(f"{figure} (PNG)", charts.png_bytes(fig), f"series_{i}.png", "image/png",
                           key=f"series_png_{i}")
    st.download_button("time series (CSV)", timeseries_csv([r.timeseries for r in outcome.result.runs]),
                       "timeseries.csv", "text/csv", key="timeseries_csv")


main()
