"""Page 1 — Scenario explorer: edit a shipped scenario, simulate it, read its tail latencies.

Runs the same functions as `tripath simulate` (tripath.simulator.runner.simulate and summary, through
tripath/app/widgets/simulation.py's cache). Every number is labelled simulated, on which profile kind.
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from tripath.app.widgets import charts, profiles, scenario_form, simulation, state, timeseries
from tripath.app.widgets.provenance import profile_badge, simulated_caption
from tripath.core.errors import InputError
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
                             **state.bind("base_scenario", "quickstart", state.SCENARIO, names))
    choices = profiles.choices()
    default = scenario_form.base_dict(base).get("profile", "seed-llama2-70b-a100")
    profile_name = cols[1].selectbox("profile", choices, **state.bind(
        "explorer_profile", default if default in choices else choices[0], state.PROFILE, choices))
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
    key = (simulation.canonical(data), profile_name, seed, replications, interval or None)
    if st.button("Run simulation", type="primary", key="run"):
        _run(data, key)
    stored = st.session_state.get(RESULT)
    if stored is None:
        st.info("Set the workload, cluster, batching, paths and SLA above, then **Run simulation**.")
        return
    if stored["key"] != key:
        st.warning("The inputs changed since this result was simulated: run again to update it.")
    _show(stored["outcome"])


def _ms(value: float, signed: bool = False) -> str:
    """Milliseconds as the metric cards show them: seconds from 10 s up, so the number fits its card."""
    sign = "+" if signed else ""
    if abs(value) >= 10_000:
        return f"{value / 1000:{sign},.1f} s"
    return f"{value:{sign},.1f} ms"


def _value(value: object) -> str:
    """A path quantity as text (the column mixes numbers and names): 4 significant digits for a float."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


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
    cols[2].metric("rejected", f"{counts['rejected']:,}")
    for col, row in zip(cols[3:], simulation.sla_rows(report), strict=True):
        value = row["simulated P99 (ms)"]
        col.metric(row["term"], "n/a" if value is None else _ms(value),
                   None if value is None else f"{_ms(value - row['target (ms)'], signed=True)} vs SLA",
                   delta_color="inverse")
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
        cols[2].metric("TTFT P50 with a hit", "n/a" if cached is None else _ms(cached))
        if "note" in prefix:
            st.caption(prefix["note"])
    st.markdown(f"**Percentiles** (ms; mean over replications; interval: {report['latency_interval']['method']})")
    rows = simulation.percentile_rows(report)
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="percentiles", height=36 * (len(rows) + 1) + 2,
                 column_config={c: st.column_config.NumberColumn(format="%.1f")
                                for c in ("mean (ms)", "95% low (ms)", "95% high (ms)")})
    sla = simulation.sla_rows(report)
    if sla:
        st.markdown("**SLA** (terms without a target are not judged)")
        st.dataframe(pd.DataFrame(sla), hide_index=True, key="sla_table",
                     column_config={"requests within target (%)": st.column_config.NumberColumn(format="%.1f")})
    left, right = st.columns(2)
    with left:
        st.markdown("**Throughput and utilisation** (simulated, mean over replications; 95 % Student-t interval "
                    "over replications, cut to the quantity's range)")
        st.dataframe(pd.DataFrame(simulation.throughput_rows(report)), hide_index=True, key="throughput_table",
                     column_config={c: st.column_config.NumberColumn(format="%.4g")
                                    for c in ("value", "95% low", "95% high")})
    with right:
        paths = simulation.path_rows(report, outcome)
        st.markdown("**Optimization paths**" + ("" if paths else ": none on (the baseline)"))
        if paths:
            shown = [{**row, "value": _value(row["value"])} for row in paths]
            st.dataframe(pd.DataFrame(shown), hide_index=True, key="paths_table")
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
