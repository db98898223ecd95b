"""Metrics over hand-built records (no SimPy), the replication estimate, the summary and output files."""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import numpy as np
import pytest

from tests.timing import slack
from tripath.core import metrics
from tripath.core.metrics import estimate
from tripath.core.records import COMPLETED, ReplicaStats, RequestRecord, rejected_record
from tripath.profile.profile import resolve_profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import load_scenario
from tripath.simulator.summary import summary, write_outputs


def rec(i: int, arrival: float, admitted: float, first: float, finish: float, output: int) -> RequestRecord:
    return RequestRecord(i, "default", arrival, 100, output, 0, admitted, first, finish, COMPLETED)


RECORDS = [
    rec(0, 0.0, 0.0, 0.1, 0.5, 5),  # ttft 0.1, tpot 0.1, e2e 0.5, wait 0
    rec(1, 1.0, 1.5, 1.7, 2.0, 4),  # ttft 0.7, tpot 0.1, e2e 1.0, wait 0.5
    rec(2, 2.0, 2.0, 2.3, 2.3, 1),  # ttft 0.3, no tpot, e2e 0.3, wait 0
    rejected_record(3, "default", 3.0, 5000, 10, "too big"),
]


def test_per_request_latencies():
    assert metrics.latencies(RECORDS, "ttft") == pytest.approx([0.1, 0.7, 0.3])
    assert metrics.latencies(RECORDS, "tpot") == pytest.approx([0.1, 0.1])  # the 1-token request has none
    assert metrics.latencies(RECORDS, "e2e") == pytest.approx([0.5, 1.0, 0.3])
    assert metrics.latencies(RECORDS, "queueing") == pytest.approx([0.0, 0.5, 0.0])
    with pytest.raises(ValueError, match="unknown metric"):
        metrics.latencies(RECORDS, "latency")


def test_percentiles_interpolate_linearly_and_are_nan_when_empty():
    values = np.arange(1.0, 101.0)  # 1..100: P50 = 50.5, P90 = 90.1, P99 = 99.01, P99.9 = 99.901
    p = metrics.percentiles(values)
    assert p == pytest.approx({"p50": 50.5, "p90": 90.1, "p99": 99.01, "p999": 99.901})
    assert all(math.isnan(v) for v in metrics.percentiles(np.array([])).values())


def test_counts_throughput_utilisation():
    assert metrics.counts(RECORDS) == {"arrived": 4, "completed": 3, "rejected": 1}
    assert metrics.makespan(RECORDS) == pytest.approx(2.3)  # first arrival 0 .. last finish 2.3
    tp = metrics.throughput(RECORDS)
    assert tp["requests_per_s"] == pytest.approx(3 / 2.3)
    assert tp["output_tokens_per_s"] == pytest.approx(10 / 2.3)
    stats = [ReplicaStats(0, 1.15, 10, 3, 0, 1), ReplicaStats(1, 0.0, 0, 0, 0, 1)]
    assert metrics.utilisation(RECORDS, stats) == pytest.approx([0.5, 0.0])


def test_sla_attainment_counts_rejections_as_misses():
    got = metrics.sla_attainment(RECORDS, ttft_ms=500.0, tpot_ms=101.0, e2e_ms=600.0)
    # ttft <= 0.5: requests 0 and 2 of 4; tpot <= 0.101: 0, 1 and 2 (vacuous); e2e <= 0.6: 0 and 2
    assert got["ttft"] == pytest.approx(0.5)
    assert got["tpot"] == pytest.approx(0.75)
    assert got["e2e"] == pytest.approx(0.5)
    assert got["all"] == pytest.approx(0.5)
    partial = metrics.sla_attainment(RECORDS, ttft_ms=800.0)
    assert partial == {"ttft": 0.75, "tpot": None, "e2e": None, "all": 0.75}
    assert metrics.sla_attainment(RECORDS)["all"] is None


def test_estimate_student_t_interval():
    ci = estimate([1.0, 2.0, 3.0], low=None)
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t(0.975, 2) x sd / sqrt(n)
    assert ci == pytest.approx({"mean": 2.0, "ci_low": 2.0 - half, "ci_high": 2.0 + half})
    assert estimate([5.0]) == {"mean": 5.0, "ci_low": None, "ci_high": None}
    assert estimate([math.nan]) == {"mean": None, "ci_low": None, "ci_high": None}


def test_estimate_interval_is_cut_to_the_quantitys_range():
    """A skewed throughput or utilisation never shows an interval end outside what the quantity can take."""
    half = 12.706204736174705 * math.sqrt(0.5 * (0.1 - 0.9) ** 2) / math.sqrt(2)  # t(0.975, 1) x sd / sqrt(2)
    assert 0.5 - half < 0.0 and 0.5 + half > 1.0  # the uncut interval leaves [0, 1] at both ends
    assert estimate([0.1, 0.9], low=None) == pytest.approx({"mean": 0.5, "ci_low": 0.5 - half, "ci_high": 0.5 + half})
    assert estimate([0.1, 0.9]) == pytest.approx({"mean": 0.5, "ci_low": 0.0, "ci_high": 0.5 + half})
    assert estimate([0.1, 0.9], high=1.0) == pytest.approx({"mean": 0.5, "ci_low": 0.0, "ci_high": 1.0})
    # an interval inside the range is unchanged
    assert estimate([10.0, 11.0, 12.0]) == estimate([10.0, 11.0, 12.0], low=None)
    assert estimate([1.0, 2.0, 3.0])["ci_low"] == 0.0


def test_the_t_quantile_is_scipy_stats_bit_for_bit():
    """estimate() takes stdtrit(df, q) from scipy.special instead of importing scipy.stats for t.ppf(q, df)."""
    from scipy import stats
    from scipy.special import stdtrit

    qs = [0.5, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999, 1e-6, 0.025]
    dfs = [*range(1, 200), 255, 1000, 4095, 10**5, 10**7]
    for q in qs:
        for df in dfs:
            assert stdtrit(df, q).tobytes() == np.float64(stats.t.ppf(q, df)).tobytes(), (q, df)
    values = [1.0, 2.5, 2.25, 7.0, 3.125]
    finite = np.array(values)
    by_stats = float(stats.t.ppf(0.975, finite.size - 1) * finite.std(ddof=1) / math.sqrt(finite.size))
    assert estimate(values)["ci_high"] == float(finite.mean()) + by_stats


def test_simulate_imports_no_heavy_module_it_does_not_use():
    """`tripath simulate` on a shipped scenario loads neither scipy.stats nor the engine, app or planning stacks."""
    import subprocess
    import sys

    code = ("import sys; from tripath.cli.main import main; main(['simulate', 'quickstart', '--replications', '2']); "
            "print(' '.join(sorted(m for m in ('scipy.stats', 'torch', 'matplotlib', 'streamlit', 'ray', 'pandas') "
            "if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=slack(40))
    assert out.stdout.splitlines()[-1] == ""


def test_summary_and_outputs_round_trip(tmp_path):
    scenario = load_scenario("quickstart")
    scenario = dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, requests=60))
    result = simulate(scenario, resolve_profile("seed-llama2-70b-a100"), seed=3, replications=2)
    paths = write_outputs(result, tmp_path / "out")
    written = json.loads(paths["summary"].read_text())
    assert written["profile"] == {"key": "a100-80gb/llama-2-70b/fp16/tp1/seed", "source": "seed"}
    assert written["seed"] == 3 and written["replications"] == 2
    assert written["counts"]["arrived"] == 120
    assert written["counts"]["arrived"] == written["counts"]["completed"] + written["counts"]["rejected"]
    p99 = [metrics.percentiles(metrics.latencies(run.records, "ttft"))["p99"] * 1000 for run in result.runs]
    assert written["latency_ms"]["ttft"]["p99"]["mean"] == pytest.approx(np.mean(p99))
    assert set(written["latency_ms"]) == {"ttft", "tpot", "e2e", "queueing"}
    assert written["extrapolations"]["decode_queries"] > 0
    assert written == json.loads(json.dumps(summary(result), default=str).replace("NaN", "null"))
    with paths["records"].open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 120
    first = result.runs[1].records[0]
    row = next(r for r in rows if r["replication"] == "1" and r["request_id"] == str(first.request_id))
    assert float(row["finish_s"]) == first.finish_s  # repr floats read back exactly
    assert not list(tmp_path.joinpath("out").glob("*.tmp"))  # no temp files left behind


def test_quantile_interval_by_hand_for_the_median_of_ten():
    """B ~ Binomial(10, 0.5): P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2) = 56/1024, so l = 2; P(B <= 7) = 968/1024 <
    0.975 <= P(B <= 8) = 1013/1024, so u = 9: the interval is [x(2), x(9)], coverage (1013 - 11) / 1024."""
    values = np.array([10.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0])
    assert metrics.quantile_interval(values, 0.5) == (2.0, 9.0)
    assert metrics.quantile_interval(np.array([]), 0.5) == (None, None)


def test_quantile_interval_p99_needs_368_values_for_its_upper_end():
    """P(B <= n - 1) = 1 - 0.99^n >= 0.975 first at n = 368 (0.99^367 = 0.02501, 0.99^368 = 0.02476)."""
    assert metrics.quantile_interval(np.arange(1.0, 368.0), 0.99)[1] is None
    low, high = metrics.quantile_interval(np.arange(1.0, 369.0), 0.99)
    assert high == 368.0 and low is not None and low < high


def test_quantile_interval_covers_the_true_quantile_at_least_95_percent():
    """Exponential(1) draws, n = 500: the true P99 is ln(100); over 2000 seeded samples the interval holds it
    in at least 95 % (binomial sampling noise of the count: sd 0.5 %, so a 94 % floor)."""
    rng = np.random.default_rng(0)
    truth = math.log(100.0)
    hits = 0
    for _ in range(2000):
        low, high = metrics.quantile_interval(rng.exponential(1.0, 500), 0.99)
        hits += low <= truth < high
    assert hits / 2000 >= 0.94


def test_percentile_estimate_mean_is_the_replications_and_interval_within_observed_values():
    """Skewed replications whose Student-t interval of the P99 goes below zero: the order-statistic one cannot."""
    runs = [np.array([0.01] * 390 + [5.0] * 10), np.array([0.01] * 400)]
    est = metrics.percentile_estimate(runs, "p99", 1000.0)
    p99s = [metrics.percentiles(r)["p99"] * 1000.0 for r in runs]
    assert est["mean"] == pytest.approx(np.mean(p99s))
    assert estimate(p99s, low=None)["ci_low"] < 0  # what an uncut Student-t interval says
    assert 10.0 <= est["ci_low"] <= est["ci_high"] <= 5000.0  # observed values, in ms
    assert metrics.percentile_estimate([np.array([]), np.array([])], "p99") == {"mean": None, "ci_low": None,
                                                                             "ci_high": None}
