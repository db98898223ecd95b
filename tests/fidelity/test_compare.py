"""tripath/fidelity/compare.py on synthetic records whose differences are known: errors computed by hand."""

from __future__ import annotations

import math

import pytest

from tripath.core.records import COMPLETED, RequestRecord, rejected_record
from tripath.fidelity.compare import FIRST_BAR, SECOND_BAR, check_same_requests, compare, row, signed_error, worst


def rec(rid: int, arrival: float, ttft: float, per_token: float, out: int = 11, prompt: int = 100) -> RequestRecord:
    first = arrival + ttft
    return RequestRecord(rid, "code", arrival, prompt, out, 0, arrival, first, first + per_token * (out - 1),
                         COMPLETED)


def table(rows: list) -> dict[tuple[str, str], object]:
    return {(r.metric, r.stat): r for r in rows}


def test_signed_error_is_sim_minus_real_over_real() -> None:
    assert signed_error(110.0, 100.0) == pytest.approx(0.10)
    assert signed_error(90.0, 100.0) == pytest.approx(-0.10)
    assert signed_error(1.0, 0.0) is None
    assert signed_error(None, 1.0) is None
    assert signed_error(math.nan, 1.0) is None


def test_uniform_shift_gives_the_same_error_at_every_percentile() -> None:
    # TTFT 100 ms measured, 110 ms simulated for every request: +10 % at P50, P90, P99.
    # TPOT 10 ms measured, 20 ms simulated: +100 %.
    real = [rec(i, float(i), 0.100, 0.010) for i in range(5)]
    sim = [rec(i, float(i), 0.110, 0.020) for i in range(5)]
    t = table(compare(sim, real))
    for level in ("p50", "p90", "p99"):
        assert t["ttft", level].error == pytest.approx(0.10)
        assert t["ttft", level].real == pytest.approx(100.0)
        assert t["tpot", level].error == pytest.approx(1.0)
        # e2e = ttft + 10 tokens x tpot: real 0.2 s, sim 0.31 s
        assert t["e2e", level].error == pytest.approx((0.31 - 0.2) / 0.2)


def test_percentiles_interpolate_between_order_statistics() -> None:
    # real TTFT 0.1, 0.2, 0.3, 0.4 s; sim 0.1, 0.2, 0.3, 0.8 s (one slow request in the simulation).
    # P50: both 0.25 s -> 0. P90 (index 2.7): real 0.3 + 0.7 x 0.1 = 0.37, sim 0.3 + 0.7 x 0.5 = 0.65.
    # P99 (index 2.97): real 0.397, sim 0.785.
    real = [rec(i, float(i), t, 0.01) for i, t in enumerate((0.1, 0.2, 0.3, 0.4))]
    sim = [rec(i, float(i), t, 0.01) for i, t in enumerate((0.1, 0.2, 0.3, 0.8))]
    t = table(compare(sim, real))
    assert t["ttft", "p50"].error == pytest.approx(0.0, abs=1e-12)
    assert t["ttft", "p90"].error == pytest.approx((0.65 - 0.37) / 0.37)
    assert t["ttft", "p99"].sim == pytest.approx(785.0)
    assert t["ttft", "p99"].error == pytest.approx((0.785 - 0.397) / 0.397)
    assert t["ttft", "p50"].within(FIRST_BAR) is True
    assert t["ttft", "p90"].within(FIRST_BAR) is False  # +76 % misses the 15 % tail bar


def test_throughput_is_over_each_sides_own_makespan() -> None:
    # 2 requests arriving at 0 and 1 s, 11 tokens each. Real: last finish at 1 + 0.1 + 0.1 = 1.2 s
    # -> 2 / 1.2 req/s. Sim: per-token 0.05 s -> last finish 1 + 0.1 + 0.5 = 1.6 s -> 2 / 1.6.
    real = [rec(i, float(i), 0.1, 0.01) for i in range(2)]
    sim = [rec(i, float(i), 0.1, 0.05) for i in range(2)]
    t = table(compare(sim, real))
    assert t["throughput", "requests_per_s"].real == pytest.approx(2 / 1.2)
    assert t["throughput", "requests_per_s"].error == pytest.approx((1.2 - 1.6) / 1.6)
    assert t["throughput", "output_tokens_per_s"].error == pytest.approx((1.2 - 1.6) / 1.6)


def test_path_quantities_on_either_side_are_rows_missing_ones_have_no_error() -> None:
    real = [rec(0, 0.0, 0.1, 0.01)]
    rows = compare(real, real, {"acceptance": (0.8, "fraction")},
                   {"acceptance": (0.9, "fraction"), "paging_ms": (3.0, "ms")})
    t = table(rows)
    assert t["acceptance", "mean"].error == pytest.approx((0.8 - 0.9) / 0.9)
    assert t["paging_ms", "mean"].sim is None and t["paging_ms", "mean"].error is None
    assert t["paging_ms", "mean"].within(FIRST_BAR) is None
    assert worst(rows) is t["acceptance", "mean"]


def test_rejected_requests_count_in_the_list_but_not_in_latencies() -> None:
    real = [rec(0, 0.0, 0.1, 0.01), rejected_record(1, "code", 0.5, 100, 11, "too long")]
    sim = [rec(0, 0.0, 0.2, 0.01), rejected_record(1, "code", 0.5, 100, 11, "too long")]
    t = table(compare(sim, real))
    assert t["ttft", "p50"].error == pytest.approx(1.0)


def test_different_request_lists_are_refused() -> None:
    real = [rec(0, 0.0, 0.1, 0.01), rec(1, 1.0, 0.1, 0.01)]
    with pytest.raises(ValueError, match="request lists differ"):
        check_same_requests(real[:1], real)
    with pytest.raises(ValueError, match="request lists differ"):
        check_same_requests([rec(0, 0.0, 0.1, 0.01), rec(1, 1.0, 0.1, 0.01, out=12)], real)


def test_bars_apply_the_tail_bar_to_p90_and_p99() -> None:
    assert row("ttft", "p50", "ms", 112.0, 100.0).within(FIRST_BAR) is False
    assert row("ttft", "p99", "ms", 112.0, 100.0).within(FIRST_BAR) is True
    assert row("ttft", "p99", "ms", 112.0, 100.0).within(SECOND_BAR) is False
    assert row("throughput", "requests_per_s", "req/s", 9.6, 10.0).within(SECOND_BAR) is True
