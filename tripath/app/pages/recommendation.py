"""First page — Recommendation: which path, how many GPUs, what it costs and how sure, for your deployment.

Calls tripath.planning.recommend.recommend, the function behind `tripath recommend` (its defaults: seed 0,
2 replications, up to 8 replicas per candidate), on data/scenarios/default.toml with the choices made here.
The answer is cached per input set (st.cache_data) and planning's on-disk result cache is shared with the
CLI, so `make run` and this page reuse each other's simulations.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from tripath.app.widgets import memory_fit, pareto, profiles, state
from tripath.app.widgets import recommend_form as form
from tripath.app.widgets.charts import png_bytes
from tripath.core.errors import InputError
from tripath.core.metrics import INTERVAL_METHOD
from tripath.planning.cache import DEFAULT_CACHE_DIR, ResultCache
from tripath.planning.candidates import candidates
from tripath.planning.executor import make_executor
from tripath.planning.export import recommended_suggestion, scenario_toml
from tripath.planning.recommend import recommend
from tripath.planning.scenario_dict import load_scenario_dict
from tripath.profile.profile import Profile

BASE = "default"
RESULT = "rec.result"  # session_state: (inputs key, JSON-ready Recommendation.to_dict())
SEED, REPLICATIONS, MAX_REPLICAS = 0, 2, 8  # `tripath recommend`'s defaults (tripath/cli/planning_parser.py)
DEFAULT_PRICE = 2.0  # the CLI's --gpu-price default: a CHOSEN round figure, not a quote
TERM_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end"}
TERM_SCALE = {"ttft": (1e-3, "s"), "tpot": (1.0, "ms"), "e2e": (1e-3, "s")}


@st.cache_data(show_spinner=False, max_entries=16)
def _recommend(data_json: str, source: str, profile_text: str, profile_name: str, qps: float, price: float,
               seed: int, replications: int, max_replicas: int, disk_cache: bool) -> dict[str, Any]:
    """recommend() on these inputs, as JSON-ready data (a pure function of its arguments: cacheable)."""
    data = json.loads(data_json)
    profile = profiles.parse_profile(profile_text, profile_name)
    cache = ResultCache(DEFAULT_CACHE_DIR) if disk_cache else None
    rec = recommend(data, source, profile, qps, price, seed, replications, max_replicas,
                    make_executor("local"), cache)
    return json.loads(json.dumps(rec.to_dict(), allow_nan=False))


@st.cache_data(show_spinner=False, max_entries=16)
def _memory(data_json: str, source: str, profile_text: str, profile_name: str, names: tuple[str, ...]
            ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    profile = profiles.parse_profile(profile_text, profile_name)
    chosen = [c for c in candidates(profile) if c.name in names]
    return memory_fit.breakdown(json.loads(data_json), source, profile, chosen)


def _label(name: str) -> str:
    try:
        p = profiles.load(name)
    except InputError:
        return name
    return form.profile_label(name, p.key, p.source)


def _inputs(base: dict[str, Any]) -> tuple[form.Choices, int, int, int, bool]:
    start = form.defaults(base)
    names = form.ordered_profiles(profiles.choices())
    top = st.columns([3, 2])
    # a profile chosen on another page is the first default here; this page's own choice is kept apart, so it
    # does not move the other pages off their scenarios' profiles
    shared = st.session_state.get(state.PROFILE)
    default = shared if shared in names else start["profile"] if start["profile"] in names else names[0]
    profile = top[0].selectbox("model and GPU (profile)", names, format_func=_label,
                               **state.bind("rec.profile", default, options=names),
                               help="published: fitted to published operator timings; "
                               "projected: scaled from them to another GPU; seed: the seed document's figures")
    keys = list(form.WORKLOAD_LABELS)
    workload = top[1].selectbox("workload", keys, format_func=form.WORKLOAD_LABELS.get,
                                **state.bind("rec.workload", start["workload"], options=keys),
                                help="prompt and output lengths bootstrapped from a shipped trace or drawn from "
                                "a distribution, with Poisson arrivals at the rate below; or a trace replayed "
                                "(its first requests, their own arrival pattern paced to the rate)")
    lengths = form.Lengths()
    if workload == form.DISTRIBUTION:
        c = st.columns(4)
        lengths = form.Lengths(
            int(c[0].number_input("prompt tokens, lowest", 1, 1_000_000,
                                  **state.bind("rec.plow", lengths.prompt_low))),
            int(c[1].number_input("prompt tokens, highest", 1, 1_000_000,
                                  **state.bind("rec.phigh", lengths.prompt_high))),
            float(c[2].number_input("output tokens, median", 1.0, 1e6,
                                    **state.bind("rec.omed", lengths.output_median))),
            float(c[3].number_input("output tokens, sigma of log", 0.0, 5.0,
                                    **state.bind("rec.osig", lengths.output_sigma))))
    c = st.columns(6)
    ttft_none = c[0].checkbox("no TTFT term", **state.bind("rec.ttft_none", start["ttft_s"] is None),
                              help="removes the term: it is not judged at all")
    ttft = c[1].number_input("TTFT P99 target (s)", 0.001, 1e5, **state.bind("rec.ttft", start["ttft_s"] or 20.0),
                             disabled=ttft_none)
    tpot_none = c[2].checkbox("no TPOT term", **state.bind("rec.tpot_none", start["tpot_ms"] is None),
                              help="removes the term: it is not judged at all")
    tpot = c[3].number_input("TPOT P99 target (ms)", 0.001, 1e6, **state.bind("rec.tpot", start["tpot_ms"] or 100.0),
                             disabled=tpot_none)
    qps = c[4].number_input("arrival rate (req/s)", 0.0001, 1e5, format="%.4f", **state.bind("rec.qps", start["qps"]),
                            help="fixed in req/s for every candidate: a path never changes the load")
    price = c[5].number_input("GPU price (USD per GPU-hour)", 0.01, 1e4, **state.bind("rec.price", DEFAULT_PRICE),
                              help="your price; the default 2.00 is a chosen round figure, not a quote")
    with st.expander("simulation settings (the CLI's --requests --seed --replications --max-replicas)"):
        s = st.columns(5)
        requests = int(s[0].number_input("requests per simulation", 10, 100_000,
                                         **state.bind("rec.requests", start["requests"])))
        seed = int(s[1].number_input("seed", 0, 2**31 - 1, **state.bind("rec.seed", SEED)))
        reps = int(s[2].number_input("replications", 2, 20, **state.bind("rec.replications", REPLICATIONS),
                                     help="the P99 intervals need at least 2"))
        max_replicas = int(s[3].number_input("search up to replicas", 1, 256,
                                             **state.bind("rec.max_replicas", MAX_REPLICAS)))
        disk = s[4].checkbox("use the result cache", **state.bind("rec.cache", True),
                             help=f"planning's on-disk cache ({DEFAULT_CACHE_DIR}/), shared with the CLI")
    choices = form.Choices(profile, workload, float(qps), float(price), None if ttft_none else float(ttft),
                           None if tpot_none else float(tpot), requests, lengths)
    return choices, seed, reps, max_replicas, disk


def main() -> None:
    st.title("Recommendation")
    st.caption("Which optimisation path serves your model on your GPUs within the P99 SLA at the lowest cost: "
               "every candidate sized to the fewest replicas that meet it, the same answer `tripath recommend` "
               "prints. Defaults: data/scenarios/default.toml.")
    try:
        base, source = load_scenario_dict(BASE)
    except InputError as err:
        st.error(str(err))
        return
    choices, seed, reps, max_replicas, disk = _inputs(base)
    profile = profiles.load_shown(choices.profile)
    if profile is None:
        return
    data = form.scenario(base, choices)
    if choices.ttft_s is None and choices.tpot_ms is None:
        st.error("give at least one SLA term (TTFT or TPOT): with none there is nothing to meet")
        return
    every = candidates(profile)
    runnable = [c for c in every if c.profile_support(profile, data) is None]
    _candidate_list(profile, data, every)
    data_json = json.dumps(data, sort_keys=True)
    text = profiles.profile_text(choices.profile)
    key = json.dumps([data_json, text, choices.qps, choices.price, seed, reps, max_replicas])
    run = st.button("Run", type="primary", key="rec.run")
    if run:
        try:
            with st.spinner(f"sizing {len(runnable)} candidates at {choices.qps:g} req/s (seeded simulations; "
                            "cached after the first run)"):
                result = _recommend(data_json, source, text, choices.profile, choices.qps, choices.price, seed,
                                    reps, max_replicas, disk)
        except (InputError, ValueError) as err:
            st.error(str(err))
            return
        st.session_state[RESULT] = (key, result)
    stored = st.session_state.get(RESULT)
    if stored is None:
        st.info("Pick the model and GPU, the workload, the SLA, the rate and the price, then **Run**.")
    elif stored[0] != key:
        st.info("The inputs changed since the last Run: **Run** again for their answer.")
    else:
        _show(stored[1], max_replicas)
    _memory_section(data_json, source, text, choices.profile, tuple(c.name for c in runnable))
    _downloads(data, None if stored is None or stored[0] != key else stored[1], profile)


def _candidate_list(profile: Any, data: dict[str, Any], every: list[Any]) -> None:
    """Which candidates run on this profile; the others greyed out with the reason (before any Run)."""
    ok = [c.name for c in every if c.profile_support(profile, data) is None]
    st.markdown(f"**Candidates** ({len(ok)} of {len(every)} run on this profile): {', '.join(ok) or 'none'}")
    for c in every:
        reason = c.profile_support(profile, data)
        if reason is not None:
            st.markdown(f":gray[~~{c.name}~~ — not applicable on this profile: {reason}]")


def _value(term: str, ms: float | None) -> str:
    if ms is None:
        return "-"
    scale, unit = TERM_SCALE[term]
    return f"{ms * scale:,.3g} {unit}" if unit == "s" else f"{ms * scale:,.1f} {unit}"


def _terms_table(summary: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for term, t in summary["terms"].items():
        low, high = t["ci_low_ms"], t["ci_high_ms"]
        interval = "-" if low is None and high is None else (
            f"{'n/a' if low is None else _value(term, low)} to {'n/a' if high is None else _value(term, high)}")
        rows.append({"SLA term": f"{TERM_NAMES[term]} P99", "simulated": _value(term, t["p99_ms"]),
                     f"interval ({INTERVAL_METHOD})": interval, "target": _value(term, t["target_ms"]),
                     "margin": "-" if t["margin"] is None else f"{t['margin']:+.0%}",
                     "verdict": "met" if t["over_by"] is None else f"missed by {t['over_by']:.0%}",
                     "binds": "yes" if term == summary["binding_term"] else ""})
    return pd.DataFrame(rows)


def _sized(s: dict[str, Any], price: float | None) -> str:
    cost = "" if s.get("cost_usd_per_hour") is None else (
        f", ${s['cost_usd_per_hour']:,.2f}/h at ${price:,.2f} per GPU-hour")
    return f"{s['replicas']} replica(s) x {s['gpus_per_replica']} GPU(s) = {s['gpus']} GPU(s){cost}"


def _factor(bound: dict[str, Any], what: str, unit: str) -> str:
    met, missed = bound["meets_up_to"], bound["misses_at"]
    if missed is None:
        return f"still meets the SLA with {what} x{met:g} of {unit} (the largest factor searched)"
    return (f"meets the SLA unless {what} {missed - 1.0:.0%} higher than {unit} "
            f"(met at x{met:.3f}, missed at x{missed:.3f})")


def _show(result: dict[str, Any], max_replicas: int) -> None:
    price = result["gpu_price_usd_per_gpu_hour"]
    best, runner, closest = result["recommended"], result["runner_up"], result["closest"]
    st.header("Answer")
    st.caption(f"{result['numbers_from']}; at {result['qps']:g} req/s; P99s are the mean of "
               f"{result['replications']} seeded replications with a 95% Student-t interval. {result['sizing']}.")
    if best is not None:
        st.success(f"Recommended: **{best['candidate']}** — {_sized(best, price)}")
        cols = st.columns([3, 1, 1, 2])
        cols[0].metric("path", best["candidate"])
        cols[1].metric("replicas", best["replicas"])
        cols[2].metric("GPUs", best["gpus"])
        cols[3].metric("cost (USD per hour)", f"{best['cost_usd_per_hour']:,.2f}")
        st.dataframe(_terms_table(best), hide_index=True, key="rec.terms")
        if best.get("remark"):
            st.caption(best["remark"])
        if runner is not None:
            st.markdown(f"**Runner-up:** {runner['candidate']} — {_sized(runner, price)}")
            st.dataframe(_terms_table(runner), hide_index=True, key="rec.runner_terms")
            if runner.get("remark"):
                st.caption(runner["remark"])
        else:
            st.markdown("**Runner-up:** none (no other candidate meets the SLA)")
    else:
        st.error(f"No candidate meets the SLA with up to {max_replicas} replicas.")
        if closest is not None:
            bind = closest["binding_term"]
            by = "" if bind is None or closest["terms"][bind]["over_by"] is None else (
                f": its {TERM_NAMES[bind]} P99 is {closest['terms'][bind]['over_by']:.0%} over the target")
            st.markdown(f"**Closest:** {closest['candidate']} at {closest['searched_replicas']} replica(s){by}")
            st.dataframe(_terms_table(closest), hide_index=True, key="rec.closest_terms")
    robust = result["robustness"]
    rate = f"{result['qps']:g} req/s"
    if robust is not None:
        st.markdown(f"**Robustness** ({robust['candidate']} on {robust['replicas']} replica(s) held fixed, "
                    f"bisected to {robust['tolerance']:.0%}):\n"
                    f"- {_factor(robust['step_costs'], 'step costs are', 'profiled')}\n"
                    f"- {_factor(robust['arrival_rate'], 'the request rate is', rate)}")
    kinds = "; ".join(f"{k}: {', '.join(v)}" for k, v in result["profile"]["section_sources"].items())
    st.caption(f"Numbers: {result['numbers_from']}; per section: {kinds}. {result['go_further']}")
    _pareto(result)
    st.subheader("Every candidate")
    st.dataframe(pd.DataFrame([_row(s) for s in pareto.summaries(result)]), hide_index=True, key="rec.all")
    if result["not_applicable"]:
        st.caption("not applicable: " + "; ".join(f"{k} ({v})" for k, v in result["not_applicable"].items()))


def _row(s: dict[str, Any]) -> dict[str, Any]:
    terms = s["terms"]
    return {"candidate": s["candidate"], "meets the SLA": s["gpus"] is not None,
            "replicas": s["replicas"] if s["gpus"] is not None else None,
            "GPUs": s["gpus"], "USD per hour": s["cost_usd_per_hour"],
            "replicas searched (if missed)": None if s["gpus"] is not None else s["searched_replicas"],
            **{f"{TERM_NAMES[t]} P99 ({TERM_SCALE[t][1]})": (None if v["p99_ms"] is None
                                                             else v["p99_ms"] * TERM_SCALE[t][0])
               for t, v in terms.items()},
            "binding term": TERM_NAMES.get(s["binding_term"] or "", "")}


def _pareto(result: dict[str, Any]) -> None:
    st.subheader("Cost against P99")
    given = [t for t, v in result["sla_ms"].items() if v is not None]
    cols = st.columns(2)
    term = cols[0].radio("P99 of", given, format_func=TERM_NAMES.get, horizontal=True, key="rec.pareto_term")
    y = cols[1].radio("against", list(pareto.AXES), format_func=pareto.AXES.get, horizontal=True,
                      key="rec.pareto_y")
    pts = pareto.points(result, term, y)
    if not pts:
        st.info("no candidate has a P99 for this term")
        return
    fig = pareto.figure(pts, term, y, result["sla_ms"][term], result["numbers_from"])
    st.pyplot(fig)
    st.caption("A label '+N more' stands for candidates at about the same point: every candidate is in the table "
               "below. Hollow points miss the SLA even at the largest replica count searched.")
    st.download_button("Pareto plot (PNG)", png_bytes(fig), "pareto.png", "image/png", key="rec.pareto_png")


def _memory_section(data_json: str, source: str, text: str, name: str, names: tuple[str, ...]) -> None:
    st.subheader("Memory fit per candidate (one replica)")
    try:
        lengths, rows = _memory(data_json, source, text, name, names)
    except (InputError, ValueError) as err:
        st.error(str(err))
        return
    st.caption(f"Requests: mean {lengths['mean_prompt']:,.0f} prompt + {lengths['mean_output']:,.0f} output "
               f"tokens; P99 prompt + output {lengths['p99_total']:,.0f} tokens (of {memory_fit.SAMPLE:,} drawn "
               "as the simulator draws them). The batch that fits is the simulator's rule (max_batch_size or the "
               "KV memory, all tiers with tiering); host and SSD are where a full batch of mean-length requests "
               "would keep its KV. A P99 batch of 0: such a request does not fit at all.")
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="rec.memory")


def vllm_suggestion(result: dict[str, Any], profile: Profile, data: dict[str, Any]) -> str | None:
    """The recommended (else the closest) candidate's serving settings as a vLLM command line with each value's
    source: planning/export.py, the text `tripath recommend --export` writes to vllm.txt."""
    suggestion = recommended_suggestion(result, profile, data)
    return None if suggestion is None else suggestion.text()


def _downloads(data: dict[str, Any], result: dict[str, Any] | None, profile: Profile) -> None:
    st.subheader("Export")
    cols = st.columns(2)
    cols[0].download_button("scenario (TOML)", scenario_toml(data), "scenario.toml", "application/toml",
                            key="rec.toml")
    if result is not None:
        cols[1].download_button("recommendation (JSON)", json.dumps(result, indent=2, sort_keys=True),
                                "recommendation.json", "application/json", key="rec.json")
        command = vllm_suggestion(result, profile, data)
        if command is not None:
            st.markdown("**vLLM command line (a suggestion, not a tested configuration):**")
            st.code(command, language="bash")


main()
