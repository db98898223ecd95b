"""First page — Recommendation: which GPU, how many, which path, what it costs and how sure, for your deployment.

Calls tripath.planning.recommend.recommend, the function behind `tripath recommend` (its defaults: seed 0, verdicts
over 4 seeded replications from 1,000 requests each up to 8,000, up to 16 replicas per candidate, every GPU type
and TP degree shipped for the model, cited on-demand prices from data/gpu_prices.toml), on
data/scenarios/default.toml with the choices made here. The answer is cached per input set (st.cache_data) and
planning's on-disk result cache is shared with the CLI, so `make run` and this page reuse each other's simulations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from tripath.app.widgets import memory_fit, pareto, planning_runs, profiles, state
from tripath.app.widgets import recommend_form as form
from tripath.app.widgets.charts import png_bytes
from tripath.core.errors import InputError
from tripath.planning import recommend_text as render
from tripath.planning.cache import DEFAULT_CACHE_DIR, ResultCache
from tripath.planning.candidates import candidates
from tripath.planning.decision import DecisionRule
from tripath.planning.executor import LocalPoolExecutor
from tripath.planning.export.files import recommended_sglang, recommended_suggestion, scenario_toml
from tripath.planning.prices import load_prices
from tripath.planning.recommend import SearchOptions, recommend
from tripath.planning.scenario_dict import canonical, load_scenario_dict
from tripath.profile.catalog import layouts
from tripath.profile.profile import Profile

BASE = "default"
RESULT = "rec.result"  # session_state: (inputs key, JSON-ready Recommendation.to_dict())
# `tripath recommend`'s defaults (tripath/cli/planning_parser.py)
SEED, REPLICATIONS, BUDGET, MAX_REPLICAS = 0, 4, 8000, 16
TERM_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end"}
TERM_UNIT = "ms"  # every latency on this page in milliseconds


def _recommend(data_json: str, source: str, names: tuple[str, ...], qps: float, prices_json: str, seed: int,
               replications: int, budget: int, max_replicas: int, allow_lossy: bool, disk_cache: bool,
               search_batch: bool = True) -> dict[str, Any]:
    """recommend() on these inputs, as JSON-ready data, once per distinct inputs this session: a bar counts the
    searches done in each phase and a Stop button ends the run (tripath/app/widgets/planning_runs.py)."""
    data = json.loads(data_json)
    prices = load_prices().with_overrides(list(json.loads(prices_json).items()))

    def call(executor: Any, cache: ResultCache | None) -> dict[str, Any]:
        options = SearchOptions(seed=seed, rule=DecisionRule(replications, budget), max_replicas=max_replicas,
                                allow_lossy=allow_lossy, batch_sizes=None if search_batch else ())
        rec = recommend(data, source, list(names), qps, prices, options, executor, cache)
        return json.loads(json.dumps(rec.to_dict(), allow_nan=False))

    inputs = {"data": data_json, "names": names, "qps": qps, "prices": prices_json, "budget": budget,
              "max_replicas": max_replicas, "allow_lossy": allow_lossy, "search_batch": search_batch}
    workers = LocalPoolExecutor().workers  # every core, as the CLI
    return planning_runs.run("recommendation", inputs,
                             planning_runs.SweepSettings(seed, replications, workers, disk_cache), call,
                             unit="searches")


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


def _inputs(base: dict[str, Any]) -> tuple[form.Choices, Settings]:
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
    lossy = c[5].checkbox("allow lossy paths", **state.bind("rec.lossy", False),
                          help="KV compression changes the model's answers: searched only when allowed, its published "
                          "quality cost shown beside it")
    family = layouts(profile)
    shipped = load_prices()
    gpus = list(dict.fromkeys(profiles.load(n).key.hardware for n in family))
    g = st.columns([3, 2])
    chosen_gpus = g[0].multiselect("GPU types to choose among", gpus, **state.bind("rec.gpus", gpus),
                                   help="every TP degree shipped for the model on each type is searched")
    with g[1].expander("USD per GPU-hour (on-demand list prices, data/gpu_prices.toml)"):
        prices = {}
        for gpu in gpus:
            known = gpu in shipped.gpu_types and _priced(shipped, gpu)
            value = st.number_input(gpu, 0.01, 1e4, **state.bind(f"rec.price.{gpu}",
                                                                  shipped.price(gpu) if known else 2.0),
                                    help=shipped.source(gpu) if known else "no cited price: give yours")
            prices[gpu] = float(value)
    with st.expander("simulation settings (the CLI's --requests --seed --replications --budget-requests "
                     "--max-replicas --batch-sizes)"):
        s = st.columns(7)
        requests = int(s[0].number_input("requests per replication, first stage", 10, 100_000,
                                         **state.bind("rec.requests", start["requests"]),
                                         help="raised to the 1,000 a P99 needs"))
        seed = int(s[1].number_input("seed", 0, 2**31 - 1, **state.bind("rec.seed", SEED)))
        reps = int(s[2].number_input("replications", 2, 20, **state.bind("rec.replications", REPLICATIONS),
                                     help="the verdict's interval is over replications: at least 2"))
        budget = int(s[3].number_input("most requests per replication", 100, 100_000,
                                       **state.bind("rec.budget", BUDGET),
                                       help="an undecided verdict doubles its requests up to this, then says so"))
        max_replicas = int(s[4].number_input("search up to replicas", 1, 256,
                                             **state.bind("rec.max_replicas", MAX_REPLICAS)))
        disk = s[5].checkbox("use the result cache", **state.bind("rec.cache", True),
                             help=f"planning's on-disk cache ({DEFAULT_CACHE_DIR}/), shared with the CLI")
        batch = s[6].checkbox("search other max batch sizes", **state.bind("rec.batch", True),
                              help="the scenario's max batch size halved, doubled and quadrupled, on every simulated "
                              "row below the cheapest found")
    choices = form.Choices(profile, workload, float(qps), None if ttft_none else float(ttft),
                           None if tpot_none else float(tpot), requests, lengths)
    names = tuple(n for n in family if profiles.load(n).key.hardware in chosen_gpus)
    settings = Settings(names, {gpu: prices[gpu] for gpu in chosen_gpus}, seed, reps, budget, max_replicas,
                        bool(lossy), bool(disk), bool(batch))
    return choices, settings


def _priced(prices: Any, gpu: str) -> bool:
    try:
        prices.price(gpu)
    except InputError:
        return False
    return True


@dataclass(frozen=True)
class Settings:
    """The search's choices beside the scenario's: layouts, prices, and the decision rule's sizes."""

    names: tuple[str, ...]
    prices: dict[str, float]
    seed: int
    replications: int
    budget: int
    max_replicas: int
    allow_lossy: bool
    disk: bool
    search_batch: bool = True


def main() -> None:
    st.title("Recommendation")
    st.caption("Which GPU, how many and which optimisation path serve your model within the P99 SLA at the lowest "
               "cost: every candidate on every GPU type and TP degree sized to the fewest replicas whose P99s meet "
               "it with 95 % confidence, the same answer `tripath recommend` prints. Defaults: "
               "data/scenarios/default.toml.")
    try:
        base, source = load_scenario_dict(BASE)
    except InputError as err:
        st.error(str(err))
        return
    choices, settings = _inputs(base)
    profile = profiles.load_shown(choices.profile)
    if profile is None:
        return
    data = form.scenario(base, choices)
    if choices.ttft_s is None and choices.tpot_ms is None:
        st.error("give at least one SLA term (TTFT or TPOT): with none there is nothing to meet")
        return
    if not settings.names:
        st.error("choose at least one GPU type")
        return
    every = candidates(profile)
    runnable = [c for c in every if c.profile_support(profile, data) is None]
    _candidate_list(profile, data, every)
    data_json = canonical(data)
    text = profiles.profile_text(choices.profile)
    prices_json = json.dumps(settings.prices, sort_keys=True)
    key = json.dumps([data_json, text, choices.qps, prices_json, settings.names, settings.seed,
                      settings.replications, settings.budget, settings.max_replicas, settings.allow_lossy,
                      settings.search_batch])
    run = st.button("Run", type="primary", key="rec.run")
    if run:
        try:
            st.caption(f"Sizing the candidates on {len(settings.names)} GPU layout(s) at {choices.qps:g} req/s: "
                       "seeded simulations, each verdict decided with confidence; cached, so a rerun reads them "
                       "back (`make run` fills the same cache).")
            result = _recommend(data_json, source, settings.names, choices.qps, prices_json, settings.seed,
                                settings.replications, settings.budget, settings.max_replicas, settings.allow_lossy,
                                settings.disk, settings.search_batch)
        except (InputError, ValueError) as err:
            st.error(str(err))
            return
        st.session_state[RESULT] = (key, result)
    stored = st.session_state.get(RESULT)
    if stored is None:
        st.info("Pick the model, the GPU types, the workload, the SLA and the rate, then **Run**.")
    elif stored[0] != key:
        st.info("The inputs changed since the last Run: **Run** again for their answer.")
    else:
        _show(stored[1], settings.max_replicas)
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


def _value(ms: float | None) -> str:
    return "—" if ms is None else f"{ms:,.0f} {TERM_UNIT}"


def _terms_table(summary: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for term, t in summary["terms"].items():
        low, high = t["ci_low_ms"], t["ci_high_ms"]
        interval = "—" if low is None or high is None else f"{low:,.0f} to {high:,.0f} {TERM_UNIT}"
        rows.append({"SLA term": f"{TERM_NAMES[term]} P99", "simulated": _value(t["p99_ms"]),
                     "95 % interval (over replications)": interval, "target": _value(t["target_ms"]),
                     "margin": "—" if t["margin"] is None else f"{t['margin']:+.0%}", "verdict": render.verdict(t),
                     "binds": "yes" if term == summary["binding_term"] else "no"})
    return pd.DataFrame(rows)


def _show(result: dict[str, Any], max_replicas: int) -> None:
    """The answer: the renderer's sentences (tripath/planning/recommend_text.py, the CLI's own) with the page's
    widgets around them (metrics of the recommended row, a terms table under each chosen row)."""
    rule = result["decision_rule"]
    st.header("Answer")
    st.caption(f"{result['numbers_from']}; at {result['qps']:g} req/s. A verdict 'meets' needs the whole 95 % "
               f"interval of the P99 (over {rule['replications']} seeded replications, the first "
               f"{rule['warmup_share']:.0%} of arrivals left out) under the target; requests per replication from "
               f"{rule['tail_minimum_requests']:,}, doubled while undecided up to "
               f"{rule['budget_requests_per_replication']:,}.")
    tables = {"recommended": "rec.terms", "runner_up": "rec.runner_terms", "closest": "rec.closest_terms"}
    for sentence in render.headline(result, max_replicas, markdown=True):
        row = sentence.summary
        if sentence.kind == "recommended" and row is not None:
            st.success(sentence.text)
            cols = st.columns([2, 2, 1, 1, 2])
            cols[0].metric("path", row["candidate"])
            cols[1].metric("GPU", render.where(row))
            cols[2].metric("replicas", row["replicas"])
            cols[3].metric("GPUs", row["gpus"])
            cols[4].metric("cost (USD per hour)", "—" if row["cost_usd_per_hour"] is None
                           else f"{row['cost_usd_per_hour']:,.2f}")
        elif sentence.kind == "none_meets":
            st.error(sentence.text)
        elif sentence.kind == "headroom":
            (st.warning if sentence.warning else st.caption)(sentence.text)
        elif sentence.kind in ("below", "quality"):
            st.caption(sentence.text)
        elif sentence.kind != "term":  # the runner-up, the closest; the term lines are the table below each
            st.markdown(sentence.text)
        if sentence.kind in tables and row is not None:
            st.dataframe(_terms_table(row), hide_index=True, key=tables[sentence.kind])
    robust = render.robustness_lines(result, markdown=True)
    if robust:
        st.markdown("\n".join([robust[0], *(f"- {line}" for line in robust[1:])]))
    batch = render.batch_search_line(result)
    if batch is not None:
        st.caption(batch)
    if result["excluded_lossy"]:
        st.caption("Lossy paths not searched (they change the model's answers; tick 'allow lossy paths'): "
                   + ", ".join(result["excluded_lossy"]))
    kinds = "; ".join(f"{k}: {', '.join(v)}" for k, v in result["profile"]["section_sources"].items())
    st.caption(f"Numbers: {result['numbers_from']}; the recommended profile's sections: {kinds}. "
               f"{result['go_further']}")
    _pareto(result)
    st.subheader("Every candidate on every layout")
    st.dataframe(pd.DataFrame([_row(s) for s in pareto.summaries(result)]), hide_index=True, key="rec.all")


def _row(s: dict[str, Any]) -> dict[str, Any]:
    terms = s["terms"]
    meets = s["gpus"] is not None
    status = ("meets" if meets and not s.get("idle") else "meets, never engaged (not ranked)" if meets
              else "not searched: " + s["pruned"] if s.get("pruned") and not s.get("searched_replicas")
              else (s.get("verdict") or {}).get("verdict", "misses"))
    rejected = s.get("rejected_share")
    return {"candidate": s["candidate"], "GPU": render.where(s),
            "max batch": "—" if s.get("max_batch_size") is None else str(s["max_batch_size"]), "verdict": status,
            "replicas": str(s["replicas"]) if meets else f"> {s['searched_replicas']}" if s["searched_replicas"]
            else "—",
            "GPUs": str(s["gpus"]) if meets else "—",
            "USD per hour": "—" if s.get("cost_usd_per_hour") is None else f"{s['cost_usd_per_hour']:,.2f}",
            "rejected": "—" if rejected is None else f"{rejected:.1%}",
            **{f"{TERM_NAMES[t]} P99 ({TERM_UNIT})": _value(v["p99_ms"]) for t, v in terms.items()},
            "binding term": TERM_NAMES.get(s["binding_term"] or "", "—")}


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
    source: planning/export/vllm.py, the text `tripath recommend --export` writes to vllm.txt."""
    suggestion = recommended_suggestion(result, profile, data)
    return None if suggestion is None else suggestion.text()


def sglang_suggestion(result: dict[str, Any], profile: Profile, data: dict[str, Any]) -> str | None:
    """The same candidate's SGLang command line with each value's source (sglang.txt of `recommend --export`)."""
    suggestion = recommended_sglang(result, profile, data)
    return None if suggestion is None else suggestion.text()


def _downloads(data: dict[str, Any], result: dict[str, Any] | None, profile: Profile) -> None:
    st.subheader("Export")
    cols = st.columns(2)
    cols[0].download_button("scenario (TOML)", scenario_toml(data), "scenario.toml", "application/toml",
                            key="rec.toml")
    if result is not None:
        cols[1].download_button("recommendation (JSON)", json.dumps(result, indent=2, sort_keys=True),
                                "recommendation.json", "application/json", key="rec.json")
        for label, command in (("vLLM", vllm_suggestion(result, profile, data)),
                               ("SGLang", sglang_suggestion(result, profile, data))):
            if command is not None:
                st.markdown(f"**{label} command line (the simulated settings; a suggestion, not a tested "
                            "configuration):**")
                st.code(command, language="bash")


main()
