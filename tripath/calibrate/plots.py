"""Plots of samples against fits (matplotlib, Agg backend: no display needed).

One PNG per cost model: left, the measured full-depth times against the first input, one
series per value of the second, with the fitted formula as lines; right, each point's relative
residual (fit - measured) / measured, the quantity the fit minimises and MAPE averages.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, deterministic output

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tripath.core.atomic import replacing  # noqa: E402
from tripath.profile.profile import CostModel  # noqa: E402


def plot_fit(name: str, model: CostModel, x1: np.ndarray, x2: np.ndarray, observed_ms: np.ndarray,
             path: str | os.PathLike[str], title: str) -> Path:
    """Write one samples-vs-fit figure for cost model ``name``; returns the path written."""
    in1, in2 = model.inputs
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    norm = matplotlib.colors.Normalize(vmin=float(x2.min()), vmax=float(max(x2.max(), x2.min() + 1)))
    cmap = matplotlib.colormaps["viridis"]
    left.scatter(x1, observed_ms, c=x2, cmap=cmap, norm=norm, s=16)
    values = sorted(set(x2.tolist()))
    # fitted lines at up to 5 values of the second input (its range), so the figure stays readable
    shown = [values[round(i * (len(values) - 1) / 4)] for i in range(5)] if len(values) > 5 else values
    for value in sorted(set(shown)):
        sel = x2 == value
        grid = np.linspace(x1[sel].min(), x1[sel].max(), 50)
        left.plot(grid, [model.evaluate(**{in1: g, in2: value}) for g in grid], color=cmap(norm(value)), lw=1)
    predicted = np.array([model.evaluate(**{in1: a, in2: b}) for a, b in zip(x1, x2, strict=True)])
    points = right.scatter(x1, 100 * (predicted - observed_ms) / observed_ms, c=x2, cmap=cmap, norm=norm, s=16)
    fig.colorbar(points, ax=right, label=in2)
    left.set_xlabel(in1)
    left.set_ylabel(f"ms (points: samples, lines: fit; colour: {in2})")
    right.axhline(0, color="k", lw=0.8)
    right.set_xlabel(in1)
    right.set_ylabel("residual, % of measured")
    fit = model.fit
    if fit is not None:
        holdout = "n/a" if fit.holdout_mape is None else f"{fit.holdout_mape:.1%}"
        right.set_title(f"train MAPE {fit.train_mape:.1%}, holdout {holdout}, n={fit.n_samples}", fontsize=9)
    fig.suptitle(f"{title}: costs.{name} ({model.formula})", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    with replacing(out, suffix=".tmp.png") as tmp:  # savefig reads the format from the extension
        fig.savefig(tmp, dpi=90)
    plt.close(fig)
    return out
