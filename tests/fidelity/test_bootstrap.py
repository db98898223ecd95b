"""tripath/fidelity/bootstrap.py and the noise fields of the report, on synthetic records of known distribution.

Coverage is checked against theory: over independent seeds, the 95 % interval of a P50 / P90
should contain the distribution's true percentile about 95 % of the time. The percentile bootstrap
is only asymptotically exact; its known finite-sample coverage error for quantiles is a few points
(Hall & Martin 1988), so the accepted band is the binomial 99.9 % interval around 0.95 widened by
COVERAGE_SLACK. At P99 the interval can never reach above the sample maximum, so its coverage is
at most P(true P99 <= max) = 1 - 0.99^n: the test checks that bound (and the invariant behind it).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tripath.core import metrics
from tripath.core.records import COMPLETED, RequestRecord, rejected_record
from tripath.fidelity.bootstrap import bootstrap_ci, ci_rng, per_request_ms, row_percentiles
from tripath.fidelity.compare import ErrorRow, compare, row
from tripath.fidelity.report import NOISE_MARK, ScenarioResult, dkw_epsilon, markdown

COVERAGE_SLACK = 0.02
MEAN_TTFT_S = 0.050  # TTFT ~ exponential(mean 50 ms): true P_q = -50 ln(1 - q) ms


def records(rng: np.random.Generator, n: int) -> list[RequestRecord]:
    """n requests 0.5 s apart, TTFT exponential (mean 50 ms), 10 output tokens 4 ms apart."""
    out = []
    for i, ttft in enumerate(rng.exponential(MEAN_TTFT_S, size=n)):
        arrival = 0.5 * i
        first = arrival + float(ttft)
        out.append(RequestRecord(i, "code", arrival, 100, 10, 0, arrival, first, first + 0.036, COMPLETED))
    return out


def true_ttft_ms(q: float) -> float:
    return -MEAN_TTFT_S * math.log(1.0 - q) * 1000.0


def test_interval_covers_the_true_percentile_at_about_the_nominal_rate() -> None:
    reps, n = 300, 200
    hits = {"p50": 0, "p90": 0}
    for seed in range(reps):
        rng = np.random.default_rng(seed)
        ci = bootstrap_ci(records(rng, n), rng)
        for stat, q in (("p50", 0.50), ("p90", 0.90)):
            lo, hi = ci["ttft", stat]
            hits[stat] += lo <= true_ttft_ms(q) <= hi
    band = 3.29 * math.sqrt(0.95 * 0.05 / reps) + COVERAGE_SLACK  # binomial 99.9 % + bootstrap's finite-n error
    for stat, hit in hits.items():
        assert abs(hit / reps - 0.95) <= band, (stat, hit / reps)


def test_p99_interval_never_passes_the_sample_max_so_its_coverage_is_bounded() -> None:
    reps, n = 300, 120
    hits = 0
    for seed in range(reps):
        rng = np.random.default_rng(seed)
        recs = records(rng, n)
        lo, hi = bootstrap_ci(recs, rng)["ttft", "p99"]
        assert hi <= per_request_ms(recs)["ttft"].max()
        hits += lo <= true_ttft_ms(0.99) <= hi
    bound = 1.0 - 0.99**n  # 0.70 at n = 120: P(the true P99 is below the sample max)
    assert hits / reps <= bound + 3.29 * math.sqrt(bound * (1 - bound) / reps)


def test_row_percentiles_equal_numpys_nan_percentile() -> None:
    rng = np.random.default_rng(3)
    x = rng.lognormal(size=(40, 23))
    x[rng.random(x.shape) < 0.3] = np.nan
    x[5] = np.nan  # a row with nothing finite
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns on the all-NaN row
        expected = np.nanpercentile(x, [50, 90, 99], axis=1)
    np.testing.assert_allclose(row_percentiles(x, [50, 90, 99]), expected, equal_nan=True)


def test_same_stream_same_interval_and_streams_differ_by_scenario_and_side() -> None:
    recs = records(np.random.default_rng(0), 100)
    a = bootstrap_ci(recs, ci_rng(7, "baseline-light", "real"))
    assert a == bootstrap_ci(recs, ci_rng(7, "baseline-light", "real"))
    assert a != bootstrap_ci(recs, ci_rng(7, "baseline-light", "cpu"))
    assert a != bootstrap_ci(recs, ci_rng(7, "kv-int8", "real"))
    assert a != bootstrap_ci(recs, ci_rng(8, "baseline-light", "real"))


def test_every_interval_holds_its_point_estimate_and_throughputs_lower_end_is_it() -> None:
    recs = records(np.random.default_rng(1), 150)
    ci = bootstrap_ci(recs, ci_rng(0, "s", "real"))
    for metric in ("ttft", "tpot", "e2e"):
        values = metrics.latencies(recs, metric) * 1000.0
        for stat, q in (("p50", 50), ("p90", 90)):
            lo, hi = ci[metric, stat]
            assert lo <= np.percentile(values, q) <= hi
    # every request completes, and a resample's makespan can only shrink: requests/s >= the full run's
    point = metrics.throughput(recs)["requests_per_s"]
    assert ci["throughput", "requests_per_s"][0] == pytest.approx(point)
    assert ci["tpot", "p50"] == pytest.approx((4.0, 4.0))  # every TPOT is 36 ms / 9 intervals


def test_undefined_values_are_left_out_and_too_few_give_no_interval() -> None:
    recs = records(np.random.default_rng(2), 60)
    rejected = [rejected_record(100 + i, "code", 0.1 * i, 100, 10, "kv") for i in range(5)]
    one_token = [RequestRecord(200 + i, "code", 0.2, 100, 1, 0, 0.2, 0.25, 0.25, COMPLETED) for i in range(3)]
    ci = bootstrap_ci(recs + rejected + one_token, ci_rng(0, "s", "real"))
    assert all(v is not None and all(map(math.isfinite, v)) for v in ci.values())
    only_one_token = bootstrap_ci(one_token, ci_rng(0, "s", "real"))
    assert only_one_token["tpot", "p50"] is None and only_one_token["ttft", "p50"] is not None
    assert all(v is None for v in bootstrap_ci([], ci_rng(0, "s", "real")).values())


def test_error_band_and_within_noise_are_computed_from_the_interval() -> None:
    r = ErrorRow("ttft", "p99", "ms", 120.0, 100.0, 0.20, (90.0, 125.0))
    assert r.within_noise is True
    assert r.error_band == pytest.approx(((120 - 125) / 100, (120 - 90) / 100))
    assert r.within((0.10, 0.15)) is False  # inside the noise, still outside the bar
    d = r.to_dict()
    assert d["real_ci"] == [90.0, 125.0] and d["within_noise"] is True
    assert d["error_band"] == pytest.approx([-0.05, 0.30])
    bare = row("ttft", "p50", "ms", 1.0, 2.0)
    assert bare.within_noise is None and bare.error_band is None and bare.to_dict()["real_ci"] is None


def test_compare_attaches_intervals_by_key_and_drops_non_finite_ones() -> None:
    recs = records(np.random.default_rng(4), 20)
    rows = compare(recs, recs, {"acceptance": (0.8, "fraction")}, {"acceptance": (0.8, "fraction")},
                   {("ttft", "p50"): (1.0, 2.0), ("tpot", "p50"): (math.nan, 3.0)})
    t = {(r.metric, r.stat): r for r in rows}
    assert t["ttft", "p50"].real_ci == (1.0, 2.0)
    assert t["tpot", "p50"].real_ci is None and t["acceptance", "mean"].real_ci is None


def test_markdown_marks_errors_inside_the_noise_only() -> None:
    inside = ErrorRow("ttft", "p50", "ms", 110.0, 100.0, 0.10, (95.0, 115.0))
    outside = ErrorRow("ttft", "p99", "ms", 130.0, 100.0, 0.30, (95.0, 115.0))
    res = ScenarioResult("s", "synthetic", "s.toml", 2, rows=[inside, outside], cpu_rows=[inside])
    meta = {"profile": "p", "created_utc": "t", "numbers_from": "synthetic", "profile_source": "seed", "seed": 0}
    md = markdown(meta, [res], [("s", [outside])])
    assert f"| +10.0%{NOISE_MARK} |" in md and "| +30.0% |" in md  # summary table cells
    assert "| 95.000 … 115.000 | +10.0%* | -5.0% … +15.0% | yes |" in md  # per-scenario row
    assert "ttft p99 +30.0%," not in md and "ttft p99 +30.0%" in md  # noise line, not marked


def test_dkw_band_half_width() -> None:
    assert dkw_epsilon(120) == pytest.approx(math.sqrt(math.log(40.0) / 240.0))
    assert dkw_epsilon(300) < dkw_epsilon(120)
