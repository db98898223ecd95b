"""One renderer for the recommendation's sentences (tripath/planning/recommend_text.py): `tripath recommend` prints
them and the app's Recommendation page shows them, equal but for markdown emphasis. On a hand-made recommendation
(recommend() replaced), so no simulation runs."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from tests.app.app_driver import app
from tests.cli.test_planning_cli import run, scenario_file
from tripath.planning import recommend as recommend_module
from tripath.planning import recommend_text as render
from tripath.planning.export import files as export
from tripath.planning.recommend import Layout, RowSummary
from tripath.profile.profile import resolve_profile

MAX_REPLICAS = 2


def _summary(candidate: str, replicas: int | None, verdict: str, p99: float, **extra: Any) -> dict[str, Any]:
    margin = (1000.0 - p99) / 1000.0
    term = {"p99_ms": p99, "ci_low_ms": p99 - 50.0, "ci_high_ms": p99 + 50.0, "target_ms": 1000.0,
            "margin": margin, "verdict": verdict, "over_by": None if margin >= 0 else -margin}
    gpus = None if replicas is None else replicas
    return {"id": f"{candidate} on a100", "candidate": candidate, "paths": [], "max_batch_size": 64,
            "layout": {"profile": "published-llama3-8b-a100", "gpu": "a100-80gb", "tp": 1,
                       "profile_key": "k", "usd_per_gpu_hour": 3.0, "price_source": "test"},
            "replicas": replicas, "gpus": gpus, "gpus_per_replica": 1, "searched_replicas": replicas or 2,
            "cost_usd_per_hour": None if gpus is None else gpus * 3.0,
            "usd_per_million_output_tokens": None if gpus is None else 1.25,
            "terms": {"ttft": term}, "binding_term": "ttft", "rejected_share": 0.0,
            "verdict": {"verdict": verdict}, "verdict_below": None, "quality_loss": None, "idle": None,
            "pruned": None, "remark": None, "not_applicable": None, **extra}


def _result(meets: bool, thin: bool = False) -> dict[str, Any]:
    best = _summary("baseline", 2, "meets", 600.0,
                    verdict_below={"why": "at 1 replica(s) the TTFT P99 misses"})
    runner = _summary("speculative", 2, "meets", 500.0,
                      quality_loss={"value": 0.61, "unit": "HumanEval points", "source": "published"})
    closest = _summary("speculative", None, "misses", 1300.0)
    robust = {"candidate": "baseline", "replicas": 2, "grid_step": 0.05, "max_factor": 4.0,
              "requests_per_replication": 1000, "replications": 2,
              "step_costs": {"meets_up_to": 1.2, "misses_at": 1.25, "estimate": 1.23, "confident": 1.1,
                             "binding_term": "ttft"},
              "arrival_rate": {"meets_up_to": 4.0, "misses_at": None, "estimate": 4.0, "confident": 4.0,
                               "binding_term": None}}
    return {"scenario": "small", "qps": 0.5, "sla_ms": {"ttft": 1000.0, "tpot": None, "e2e": None},
            "layouts": [best["layout"]], "gpu_price_usd_per_gpu_hour": {"a100-80gb": 3.0},
            "profile": {"key": "k", "source": "published", "section_sources": {"costs": ["published"]}},
            "numbers_from": "simulated on 'published' profile published-llama3-8b-a100",
            "decision_rule": {"replications": 2, "warmup_share": 0.1, "tail_minimum_requests": 1000,
                              "budget_requests_per_replication": 1000},
            "allow_lossy": False, "excluded_lossy": [], "batch_search": {"sizes": [], "searched": 0,
                                                                         "met_cheaper": 0},
            "meets_sla": meets, "recommended": best if meets else None, "runner_up": runner if meets else None,
            "closest": None if meets else closest, "robustness": robust if meets else None,
            "headroom": {"least": "step_costs", "headroom": 0.05 if thin else 0.2, "confident": 0.02,
                         "thin": thin} if meets else None,
            "not_applicable": {}, "others": [], "go_further": "go further"}


class _Canned:
    def __init__(self, result: dict[str, Any]) -> None:
        self.result = result

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.result)


@pytest.mark.parametrize("meets,thin", [(True, False), (True, True), (False, False)])
def test_markdown_and_plain_are_the_same_sentences(meets: bool, thin: bool) -> None:
    result = _result(meets, thin)
    for summary in (result["recommended"], result["runner_up"], result["closest"]):
        if summary is not None:  # the hand-made rows have the real shape
            assert RowSummary.from_dict(summary).to_dict() == summary
    plain = render.headline(result, MAX_REPLICAS)
    marked = render.headline(result, MAX_REPLICAS, markdown=True)
    assert [s.kind for s in plain] == [s.kind for s in marked]
    assert [s.text for s in plain] == [render.strip_markdown(s.text) for s in marked]
    assert render.robustness_lines(result) == [render.strip_markdown(t)
                                               for t in render.robustness_lines(result, markdown=True)]
    kinds = {s.kind for s in plain}
    if meets:
        assert {"recommended", "term", "headroom", "runner_up", "below", "quality"} <= kinds
        assert ("WARNING" in next(s.text for s in plain if s.kind == "headroom")) == thin
    else:
        assert kinds == {"none_meets", "closest", "term"}
        assert "MISSES by 30%" in next(s.text for s in plain if s.kind == "term")


@pytest.mark.parametrize("meets", [True, False])
def test_the_cli_prints_and_the_app_shows_the_renderers_sentences(meets, capsys, tmp_path, monkeypatch):
    result = _result(meets, thin=True)
    monkeypatch.setattr(recommend_module, "recommend", lambda *args, **kwargs: _Canned(result))
    monkeypatch.setattr(export, "recommended_suggestion", lambda *args: None)
    monkeypatch.setattr(export, "recommended_sglang", lambda *args: None)
    code, out, _ = run(capsys, "recommend", scenario_file(tmp_path), "--max-replicas", str(MAX_REPLICAS),
                       "--replications", "2", "--no-cache", "--workers", "1")
    assert code == 0
    printed = out.splitlines()
    plain = render.headline(result, MAX_REPLICAS)
    assert render.headline_text(result, MAX_REPLICAS) == printed[printed.index("") + 1:][:len(plain)]
    for line in render.robustness_lines(result):
        assert line in out

    at = app()
    at.number_input(key="rec.max_replicas").set_value(MAX_REPLICAS)
    at.run()
    at.button(key="rec.run").click().run()
    assert not at.exception, at.exception
    shown = [e.value for kind in ("success", "error", "warning", "caption", "markdown")
             for e in getattr(at, kind)]
    shown_plain = {render.strip_markdown(v) for v in shown}
    for sentence in plain:
        if sentence.kind != "term":  # the app tabulates the term lines (their verdicts: render.verdict)
            assert sentence.text in shown_plain, sentence.text
    assert "\n".join(render.robustness_lines(result)[:1]) in "\n".join(shown_plain) or not meets


def test_the_shape_names_attention_data_parallelism_only_above_one_rank() -> None:
    dense = {"gpu": "a100-80gb", "tp": 4}  # a layout dict written before attention_dp existed
    assert render.shape(dense) == "a100-80gb TP4"
    assert render.shape({"gpu": "h200", "tp": 8, "attention_dp": 1, "expert_parallel": True}) == "h200 TP8 EP"
    assert render.shape({"gpu": "h200", "tp": 1, "attention_dp": 8, "expert_parallel": True}) == "h200 TP1 DP8 EP"
    assert render.shape({"gpu": "h200", "tp": 2, "attention_dp": 4, "expert_parallel": False}) == "h200 TP2 DP4"
    summary = _summary("baseline", 2, "meets", 600.0, gpus_per_replica=8)
    summary["layout"] = {**summary["layout"], "gpu": "h200", "tp": 1, "attention_dp": 8, "expert_parallel": True}
    summary["gpus"] = 16
    assert render.sized(summary).startswith("baseline on h200 TP1 DP8 EP (published-llama3-8b-a100, max batch 64): "
                                            "2 replica(s) x 8 GPU(s) = 16 GPU(s)")


def test_the_layout_dict_carries_attention_dp_beside_the_tp() -> None:
    base = resolve_profile("aic-qwen3-235b-a22b-tp8-h200-fp8-ep")
    plain = Layout("aic-qwen3-235b-a22b-tp8-h200-fp8-ep", base, 3.0, "test").to_dict()
    assert (plain["tp"], plain["attention_dp"], plain["expert_parallel"]) == (8, 1, True)
    dp = dataclasses.replace(base, key=dataclasses.replace(base.key, tp=1, attention_dp=8))
    layout = Layout("aic-qwen3-235b-a22b-dp8-h200-fp8-ep", dp, 3.0, "test").to_dict()
    assert set(layout) == set(plain)  # the same keys, every one kept
    assert (layout["tp"], layout["attention_dp"], layout["profile_key"]) == (1, 8, dp.key_str())
    assert render.shape(layout) == "h200 TP1 DP8 EP" and render.shape(plain) == "h200 TP8 EP"


def test_the_app_names_attention_data_parallelism_in_a_profiles_label() -> None:
    from tripath.app.widgets.recommend_form import profile_label

    base = resolve_profile("aic-qwen3-235b-a22b-tp8-h200-fp8-ep")
    dp = dataclasses.replace(base.key, tp=1, attention_dp=8)
    assert profile_label("x", base.key, "aic") == ("qwen3-235b-a22b on h200, TP8, fp8 weights, expert parallel "
                                                   "(aic numbers) [x]")
    assert profile_label("y", dp, "aic") == ("qwen3-235b-a22b on h200, TP1, attention data parallel 8, fp8 weights, "
                                             "expert parallel (aic numbers) [y]")
