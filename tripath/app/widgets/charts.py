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

from tripath.app.widgets import display  # noqa: E402

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
        if ax.get_legend_handles_labels()[0]:  # nothing completed: no lines, no legend
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
    if ax.get_legend_handles_labels()[0]:
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


def matrix_heatmap(rows: list[str], columns: list[str], margins: list[list[float | None]],
                   marks: list[list[str]], title: str) -> Figure:
    """Rows x columns coloured by SLA margin ((target - P99) / target, clipped to +-100%); grey = no number.

    ``margins`` are the colour values of tripath/app/widgets/display.py's ``colour_margin``: a candidate that
    misses (by rejecting requests, too) is never on the green side. ``marks`` is drawn in each square: "★"
    recommended, "2" runner-up, "n/a" not applicable, "x" refused, "rej N%" a miss by rejection.
    The size follows the labels, so twenty candidates as rows stay readable at the page's width.
    """
    values = np.array([[np.nan if v is None else max(-1.0, min(1.0, v)) for v in row] for row in margins], float)
    label_in = 0.075 * max((len(r) for r in rows), default=4)  # inches of the longest row label at 8 pt
    fig, ax = plt.subplots(figsize=(1.5 * len(columns) + label_in + 2.5, 0.38 * len(rows) + 2.2))
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#dddddd")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=-1, vmax=1, aspect="auto")
    for i, row in enumerate(marks):
        for j, mark in enumerate(row):
            ax.text(j, i, mark, ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(columns)), columns, rotation=20, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    fig.colorbar(image, ax=ax, label="SLA margin (min over terms; a miss by rejection at -100 %)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def windows(series: dict[str, list[dict]], term: str, step_at_s: float, title: str) -> Figure:
    """P99 of ``term`` per window of arrival time, one line per policy, with its 95% band (where it holds the
    point: display.plotted) and the step."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for label, s in series.items():
        mids = [(w["start_s"] + w["end_s"]) / 2 for w in s]
        mean, low, high = display.plotted([w[f"{term}_p99_ms"] for w in s])
        ax.plot(mids, mean, marker="o", ms=3, lw=1.2, label=label)
        ax.fill_between(mids, np.asarray(low, float), np.asarray(high, float), alpha=0.2)
    ax.axvline(step_at_s, color="k", ls=":", lw=1, label="load step")
    ax.set_xlabel("arrival time (simulated s)")
    ax.set_ylabel(f"{LABELS.get(term, term)} P99 (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig
