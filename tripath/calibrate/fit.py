"""Fitting a named formula to timing samples: scipy least squares, holdout error, and refusal.

Latencies span orders of magnitude (a 16-token prefill and a 4K one), so the fit minimises
RELATIVE residuals (pred - y) / y: every point counts by its percentage error, which is also
what MAPE reports. All shipped formulas are linear in their coefficients; that is checked
numerically and such fits use bounded linear least squares (``scipy.optimize.lsq_linear``, no
negative costs); any other formula falls back to ``scipy.optimize.least_squares``.

Holdout error is k-fold cross-validation (points assigned to folds by their order, so it is
deterministic): each fold is predicted by coefficients fitted without it. A profile whose
holdout MAPE exceeds the threshold is refused (``FitRefused``) unless forced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, lsq_linear

from tripath.profile.formulas import FORMULAS, Formula
from tripath.profile.profile import FitQuality

DEFAULT_MAX_HOLDOUT_MAPE = 0.20
FOLDS = 5


class FitRefused(ValueError):
    """A fit is too poor to ship; the message says which model and why."""


def sig6(x: float) -> float:
    """6 significant digits: the stored number must not depend on BLAS last bits."""
    return float(f"{x:.6g}")


@dataclass(frozen=True)
class FitResult:
    formula: str
    coefficients: dict[str, float]
    quality: FitQuality
    predicted: np.ndarray  # at the samples, with the stored (rounded) coefficients


def _evaluate(spec: Formula, inputs: dict[str, np.ndarray], coef: np.ndarray) -> np.ndarray:
    values = dict(zip(spec.coefficients, (float(c) for c in coef), strict=True))
    return np.asarray(spec.fn(**inputs, **values), dtype=float) * np.ones(len(next(iter(inputs.values()))))


def _design(spec: Formula, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """(offset, columns) with f = offset + columns @ coef when f is linear in its coefficients, else None."""
    p = len(spec.coefficients)
    with np.errstate(all="ignore"):  # a zero divisor (bandwidth) shows up as inf: then it is not linear
        offset = _evaluate(spec, inputs, np.zeros(p))
        columns = np.column_stack([_evaluate(spec, inputs, np.eye(p)[i]) - offset for i in range(p)])  # [n, p]
    if not (np.all(np.isfinite(offset)) and np.all(np.isfinite(columns))):
        return None
    probe = np.linspace(0.3, 1.7, p)
    if not np.allclose(_evaluate(spec, inputs, probe), offset + columns @ probe, rtol=1e-9, atol=1e-12):
        return None
    return offset, columns


def _lower_bounds(spec: Formula) -> np.ndarray:
    # coefficients that divide must stay > 0; the rest are costs and must be >= 0
    return np.array([1e-12 if name in spec.positive else 0.0 for name in spec.coefficients])


def relative_least_squares(columns: np.ndarray, y: np.ndarray, offset: np.ndarray | None = None,
                           lower: np.ndarray | None = None) -> np.ndarray:
    """Coefficients c >= lower minimising the relative residuals (offset + columns @ c - y) / y (bounded BVLS)."""
    offset = np.zeros_like(y) if offset is None else offset
    lower = np.zeros(columns.shape[1]) if lower is None else lower
    a = columns / y[:, None]  # [n, p]: relative residual rows
    b = 1.0 - offset / y
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0  # a column of zeros (input constant at 0): its coefficient is unidentified
    sol = lsq_linear(a / scale, b, bounds=(lower * scale, np.inf), method="bvls")
    return sol.x / scale


def _solve(spec: Formula, inputs: dict[str, np.ndarray], y: np.ndarray) -> np.ndarray:
    lower = _lower_bounds(spec)
    design = _design(spec, inputs)
    if design is not None:
        offset, columns = design
        return relative_least_squares(columns, y, offset, lower)
    result = least_squares(lambda c: (_evaluate(spec, inputs, c) - y) / y, np.ones(len(spec.coefficients)),
                           bounds=(lower, np.inf), x_scale="jac")
    return result.x


def fit_formula(formula: str, inputs: dict[str, np.ndarray], observed_ms: np.ndarray, *, data: str,
                folds: int = FOLDS) -> FitResult:
    """Fit ``formula`` (a registry name) to samples; inputs by the formula's input names."""
    spec = FORMULAS[formula]
    y = np.asarray(observed_ms, dtype=float)
    xs = {name: np.asarray(inputs[name], dtype=float) for name in spec.inputs}
    if y.ndim != 1 or any(x.shape != y.shape for x in xs.values()):
        raise ValueError("inputs and observed_ms must be 1-D arrays of the same length")
    if len(y) < len(spec.coefficients):
        raise FitRefused(f"{formula}: {len(y)} samples cannot determine {len(spec.coefficients)} coefficients")
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise FitRefused(f"{formula}: observed times must be finite and > 0")
    coef = np.array([sig6(c) for c in _solve(spec, xs, y)])
    predicted = _evaluate(spec, xs, coef)
    ape = np.abs(predicted - y) / y
    holdout = None
    k = min(folds, len(y))
    if len(y) - len(y) // k >= 2 * len(spec.coefficients) and k >= 2:
        held = np.empty_like(y)
        fold = np.arange(len(y)) % k
        for i in range(k):
            train, test = fold != i, fold == i
            c = _solve(spec, {n: x[train] for n, x in xs.items()}, y[train])
            held[test] = _evaluate(spec, {n: x[test] for n, x in xs.items()}, c)
        holdout = sig6(float(np.mean(np.abs(held - y) / y)))
    method = (f"least squares on relative residuals, coefficients >= 0; holdout: {k}-fold cross-validation"
              if holdout is not None else "least squares on relative residuals, coefficients >= 0; too few "
              "samples for a holdout")
    quality = FitQuality(len(y), sig6(float(ape.mean())), sig6(float(ape.max())), holdout, method, data)
    return FitResult(formula, dict(zip(spec.coefficients, (float(c) for c in coef), strict=True)), quality,
                     predicted)


def refusal_reason(name: str, quality: FitQuality, max_holdout_mape: float) -> str | None:
    """Why the fit of cost model ``name`` is not good enough to ship, or None."""
    error = quality.holdout_mape if quality.holdout_mape is not None else quality.train_mape
    label = "holdout MAPE" if quality.holdout_mape is not None else "train MAPE (no holdout)"
    if error > max_holdout_mape:
        return (f"costs.{name}: {label} {error:.1%} exceeds the threshold {max_holdout_mape:.1%} "
                f"({quality.n_samples} samples, worst point {quality.max_ape:.1%})")
    return None
