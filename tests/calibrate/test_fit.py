"""Fits recover known coefficients from noisy synthetic samples; poor fits are refused."""

from __future__ import annotations

import numpy as np
import pytest

from tripath.calibrate.fit import FitRefused, fit_formula, refusal_reason
from tripath.calibrate.target import full_depth_ms
from tripath.profile.formulas import decode_v1, paging_v1, prefill_v1


def _grid(rng):
    t = rng.integers(1, 4096, 80).astype(float)
    c = rng.integers(0, 4096, 80).astype(float)
    return t, c


def test_prefill_exact_without_noise():
    t, c = _grid(np.random.default_rng(0))
    y = prefill_v1(new_tokens=t, context_tokens=c, c0=3.0, c_tok=0.02, c_attn=4e-6)
    fit = fit_formula("prefill_v1", {"new_tokens": t, "context_tokens": c}, y, data="synthetic")
    assert fit.coefficients == pytest.approx({"c0": 3.0, "c_tok": 0.02, "c_attn": 4e-6}, rel=1e-5)
    assert fit.quality.train_mape < 1e-5 and fit.quality.holdout_mape < 1e-5


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_prefill_recovers_coefficients_with_noise(seed):
    rng = np.random.default_rng(seed)
    t, c = _grid(rng)
    truth = {"c0": 3.0, "c_tok": 0.02, "c_attn": 4e-6}
    y = prefill_v1(new_tokens=t, context_tokens=c, **truth) * (1 + 0.03 * rng.standard_normal(len(t)))
    fit = fit_formula("prefill_v1", {"new_tokens": t, "context_tokens": c}, y, data="synthetic")
    # 3 % multiplicative noise on 80 points: each coefficient within 10 % (c0 is the least determined)
    for name, value in truth.items():
        assert fit.coefficients[name] == pytest.approx(value, rel=0.10), name
    # the error of a correct model is the noise: mean |3 % gaussian| = 0.03 * sqrt(2/pi) = 2.4 %
    assert 0.015 < fit.quality.train_mape < 0.035
    assert fit.quality.holdout_mape == pytest.approx(fit.quality.train_mape, rel=0.25)
    assert refusal_reason("prefill", fit.quality, 0.20) is None


def test_decode_recovers_coefficients_with_noise():
    rng = np.random.default_rng(7)
    b = rng.integers(1, 257, 60).astype(float)
    s = b * rng.integers(16, 4096, 60)
    truth = {"d0": 8.0, "d_seq": 0.05, "d_ctx": 2.5e-4}
    y = decode_v1(batch=b, total_context=s, **truth) * (1 + 0.02 * rng.standard_normal(60))
    fit = fit_formula("decode_v1", {"batch": b, "total_context": s}, y, data="synthetic")
    for name, value in truth.items():
        assert fit.coefficients[name] == pytest.approx(value, rel=0.10), name


def test_nonlinear_formula_uses_least_squares():
    rng = np.random.default_rng(4)
    nbytes = rng.uniform(1e6, 2e9, 40)
    y = paging_v1(bytes=nbytes, setup_ms=0.2, bandwidth_gbps=25.0) * (1 + 0.01 * rng.standard_normal(40))
    fit = fit_formula("paging_v1", {"bytes": nbytes}, y, data="synthetic")
    assert fit.coefficients["bandwidth_gbps"] == pytest.approx(25.0, rel=0.02)


def test_costs_are_never_negative():
    # decreasing times would need a negative slope: the bounded fit clamps it at 0
    t = np.arange(1.0, 21.0)
    y = 10.0 - 0.1 * t
    fit = fit_formula("prefill_v1", {"new_tokens": t, "context_tokens": np.zeros(20)}, y, data="synthetic")
    assert all(v >= 0 for v in fit.coefficients.values())


def test_wrong_shape_is_refused():
    # quadratic in batch: decode_v1 (linear) cannot follow it, and the threshold says so
    b = np.arange(1.0, 65.0)
    y = 1.0 + 0.05 * b**2
    fit = fit_formula("decode_v1", {"batch": b, "total_context": 100 * b}, y, data="synthetic")
    reason = refusal_reason("decode", fit.quality, 0.20)
    assert reason is not None and "costs.decode" in reason and "exceeds the threshold 20.0%" in reason


def test_too_few_or_bad_samples_are_refused():
    with pytest.raises(FitRefused, match="cannot determine"):
        fit_formula("decode_v1", {"batch": np.array([1.0, 2.0]), "total_context": np.array([5.0, 9.0])},
                    np.array([1.0, 2.0]), data="x")
    with pytest.raises(FitRefused, match="finite and > 0"):
        fit_formula("decode_v1", {"batch": np.ones(4), "total_context": np.arange(4.0)},
                    np.array([1.0, 0.0, 2.0, 3.0]), data="x")


def test_full_depth_extrapolation_by_hand():
    # 1 layer: 3 ms; 2 layers: 5 ms -> 2 ms per layer, 1 ms outside the layers; 80 layers: 1 + 80*2 = 161
    assert full_depth_ms({1: 3.0, 2: 5.0}, 80) == pytest.approx(161.0)
    # 1 and 4 layers: (9 - 3) / 3 = 2 ms per layer, same answer
    assert full_depth_ms({1: 3.0, 4: 9.0}, 80) == pytest.approx(161.0)
    assert full_depth_ms({6: 7.5}, 6) == 7.5  # a whole model is its own timing
