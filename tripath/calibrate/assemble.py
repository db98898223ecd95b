"""From raw samples to the profile's cost models: full-depth times per point, fits, refusals.

Shared by measured calibrations (``job.py``) and the published-data conversion (``vidur.py``),
so both produce cost models the same way and both can be refitted from their samples CSV.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from tripath.calibrate.fit import FitResult, fit_formula, refusal_reason
from tripath.calibrate.samples import Sample
from tripath.calibrate.sweeps.common import Sweep
from tripath.calibrate.sweeps.decode import DECODE
from tripath.calibrate.sweeps.prefill import PREFILL
from tripath.calibrate.target import full_depth_ms
from tripath.profile.profile import Coefficient, CostModel

SWEEPS: dict[str, Sweep] = {sweep.name: sweep for sweep in (PREFILL, DECODE)}


@dataclass(frozen=True)
class FittedCost:
    sweep: Sweep
    model: CostModel
    result: FitResult
    x1: np.ndarray
    x2: np.ndarray
    observed_ms: np.ndarray  # full-depth times the fit used


STATISTICS = ("median", "min")


def full_depth_points(samples: list[Sample], sweep: str, layers: int,
                      statistic: str = "median") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x1, x2, ms) per point of ``sweep``, each time extrapolated to ``layers`` decoder layers.

    ``statistic``: which repetition statistic stands for a point, "median" or "min" (the
    uncontended cost on a shared machine, where other processes only ever add time).
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic: must be one of {STATISTICS}, got {statistic!r}")
    by_point: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    for s in samples:
        if s.sweep == sweep:
            by_point[(s.x1, s.x2)][s.layers] = s.median_ms if statistic == "median" else s.min_ms
    points = sorted(by_point)
    ms = [full_depth_ms(by_point[p], layers) for p in points]
    x1 = np.array([p[0] for p in points], dtype=float)
    x2 = np.array([p[1] for p in points], dtype=float)
    return x1, x2, np.array(ms, dtype=float)


def fit_cost(samples: list[Sample], sweep: Sweep, layers: int, *, coefficient_source: str, data: str,
             note: str, statistic: str = "median") -> FittedCost:
    """Fit ``sweep``'s formula to the samples and wrap it as the profile's cost model."""
    x1, x2, ms = full_depth_points(samples, sweep.name, layers, statistic)
    if len(ms) == 0:
        raise ValueError(f"no samples for sweep {sweep.name!r}")
    inputs = {sweep.inputs[0]: x1, sweep.inputs[1]: x2}
    result = fit_formula(sweep.formula, inputs, ms, data=data)
    coefficients = {name: Coefficient(value, sweep.units[name], coefficient_source, sweep.notes[name])
                    for name, value in result.coefficients.items()}
    domain = {sweep.inputs[0]: (float(x1.min()), float(x1.max())),
              sweep.inputs[1]: (float(x2.min()), float(x2.max()))}
    model = CostModel(sweep.formula, coefficients, sweep.inputs, domain, result.quality,
                      f"{sweep.describe}. {note}".strip())
    return FittedCost(sweep, model, result, x1, x2, ms)


def fit_all(samples: list[Sample], layers: int, *, coefficient_source: str, data: str,
            note: str, statistic: str = "median", sweeps: dict[str, Sweep] | None = None) -> dict[str, FittedCost]:
    """Every sweep present in the samples, fitted (``sweeps`` overrides SWEEPS, e.g. another decode formula)."""
    present = {s.sweep for s in samples}
    return {name: fit_cost(samples, sweep, layers, coefficient_source=coefficient_source, data=data, note=note,
                           statistic=statistic)
            for name, sweep in (SWEEPS if sweeps is None else sweeps).items() if name in present}


def refusals(fitted: dict[str, FittedCost], max_holdout_mape: float) -> list[str]:
    """The reasons, one per cost model, why these fits should not ship."""
    reasons = [refusal_reason(name, f.result.quality, max_holdout_mape) for name, f in fitted.items()]
    return [r for r in reasons if r is not None]
