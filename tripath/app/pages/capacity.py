"""Page 3 — Capacity planner: target QPS and SLA -> GPUs per candidate path, goodput curves, cost.

Calls tripath.planning.capacity.plan, the function behind `tripath plan` (a replica search per candidate,
then the goodput at each attainment level for the size found). Opens on data/scenarios/quickstart-gpu.toml on the
shared default GPU profile at DEFAULT_QPS, where every candidate finds a size within DEFAULT_MAX_REPLICAS.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from tripath.app.widgets import charts, display, planning_runs, profiles, scenario_form, state
from tripath.core.errors import InputError
from tripath.core.metrics import TERMS
from tripath.planning.candidates import Candidate, candidates
from tripath.planning.capacity import PlanRow, plan
from tripath.planning.recommend import binding_term, closest_candidate, sla_terms
from tripath.planning.scenario_dict import load_scenario_dict
from tripath.planning.sweep import MAX_REJECTED

RESULT = "capacity_result"
TERM_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end"}
# per simulation: the default plan (7 single-path candidates, replica search and goodput curves) in about 20 s on
# 2 cores (docs/app.md); the P99 is over this many requests, which the page says; raise it for a steadier tail
DEFAULT_REQUESTS = 200
DEFAULT_MAX_REPLICAS = 8
# CHOSEN so that the answer does not hang on the sample: one TP4 replica misses the SLA at 3.5 req/s for every
# default candidate (it serves about 2 req/s within it over 1,000 requests: the what-if page's default sweep) and
# two meet it with room, so the replica counts are the same over 200 and 600 requests (docs/app.md)
DEFAULT_QPS = 3.5


def default_candidates(every: list[Candidate]) -> list[str]:
    """The baseline and each single path: a short first search (combinations are one tick away)."""
    return [c.name for c in every if len(c.paths) <= 1]


def main() -> None:
    st.title("Capacity planner")
    st.caption("For a target load and SLA: the fewest GPUs each candidate path needs, its goodput and its cost "
               "(`tripath plan`). GPU price is yours to give; it is not a measured number.")
    names = scenario_form.shipped_scenarios()
    cols = st.columns(3)
    scenario = cols[0].selectbox("scenario", names, **state.bind("capacity_scenario", state.DEFAULT_SCENARIO,
                                                                 state.SCENARIO, names))
    try:
        data, source = load_scenario_dict(scenario)
    except InputError as err:
        st.error(str(err))
        return
    choices = profiles.choices()
    default = data.get("profile")
    name = cols[1].selectbox("profile", choices, **state.bind(
        "capacity_profile", default if default in choices else state.default_profile(choices), state.PROFILE,
        choices))
    qps = cols[2].number_input("target load (req/s)", 0.0001, 1e6, format="%.4f",
                               **state.bind("capacity_qps", DEFAULT_QPS, state.QPS))
    profile = profiles.load_shown(name)
    if profile is None:
        return
    sla_cols = st.columns(4)
    sla: dict[str, float | None] = {}
    for col, term in zip(sla_cols[:3], TERMS, strict=True):
        given = data.get("sla", {}).get(f"{term}_p99_ms")
        value = col.number_input(f"{TERM_NAMES[term]} P99 target (ms; 0 = none)", 0.0, 1e7,
                                 **state.bind(f"capacity_sla_{term}", float(given or 0.0), state.SLA_MS[term]))
        sla[term] = value or None
    price = sla_cols[3].number_input("GPU price (USD per GPU-hour; 0 = none)", 0.0, 1e4,
                                     **state.bind("capacity_price", 0.0, state.PRICE))
    every = candidates(profile)
    names_all = [c.name for c in every]
    chosen = st.multiselect("candidates", names_all, help="the baseline and each single path by default; add the "
                                                          "combinations for a longer search",
                            **state.bind("capacity_candidates", default_candidates(every), options=names_all))
    left, right = st.columns(2)
    requests = int(left.number_input("requests per simulation", 10, 1_000_000,
                                     **state.bind("capacity_requests", DEFAULT_REQUESTS)))
    max_replicas = int(right.number_input("search up to replicas", 1, 4096,
                                          **state.bind("capacity_max_replicas", DEFAULT_MAX_REPLICAS)))
    settings = planning_runs.controls("capacity")
    if st.button("Plan capacity", type="primary", key="capacity_run"):
        if "requests" in data["workload"]:
            data = {**data, "workload": {**data["workload"], "requests": requests}}
        # the form's SLA is the SLA: a term set to 0 is no term (not the scenario's target)
        data = {**{k: v for k, v in data.items() if k not in ("profile", "sla")},
                "sla": {f"{t}_p99_ms": v for t, v in sla.items() if v is not None}}
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
                                             settings.replications, max_replicas, executor, cache).to_dict(),
                unit="candidate searches")
        except (InputError, ValueError) as err:
            st.error(str(err))
            return
        st.session_state[RESULT] = {**result, "requests_per_simulation": data["workload"].get("requests"),
                                    "replications": settings.replications}
    result = st.session_state.get(RESULT)
    if result is None:
        st.info("Set the load, the SLA and the candidates, then **Plan capacity**.")
        return
    _show(result)


def closest_line(result: dict[str, Any]) -> str | None:
    """When no candidate meets the SLA: the closest (tripath/planning/recommend.py), its binding term, and by how
    much each missed term's P99 is over its target; None when one meets it or none ran."""
    if result["recommended"] is not None:
        return None
    rows = tuple(result["candidates"])
    name = closest_candidate(rows)
    if name is None:
        return None
    row = next(r for r in rows if r["candidate"]["name"] == name)
    terms = sla_terms(row["outcome"])
    binding = binding_term(terms)
    missed = [f"{TERM_NAMES[t]} P99 {display.ms(v['p99_ms'])} is {v['over_by']:.1%} over the "
              f"{display.ms(v['target_ms'])} target"
              for t, v in terms.items() if v["over_by"] is not None]
    met = [TERM_NAMES[t] for t, v in terms.items() if v["over_by"] is None and v["p99_ms"] is not None]
    size = row["outcome"].get("replicas")
    text = (f"No candidate meets the SLA up to {size} replica(s). The term that fails is "
            f"{TERM_NAMES.get(binding, binding)}; the closest candidate is **{name}**: " + "; ".join(missed))
    if met:
        text += f" ({', '.join(met)} met)"
    rejected = row["outcome"].get("rejected_share") or 0.0
    if rejected > MAX_REJECTED:
        text += f"; it rejects {rejected:.1%} of requests (over the {MAX_REJECTED:.0%} a candidate may)"
    return text + "."


def _show(result: dict[str, Any]) -> None:
    priced = result.get("gpu_price_usd_per_gpu_hour") is not None
    requests, reps = result.get("requests_per_simulation"), result.get("replications", 1)
    sample = "" if requests is None else f" Each P99 is over {requests} requests x {reps} replication(s)."
    cost = ("cost = GPUs x your price" if priced else
            "no GPU price given, so no cost columns (give one above for USD per hour and per 1K requests)")
    st.caption(f"{result['numbers_from']}; at {result['qps']:g} req/s. {result['sizing']}; {cost}. A candidate "
               f"meets the SLA when every P99 is within its target and at most {MAX_REJECTED:.0%} of the requests "
               f"are rejected.{sample}")
    st.metric("recommended (fewest GPUs meeting the SLA)", result["recommended"] or "none meets the SLA")
    line = closest_line(result)
    if line:
        st.warning(line)
    rows = [_row(r, priced) for r in result["candidates"]]
    st.dataframe(display.frame(rows, {**{f"{TERM_NAMES[t]} P99 (ms)": ",.1f" for t in TERMS},
                                      "USD per hour": ",.2f", "USD per 1K requests": ",.4f"}),
                 hide_index=True, key="capacity_table")
    curves = {r["candidate"]["name"]: r["goodput_rps"] for r in result["candidates"] if r.get("goodput_rps")}
    if curves:
        levels = sorted({float(k) for c in curves.values() for k in c})
        ys = {name: [c.get(str(level)) if c.get(str(level)) is not None else float("nan") for level in levels]
              for name, c in curves.items()}
        fig = charts.lines([100 * v for v in levels], ys, "share of requests meeting every SLA term (%)",
                           "goodput (req/s)", f"goodput at the planned size — {result['numbers_from']}",
                           hline=result["qps"], hlabel="target load")
        st.pyplot(fig)
        st.caption("Goodput: the highest arrival rate at which the share of requests meeting every term reaches the "
                   "level, searched with the same requests per simulation; runs of a few hundred requests end "
                   "before a queue builds fully, so they overstate it: raise the requests for a firmer curve.")
        st.download_button("goodput curves (PNG)", charts.png_bytes(fig), "goodput.png", "image/png",
                           key="goodput_png")
    st.download_button("plan (JSON)", json.dumps(result, indent=2), "capacity_plan.json", "application/json",
                       key="capacity_json")


def _row(r: dict[str, Any], priced: bool = True) -> dict[str, Any]:
    """One candidate (``PlanRow``, the CLI's reading too): its size (replicas, GPUs), cost when priced, P99s at that
    size (or at the largest size searched when none meets), margin, rejected share, and why a value is missing."""
    s = PlanRow.of_row(r)
    outcome = r.get("outcome") or {}
    row: dict[str, Any] = {"candidate": s.candidate, "replicas": s.replicas, "GPUs": s.gpus,
                           "GPUs per replica": s.gpus_per_replica}
    if priced:
        row.update({"USD per hour": s.cost_usd_per_hour, "USD per 1K requests": s.cost_usd_per_1k_requests})
    ran = s.ran and not outcome.get("error")
    row.update({**{f"{TERM_NAMES[t]} P99 (ms)": s.p99_ms[t] for t in TERMS},
                "SLA margin": display.margin_text(outcome) if ran else None,
                "rejected": display.pct(display.rejected_share(outcome), digits=1) if ran else None,
                "not applicable": s.not_applicable or s.status(), "note": s.remark or ""})
    return row


main()
