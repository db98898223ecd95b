"""Page 3 — Capacity planner: target QPS and SLA -> GPUs per candidate path, goodput curves, cost.

Calls tripath.planning.capacity.plan, the function behind `tripath plan` (a replica search per candidate,
then the goodput at each attainment level for the size found).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from tripath.app.widgets import charts, planning_runs, profiles, scenario_form
from tripath.core.errors import InputError
from tripath.planning.candidates import candidates
from tripath.planning.capacity import plan
from tripath.planning.scenario_dict import load_scenario_dict

RESULT = "capacity_result"
TERMS = ("ttft", "tpot", "e2e")


def main() -> None:
    st.title("Capacity planner")
    st.caption("For a target load and SLA: the fewest GPUs each candidate path needs, its goodput and its cost "
               "(`tripath plan`). GPU price is yours to give; it is not a measured number.")
    names = scenario_form.shipped_scenarios()
    cols = st.columns(3)
    scenario = cols[0].selectbox("scenario", names, index=names.index("quickstart"), key="capacity_scenario")
    try:
        data, source = load_scenario_dict(scenario)
    except InputError as err:
        st.error(str(err))
        return
    choices = profiles.choices()
    default = data.get("profile", "seed-llama2-70b-a100")
    name = cols[1].selectbox("profile", choices, index=choices.index(default) if default in choices else 0,
                             key="capacity_profile")
    qps = cols[2].number_input("target load (req/s)", 0.0001, 1e6, 0.2, format="%.4f", key="capacity_qps")
    profile = profiles.load_shown(name)
    if profile is None:
        return
    sla_cols = st.columns(4)
    sla: dict[str, float | None] = {}
    for col, term in zip(sla_cols[:3], TERMS, strict=True):
        given = data.get("sla", {}).get(f"{term}_p99_ms")
        value = col.number_input(f"{term} P99 SLA ms (0 = none)", 0.0, 1e7, float(given or 0.0),
                                 key=f"capacity_sla_{term}")
        sla[term] = value or None
    price = sla_cols[3].number_input("GPU price USD per GPU-hour (0 = none)", 0.0, 1e4, 0.0,
                                     key="capacity_price")
    every = [c.name for c in candidates(profile)]
    chosen = st.multiselect("candidates", every, default=every, key="capacity_candidates")
    left, right = st.columns(2)
    requests = int(left.number_input("requests per simulation", 10, 1_000_000,
                                     int(data["workload"].get("requests", 200)), key="capacity_requests"))
    max_replicas = int(right.number_input("search up to replicas", 1, 4096, 64, key="capacity_max_replicas"))
    settings = planning_runs.controls("capacity")
    if st.button("Plan capacity", type="primary", key="capacity_run"):
        if "requests" in data["workload"]:
            data = {**data, "workload": {**data["workload"], "requests": requests}}
        data = {k: v for k, v in data.items() if k != "profile"}
        if all(v is None for v in sla.values()) or not chosen:
            st.error("give at least one SLA term and one candidate")
            return
        text = profiles.profile_text(name)
        inputs = {"scenario": data, "profile": text, "qps": qps, "sla": sla, "price": price,
                  "candidates": chosen, "max_replicas": max_replicas}
        try:
            result = planning_runs.run(
                "capacity plan", inputs, settings,
                lambda executor, cache: plan(data, source, profile, qps, sla, price or None, chosen, settings.seed,
                                             settings.replications, max_replicas, executor, cache).to_dict())
        except (InputError, ValueError) as err:
            st.error(str(err))
            return
        st.session_state[RESULT] = result
    result = st.session_state.get(RESULT)
    if result is None:
        st.info("Set the load, the SLA and the candidates, then **Plan capacity**.")
        return
    _show(result)


def _show(result: dict[str, Any]) -> None:
    st.caption(f"{result['numbers_from']}; at {result['qps']:g} req/s. {result['sizing']}; cost = GPUs x your "
               "price.")
    st.metric("recommended (fewest GPUs meeting the SLA)", result["recommended"] or "none meets the SLA")
    rows = [_row(r) for r in result["candidates"]]
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="capacity_table")
    curves = {r["candidate"]["name"]: r["goodput_rps"] for r in result["candidates"] if r.get("goodput_rps")}
    if curves:
        levels = sorted({float(k) for c in curves.values() for k in c})
        ys = {name: [c.get(str(level)) if c.get(str(level)) is not None else float("nan") for level in levels]
              for name, c in curves.items()}
        fig = charts.lines([100 * v for v in levels], ys, "share of requests meeting every SLA term (%)",
                           "goodput (req/s)", f"goodput at the planned size — {result['numbers_from']}",
                           hline=result["qps"], hlabel="target load")
        st.pyplot(fig)
        st.download_button("goodput curves (PNG)", charts.png_bytes(fig), "goodput.png", "image/png",
                           key="goodput_png")
    st.download_button("plan (JSON)", json.dumps(result, indent=2), "capacity_plan.json", "application/json",
                       key="capacity_json")


def _row(r: dict[str, Any]) -> dict[str, Any]:
    outcome = r.get("outcome") or {}
    p99 = outcome.get("p99_ms") or {}
    return {"candidate": r["candidate"]["name"], "replicas": r.get("replicas"), "GPUs": r.get("gpus"),
            "GPUs per replica": r.get("gpus_per_replica"), "USD per hour": r.get("cost_usd_per_hour"),
            "USD per 1K requests": r.get("cost_usd_per_1k_requests"),
            **{f"{t.upper()} P99 ms": (p99.get(t) or {}).get("mean") for t in TERMS},
            "not applicable": r.get("not_applicable") or ("no size up to the search limit meets the SLA"
                                                          if r.get("replicas") is None and outcome else ""),
            "note": r.get("remark", "")}


main()
