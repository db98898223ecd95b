"""One renderer for the recommendation's sentences (tripath/planning/recommend_text.py): `tripath recommend` prints
them and the app's Recommendation page shows them, equal but for markdown emphasis. On a hand-made recommendation
(recommend() replaced), so no simulation runs."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.app.app_driver import app
from tests.cli.test_planning_cli import run, scenario_file
from tripath.planning import export
from tripath.planning import recommend as recommend_module
from tripath.planning import recommend_text as render
from tripath.planning.recommend import RowSummary

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
    robust = {"candidate": "baseline", "replicas": 2, "tolerance": 0.02, "max_factor": 4.0,
              "step_costs": {"meets_up_to": 1.2, "misses_at": 1.25},
              "arrival_rate": {"meets_up_to": 4.0, "misses_at": None}}
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
            "headroom": {"least": "step_costs", "headroom": 0.05 if thin else 0.2, "thin": thin} if meets else None,
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
