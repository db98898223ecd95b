"""What-ifs: the cross product in order, each point equal to simulating that variant; the load-step trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import SEED as PROFILE
from tripath.planning.scenario_dict import build, with_fields
from tripath.planning.sweep import make_job, run_job
from tripath.planning.whatif import load_step, parse_value, parse_vary, step_trace, whatif
from tripath.simulator.scenario.workload import generate_requests


def scenario() -> dict:
    return {"name": "w", "workload": {"requests": 50, "arrival": {"kind": "poisson", "load_fraction": 0.6},
                                      "prompt_tokens": {"kind": "uniform", "low": 256, "high": 2048},
                                      "output_tokens": {"kind": "uniform", "low": 8, "high": 64}},
            "batching": {"policy": "dynamic", "max_batch_size": 8}, "sla": {"ttft_p99_ms": 3000.0}}


def test_parse_vary_values_and_aliases():
    assert parse_vary("batching.max_wait_ms=0,5,10.5") == ("batching.max_wait_ms", [0, 5, 10.5])
    assert parse_vary("workload.rate=0.5,1") == ("workload.arrival.rate_per_s", [0.5, 1])
    assert parse_value("true") is True and parse_value("chunked") == "chunked"
    with pytest.raises(ValueError, match="FIELD=V1"):
        parse_vary("batching.max_wait_ms")


def test_cross_product_in_order_and_each_point_is_its_variant():
    vary = [("batching.max_wait_ms", [0.0, 20.0]), ("workload.arrival.rate_per_s", [0.05, 0.1, 0.2])]
    result = whatif(scenario(), None, PROFILE, vary, seed=1, replications=2)
    settings = [p["settings"] for p in result.points]
    assert settings == [{"batching.max_wait_ms": w, "workload.arrival.rate_per_s": r}
                        for w in (0.0, 20.0) for r in (0.05, 0.1, 0.2)]
    for point in result.points:
        variant = with_fields(scenario(), {"batching.max_wait_ms": point["settings"]["batching.max_wait_ms"],
                                           "workload.arrival.rate_per_s": point["settings"][
                                               "workload.arrival.rate_per_s"],
                                           "workload.arrival.load_fraction": None})
        direct = run_job(make_job(variant, None, PROFILE, seed=1, replications=2))
        assert point["p99_ms"] == direct["p99_ms"]
        assert point["rate_per_s"] == point["settings"]["workload.arrival.rate_per_s"]
        assert point["p99_ms"]["ttft"]["ci_low"] is not None  # two replications: an interval
    json.dumps(result.to_dict())


def test_bad_value_fails_before_running():
    with pytest.raises(ValueError, match="max_wait_ms"):
        whatif(scenario(), None, PROFILE, [("batching.max_wait_ms", [-1.0])])


def test_step_trace_compresses_arrivals_after_the_step(tmp_path):
    data = with_fields(scenario(), {"workload.requests": 200})
    path = step_trace(data, None, PROFILE, factor=4.0, at_s=100.0, seed=7, folder=tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    sc = build(data, None)
    from tripath.planning.whatif import rate_of

    original = generate_requests(sc.workload, np.random.default_rng(7), rate_of(data, None, PROFILE))
    assert len(rows) == len(original) == 200
    for row, req in zip(rows, original, strict=True):
        t = req.arrival_s if req.arrival_s <= 100.0 else 100.0 + (req.arrival_s - 100.0) / 4.0
        assert row["timestamp"] == pytest.approx(t * 1000.0)
        assert (row["input_length"], row["output_length"]) == (req.prompt_tokens, req.output_tokens)
    assert step_trace(data, None, PROFILE, 4.0, 100.0, 7, tmp_path) == path  # same content, same file


def test_load_step_reports_windows_for_fixed_and_adaptive(tmp_path):
    from tripath.planning.cache import ResultCache

    result = load_step(scenario(), None, PROFILE, factor=3.0, at_s=60.0, window_s=30.0, replications=2,
                       cache=ResultCache(tmp_path))
    assert set(result.series) == {"fixed", "adaptive"}
    assert result.series["fixed"]["policy"] == "dynamic"
    for series in result.series.values():
        assert "error" not in series, series
        windows = series["windows"]
        assert windows[0]["start_s"] == 0.0 and windows[1]["start_s"] == 30.0
        assert sum(w["arrived"] for w in windows) == 2 * 50  # both replication seeds, every request
