"""The Recommendation page (the app's first page) through AppTest: the answer is `tripath recommend`'s, an SLA
term set to "none" is gone from the judged SLA, and candidates the profile cannot run are greyed out with the
reason before any Run."""

from __future__ import annotations

import dataclasses
import json

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.app_driver import app, frame
from tripath.app.widgets import recommend_form as form
from tripath.planning import recommend_text as render
from tripath.planning.cache import DEFAULT_CACHE_DIR, ResultCache
from tripath.planning.candidates import candidates
from tripath.planning.decision import DecisionRule
from tripath.planning.executor import make_executor
from tripath.planning.export.files import recommended_suggestion
from tripath.planning.prices import load_prices
from tripath.planning.recommend import SearchOptions, recommend
from tripath.planning.scenario_dict import load_scenario_dict
from tripath.profile.profile import resolve_profile

# a quick case: Llama-3-8B on one A100, Azure conversation lengths, 30 requests asked (a verdict takes 1,000)
QUICK = form.Choices("published-llama3-8b-a100", "azure-conv-2023", qps=2.0, ttft_s=5.0, tpot_ms=None,
                     requests=30)
MAX_REPLICAS, REPLICATIONS, BUDGET, PRICE = 2, 2, 1000, 3.0


def _choose(at: AppTest, choices: form.Choices, max_replicas: int) -> AppTest:
    at.selectbox(key="rec.profile").set_value(choices.profile)
    at.run()
    at.selectbox(key="rec.workload").set_value(choices.workload)
    at.number_input(key="rec.qps").set_value(choices.qps)
    at.number_input(key="rec.price.a100-80gb").set_value(PRICE)
    at.number_input(key="rec.replications").set_value(REPLICATIONS)
    at.number_input(key="rec.budget").set_value(BUDGET)
    at.checkbox(key="rec.ttft_none").set_value(choices.ttft_s is None)
    if choices.ttft_s is not None:
        at.number_input(key="rec.ttft").set_value(choices.ttft_s)
    at.checkbox(key="rec.tpot_none").set_value(choices.tpot_ms is None)
    if choices.tpot_ms is not None:
        at.number_input(key="rec.tpot").set_value(choices.tpot_ms)
    at.number_input(key="rec.requests").set_value(choices.requests)
    at.number_input(key="rec.max_replicas").set_value(max_replicas)
    at.run()
    assert not at.exception, at.exception
    return at


def _expected(choices: form.Choices, max_replicas: int) -> dict:
    base, source = load_scenario_dict("default")
    data = form.scenario(base, choices)
    prices = load_prices().with_overrides([("a100-80gb", PRICE)])
    options = SearchOptions(seed=0, rule=DecisionRule(REPLICATIONS, BUDGET), max_replicas=max_replicas)
    rec = recommend(data, source, [choices.profile], choices.qps, prices, options, make_executor("local"),
                    ResultCache(DEFAULT_CACHE_DIR))
    return json.loads(json.dumps(rec.to_dict(), allow_nan=False))


def test_first_page_is_the_recommendation_with_the_default_scenario() -> None:
    at = app()
    assert [t.value for t in at.title] == ["Recommendation"]
    base, _ = load_scenario_dict("default")
    assert at.selectbox(key="rec.profile").value == base["profile"]
    assert at.selectbox(key="rec.workload").value == base["workload"]["prompt_tokens"]["trace"]
    assert at.number_input(key="rec.qps").value == base["workload"]["arrival"]["rate_per_s"]
    assert at.number_input(key="rec.ttft").value == base["sla"]["ttft_p99_ms"] / 1000.0
    assert at.number_input(key="rec.tpot").value == base["sla"]["tpot_p99_ms"]


@pytest.mark.slow  # 44 s on a loaded 2-core machine
def test_none_sla_term_is_removed_and_the_answer_is_recommends() -> None:
    at = _choose(app(), QUICK, MAX_REPLICAS)
    at.button(key="rec.run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    _, shown = at.session_state["rec.result"]
    expected = _expected(QUICK, MAX_REPLICAS)
    assert shown == expected
    # the TPOT term is not in the judged SLA at all, nor in any candidate's terms, nor in the terms table
    assert shown["sla_ms"]["tpot"] is None
    assert all("tpot" not in s["terms"] for s in [shown["recommended"], *shown["others"]] if s)
    best = expected["recommended"]
    assert best is not None
    assert list(frame(at, "SLA term")["SLA term"]) == ["TTFT P99"]
    assert [m.value for m in at.metric][:4] == [best["candidate"], "a100-80gb TP1", str(best["replicas"]),
                                                 str(best["gpus"])]
    assert at.success[0].value == render.headline(expected, MAX_REPLICAS, markdown=True)[0].text
    assert at.success[0].value.startswith(f"**Recommended:** **{best['candidate']}** on a100-80gb TP1 ("
                                          f"{QUICK.profile}, max batch {best['max_batch_size']}): {best['replicas']} "
                                          "replica(s)")
    assert f"${best['cost_usd_per_hour']:,.2f}/h at $3 per GPU-hour" in at.success[0].value
    # the export shows the recommended candidate's vLLM and SGLang suggestions, the text `recommend --export` writes
    data = form.scenario(load_scenario_dict("default")[0], QUICK)
    suggestion = recommended_suggestion(expected, resolve_profile(QUICK.profile), data)
    assert at.code[0].value == suggestion.text().rstrip("\n") and len(at.code) == 2
    assert "vllm serve" in at.code[0].value and f"# candidate: {best['candidate']}" in at.code[0].value
    assert "sglang.launch_server" in at.code[1].value


@pytest.mark.slow  # 111 s on a loaded 2-core machine
def test_ticking_none_changes_the_judged_sla() -> None:
    with_tpot = dataclasses.replace(QUICK, tpot_ms=1.0)  # 1 ms per token: nothing can meet it
    at = _choose(app(), with_tpot, MAX_REPLICAS)
    at.button(key="rec.run").click().run()
    _, shown = at.session_state["rec.result"]
    assert shown["sla_ms"]["tpot"] == 1.0
    assert shown["recommended"] is None and shown["closest"] is not None
    assert shown["closest"]["binding_term"] == "tpot"
    assert "No candidate meets the SLA" in at.error[0].value


def test_candidates_the_profile_cannot_run_are_greyed_out_with_the_reason_before_run() -> None:
    at = app()
    at.selectbox(key="rec.profile").set_value("seed-llama2-70b-a100").run()
    assert not at.exception, at.exception
    profile = resolve_profile("seed-llama2-70b-a100")
    base, _ = load_scenario_dict("default")
    data = form.scenario(base, form.Choices("seed-llama2-70b-a100", "mooncake-conversation", 0.5, 20.0, 100.0, 1000))
    every = candidates(profile)
    missing = {c.name: c.profile_support(profile, data) for c in every if c.profile_support(profile, data)}
    assert missing, "the seed profile has no compression modes: its compression candidates cannot run"
    greyed = [m.value for m in at.markdown if m.value.startswith(":gray[")]
    assert greyed == [f":gray[~~{name}~~ — not applicable on this profile: {why}]" for name, why in missing.items()]
    assert "rec.result" not in at.session_state  # nothing ran
    # the memory breakdown lists only the candidates that run
    assert list(frame(at, "weights GiB")["candidate"]) == [c.name for c in every if c.name not in missing]
