"""Derived attention: K/V bytes and FLOPs per GPU by hand, the efficiency fit solved by hand on real rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tripath.calibrate.published.attention import AttentionRows, AttentionShape, fit_attention
from tripath.calibrate.published.vidur import all_reduce_ms

A100_TFLOPS, A100_TBPS = 312.0, 2.039
TP2_70B = AttentionShape.of(64, 8, 128, 2)  # Llama-2-70B at tp 2: 32 query heads and 4 KV heads per GPU


def test_shape_per_gpu_bytes_and_flops():
    assert TP2_70B == AttentionShape(32, 4, 128)
    # decode, batch 2 holding 32 tokens each: 2 x 33 tokens x K and V x 4 heads x 128 x 2 bytes
    assert TP2_70B.decode_bytes(np.array(2.0), np.array(32.0)) == 2 * 33 * 2 * 4 * 128 * 2
    # prefill of 64 new tokens after 512 cached: 4 FLOPs per (query, key, head channel)
    context, causal = TP2_70B.prefill_flops(np.array(64.0), np.array(512.0))
    assert (context, causal) == (4 * 32 * 128 * 64 * 512, 4 * 32 * 128 * 64 * 65 / 2)
    with pytest.raises(ValueError, match="does not divide"):
        AttentionShape.of(64, 8, 128, 16)


def test_fit_on_the_fewest_real_rows_is_solved_exactly():
    # Vidur's A100 Llama-2-70B tp2 attention.csv: decode (batch 1, kv 32) 0.016 ms and (128, 4032) 0.671 ms;
    # prefill (64, 0) 0.017 ms, (2048, 0) 0.701 ms, (2048, 2048) 1.047 ms (medians, reshapes included)
    decode = pd.DataFrame({"batch_size": [1, 128], "kv_cache_size": [32, 4032], "ms": [0.016, 0.671]})
    prefill = pd.DataFrame({"prefill_chunk_size": [64, 2048, 2048], "kv_cache_size": [0, 0, 2048],
                            "ms": [0.017, 0.701, 1.047]})
    fit = fit_attention([AttentionRows("70b", TP2_70B, decode, prefill)], A100_TFLOPS, A100_TBPS)
    # decode: ms = floor + bytes / (BW x e), two rows determine both
    r1, r2 = 33 * 2048 / 2.039e12 * 1e3, 128 * 4033 * 2048 / 2.039e12 * 1e3  # 2048 K/V bytes per token per layer
    k = (0.671 - 0.016) / (r2 - r1)
    assert fit.decode_efficiency == pytest.approx(1 / k, rel=1e-5)
    assert fit.decode_floor_ms == pytest.approx(0.016 - k * r1, rel=1e-5)
    # prefill: the two kv = 0 rows have no context pairs: floor and causal efficiency from them, then context
    s1, s2 = (4 * 32 * 128 * t * (t + 1) / 2 / 312e12 * 1e3 for t in (64, 2048))
    k_causal = (0.701 - 0.017) / (s2 - s1)
    floor = 0.017 - k_causal * s1
    c3 = 4 * 32 * 128 * 2048 * 2048 / 312e12 * 1e3
    k_context = (1.047 - floor - k_causal * s2) / c3
    assert fit.causal_efficiency == pytest.approx(1 / k_causal, rel=1e-5)
    assert fit.context_efficiency == pytest.approx(1 / k_context, rel=1e-5)
    assert fit.prefill_floor_ms == pytest.approx(floor, rel=1e-4)
    assert fit.mape["70b"][0] < 1e-5 and fit.mape["70b"][1] < 1e-5  # exact up to the 6-digit rounding
    # the fitted model evaluated at a row gives that row back
    assert fit.decode_ms(TP2_70B, np.array(128.0), np.array(4032.0)) == pytest.approx(0.671, rel=1e-5)


def test_all_reduce_past_the_largest_measured_size_keeps_its_bandwidth():
    sizes, ms = np.array([1.0e6, 2.0e6]), np.array([0.05, 0.08])
    assert all_reduce_ms(1.5e6, sizes, ms) == pytest.approx(0.065)
    assert all_reduce_ms(4.0e6, sizes, ms) == pytest.approx(0.16)  # twice the bytes of the largest: twice its time
