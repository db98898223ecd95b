"""Figures the pages show and offer as PNG downloads (matplotlib, Agg: no display needed).

Each figure says in its title what its numbers are (simulated on which kind of profile), so a
downloaded PNG keeps its provenance away from the app.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end"}


def png_bytes(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def latency_cdfs(latencies_s: dict[str, Sequence[np.ndarray]], targets_ms: dict[str, float | None],
                 provenance: str) -> Figure:
    """Empirical CDF per metric, one line per replication, with the SLA target as a dashed line."""
    fig, axes = plt.subplots(1, len(latencies_s), figsize=(4.2 * len(latencies_s), 3.4), squeeze=False)
    for ax, (metric, per_run) in zip(axes[0], latencies_s.items(), strict=True):
        for i, values in enumerate(per_run):
            ms = np.sort(np.asarray(values, dtype=float)) * 1000.0
            if ms.size:
                ax.step(ms, np.arange(1, ms.size + 1) / ms.size, where="post", lw=1, alpha=0.8, label=f"rep {i}")
        target = targets_ms.get(metric)
        if target is not None:
            ax.axvline(target, color="k", ls="--", lw=1, label=f"SLA {target:g} ms")
        ax.axhline(0.99, color="grey", ls=":", lw=0.8)
        ax.set_xlabel(f"{LABELS.get(metric, metric)} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        if len(per_run) <= 5 or target is not None:
            ax.legend(fontsize=7)
    fig.suptitle(f"latency CDFs — {provenance}", fontsize=9)
    fig.tight_layout()
    return fig


def step_series(series: dict[str, tuple[np.ndarray, np.ndarray]], title: str, ylabel: str) -> Figure:
    """Several step functions of time on one axis."""
    fig, ax = plt.subplots(figsize=(10, 3.2))
    for name, (t, v) in series.items():
        ax.step(t, v, where="post", lw=1, label=name)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def lines(x: Sequence[float], ys: dict[str, Sequence[float]], xlabel: str, ylabel: str, title: str,
          bands: dict[str, tuple[Sequence[float], Sequence[float]]] | None = None,
          hline: float | None = None, hlabel: str = "") -> Figure:
    """Line plot of several series over a shared x, optional CI bands and a horizontal target."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for name, y in ys.items():
        ax.plot(x, y, marker="o", ms=3, lw=1.2, label=name)
        if bands and name in bands:
            low, high = bands[name]
            ax.fill_between(x, np.asarray(low, float), np.asarray(high, float), alpha=0.2)
    if hline is not None:
        ax.axhline(hline, color="k", ls="--", lw=1, label=hlabel)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig
