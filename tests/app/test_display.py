"""tripath/app/widgets/display.py: latencies in ms, "—" with a reason instead of None/NaN, intervals shown only
when they hold their point, and the rule that a candidate rejecting more than 1 % of its requests is never shown
or coloured as a success (on the matrix page too, through AppTest with a made-up result: no simulation)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.app.app_driver import app, frame
from tripath.app.widgets import charts, display
from tripath.core import metrics

# ---- numbers


def test_latencies_are_ms_and_a_missing_one_is_a_dash() -> None:
    assert display.ms(1234.4) == "1,234 ms"
    assert display.ms(86.44) == "86.4 ms"
    assert display.ms(25_370.0) == "25,370 ms"  # never seconds on one page and ms on another
    assert display.ms(12.0, signed=True) == "+12.0 ms"
    for nothing in (None, math.nan, np.float64("nan"), pd.NA):
        assert display.ms(nothing) == display.DASH
        assert display.pct(nothing) == display.DASH
    assert display.pct(0.604) == "60 %" and display.pct(0.55, signed=True) == "+55 %"


def test_an_interval_that_does_not_hold_its_point_is_not_shown() -> None:
    # tripath/core/metrics.py: the point is the mean of per-replication percentiles, the interval is over the
    # pooled requests; three replications of 1..100 ms give a P99.9 of 99.9 ms and a pooled lower end of 100 ms
    est = metrics.percentile_estimate([np.arange(1.0, 101.0)] * 3, "p999")
    assert est["mean"] < est["ci_low"]  # the estimator's own output: the case the page must not draw
    low, high, why = display.shown_interval(est)
    assert low is None and high is None and why.startswith("interval not shown")
    text = display.estimate_text(est, "P99.9")
    assert text.startswith("P99.9 99.9 ms [95% n/a: interval not shown") and "100" in text
    assert display.interval_text(est) == "n/a"
    points, lows, highs = display.plotted([est])
    assert points == [pytest.approx(99.901)] and math.isnan(lows[0]) and math.isnan(highs[0])


@pytest.mark.parametrize("est, shown, reason", [
    ({"mean": 120.0, "ci_low": 100.0, "ci_high": 150.0}, "P99 120 ms [95% 100, 150 ms]", ""),
    ({"mean": 120.0, "ci_low": 100.0, "ci_high": None}, "P99 120 ms [95% 100, n/a ms]", "for an upper end"),
    ({"mean": 120.0, "ci_low": None, "ci_high": None}, "P99 120 ms [95% n/a: too few requests", "either end"),
    ({"mean": 160.0, "ci_low": 100.0, "ci_high": 150.0}, "P99 160 ms [95% n/a: interval not shown", "outside"),
    ({"mean": None, "ci_low": None, "ci_high": None}, f"P99 {display.DASH} (no request completed)", "no request"),
    (None, f"P99 {display.DASH} (no request completed)", "no request"),
])
def test_estimate_text(est: dict[str, Any] | None, shown: str, reason: str) -> None:
    assert display.estimate_text(est).startswith(shown)
    assert reason in display.why(est)


def test_every_interval_shown_holds_its_point() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        runs = [rng.lognormal(3.0, 1.0, int(rng.integers(5, 400))) for _ in range(int(rng.integers(1, 5)))]
        for level in ("p50", "p99", "p999"):
            est = metrics.percentile_estimate(runs, level)
            low, high, _ = display.shown_interval(est)
            assert low is None or low <= est["mean"]
            assert high is None or est["mean"] <= high


def test_frame_leaves_no_missing_value() -> None:
    table = display.frame([{"a": 1.5, "b": "x", "n": 3, "ok": True, "note": ""},
                           {"a": None, "b": None, "n": 4, "ok": None, "note": "why"},
                           {"a": math.nan, "b": "z", "n": 5, "ok": False, "note": "because"}], {"a": ",.1f"})
    assert display.has_missing(table) == []
    assert table["a"].tolist() == ["1.5", display.DASH, display.DASH]
    assert table["b"].tolist() == ["x", display.DASH, "z"]
    assert table["n"].tolist() == [3, 4, 5]  # a complete numeric column stays numeric (sortable)
    assert table["ok"].tolist() == ["yes", display.DASH, "no"]
    assert table["note"].tolist() == [display.DASH, "why", "because"]


# ---- the rejected-not-green rule

REJECTING = {"candidate": "baseline", "meets_sla": True, "sla_margin": 0.55, "rejected_share": 0.6}  # meets_sla
# deliberately inconsistent (an old result, a row built elsewhere): the page must still call it a miss
MEETING = {"candidate": "tiered", "meets_sla": True, "sla_margin": 0.2, "rejected_share": 0.005}
MISSING = {"candidate": "speculative", "meets_sla": False, "sla_margin": -0.3, "rejected_share": 0.0}


def test_a_rejecting_candidate_is_never_a_success() -> None:
    assert not display.success(REJECTING)
    assert display.verdict(REJECTING) == "misses: rejects 60 %"
    assert display.margin_text(REJECTING) == "rejects 60 %"
    assert display.colour_margin(REJECTING) == -1.0  # the red end, whatever its +55 % margin
    assert display.success(MEETING) and display.verdict(MEETING) == "meets"
    assert display.colour_margin(MEETING) == pytest.approx(0.2)
    assert display.verdict(MISSING) == "misses: a P99 over its target" and display.colour_margin(MISSING) < 0
    assert display.margin_text(MISSING) == "over by 30 %"  # no bare negative number
    assert display.verdict({"candidate": "x", "not_applicable": "no section"}).startswith(display.DASH)
    assert display.colour_margin({"candidate": "x", "not_applicable": "no section"}) is None


def test_the_heatmap_colours_a_rejecting_candidate_red() -> None:
    rows = [REJECTING, MEETING, MISSING]
    fig = charts.matrix_heatmap([r["candidate"] for r in rows], ["cell"],
                                [[display.colour_margin(r)] for r in rows], [["rej 60%"], ["★"], [""]], "test")
    image = fig.axes[0].images[0]
    colours = image.cmap(image.norm(np.ma.masked_invalid(image.get_array())))
    red, green = colours[0][0], colours[1][0]
    assert red[0] > red[1] and green[1] > green[0]  # RdYlGn: the rejecting row on the red side, not the green


def _matrix_result() -> dict[str, Any]:
    """A decision matrix as tripath.planning.matrix.Matrix.to_dict gives it: one cell, three candidates, the
    baseline with +55 % margin over the requests it served while rejecting 60 % (the reported case)."""
    def row(r: dict[str, Any]) -> dict[str, Any]:
        p99 = {t: {"mean": v, "ci_low": None, "ci_high": None} for t, v in (("ttft", 900.0), ("tpot", 40.0),
                                                                             ("e2e", None))}
        return {"paths": [], "note": "", **r, "gpus": 1, "replicas": 1, "p99_ms": p99, "peak_kv_bytes": 2**30}

    cell = {"scenario": "very-long-single-gpu", "sla_ms": {"ttft": 2000.0, "tpot": 100.0, "e2e": None}, "gpus": 1,
            "rate_per_s": 0.01, "recommended": "tiered", "runner_up": None, "best_single_path": "tiered",
            "closest_single_path": "tiered", "seed_recommends": "tiered", "seed_agrees": True,
            "why_not_seed": None, "candidates": [row(REJECTING), row(MEETING), row(MISSING)]}
    return {"profile": {"key": "test", "source": "seed"}, "numbers_from": "made up for the test", "cells": [cell]}


def test_the_matrix_page_shows_a_rejecting_candidate_as_a_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    import tripath.planning.matrix

    monkeypatch.setattr(tripath.planning.matrix, "decision_matrix",
                        lambda *args, **kwargs: SimpleNamespace(to_dict=_matrix_result))
    at = app("matrix")
    at.checkbox(key="matrix.cache").uncheck()
    at.button(key="matrix_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    margins = frame(at, "very-long-single-gpu").set_index("candidate")
    assert margins.loc["baseline", "very-long-single-gpu"] == "rejects 60 %"  # not "+55 %"
    assert margins.loc["tiered", "very-long-single-gpu"] == "+20 % ★"
    cell = frame(at, "verdict").set_index("candidate")
    assert cell.loc["baseline", "verdict"] == "misses: rejects 60 %"
    assert cell.loc["baseline", "rejected"] == "60.0 %"
    assert cell.loc["tiered", "verdict"] == "meets"
    assert cell.loc["baseline", "end-to-end P99 (ms)"] == display.DASH
    for table in at.dataframe:
        assert display.has_missing(table.value) == []
