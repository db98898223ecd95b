"""IterationCost's public API: the formulas, their fixed part and domains, fresh counters, transformed models."""

import numpy as np
import pytest

from tripath.simulator.costs import IterationCost


def _bounded() -> IterationCost:
    # prefill ms = 10 + 0.5 T + 0.25 ctx; decode ms = 2 + 1 B + 0.01 S; step overhead 0.5 + 0.1 N + 0.01 T
    return IterationCost(lambda t, c: 10.0 + 0.5 * t + 0.25 * c, lambda b, s: 2.0 + 1.0 * b + 0.01 * s,
                         ((1, 100), (0, 50)), ((1, 4), (0, 1000)), lambda n, t: 0.5 + 0.1 * n + 0.01 * t)


def test_formulas_fixed_part_and_domains_are_public():
    cost = _bounded()
    assert cost.prefill_ms(8, 4) == 10.0 + 4.0 + 1.0
    assert cost.decode_ms(2, 100) == 2.0 + 2.0 + 1.0
    assert cost.prefill_fixed_ms == 10.0
    assert cost.prefill_domain == ((1, 100), (0, 50)) and cost.decode_domain == ((1, 4), (0, 1000))
    assert cost.has_step_overhead and not IterationCost.linear(1.0, 0.1, 1.0, 0.1).has_step_overhead
    assert IterationCost.linear(1.0, 0.1, 1.0, 0.1).prefill_domain == ((-np.inf, np.inf), (-np.inf, np.inf))


def test_chunk_work_counts_each_chunk_and_those_outside():
    cost = _bounded()
    assert cost.chunk_work_ms(8, 4) == 5.0  # 0.5 x 8 + 0.25 x 4 above the fixed 10
    assert cost.chunk_work_ms(200, 0) == 100.0  # T = 200 > 100: outside
    assert cost.chunk_work_ms(8, 60) == 19.0  # ctx = 60 > 50: outside
    e = cost.extrapolations()
    assert (e.prefill_queries, e.prefill_outside) == (3, 2)


def test_mixed_and_chunked_add_each_chunks_work_to_the_shared_pass():
    cost = _bounded()
    # decode 2 + 2 + 1 = 5 ms shared; chunks 5 + 4 ms; overhead 0.5 + 0.1 x 4 + 0.01 x (2 + 8 + 8) = 1.08
    assert cost.chunked_s([(8, 4), (8, 0)], 2, 100) == pytest.approx((5.0 + 5.0 + 4.0 + 1.08) / 1000, rel=1e-15)
    assert cost.mixed_s([8], 0, 0) == pytest.approx((10.0 + 4.0 + 0.5 + 0.1 + 0.08) / 1000, rel=1e-15)
    e = cost.extrapolations()
    assert (e.prefill_queries, e.prefill_outside, e.decode_queries, e.decode_outside) == (3, 0, 1, 0)


def test_fresh_and_transformed_keep_the_domains_and_overhead_with_counters_at_zero():
    cost = _bounded()
    cost.mixed_s([500], 8, 5000)
    assert cost.extrapolations().prefill_outside == 1 and cost.extrapolations().decode_outside == 1
    fresh = cost.fresh()
    assert fresh.extrapolations() == type(cost.extrapolations())(0, 0, 0, 0)
    assert fresh.mixed_s([8], 2, 100) == _bounded().mixed_s([8], 2, 100)
    doubled = cost.transformed(cost.prefill_ms, lambda b, s: 2 * cost.decode_ms(b, s), 16)
    assert doubled.decode_domain == cost.decode_domain and doubled.prefill_domain == cost.prefill_domain
    assert doubled.block_tokens == 16 and doubled.has_step_overhead
    assert doubled.decode_one_s(2, 100) == pytest.approx((10.0 + 0.5 + 0.2 + 0.02) / 1000, rel=1e-15)
    assert doubled.extrapolations().decode_queries == 0
