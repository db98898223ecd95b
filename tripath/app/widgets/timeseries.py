"""Time series for the explorer's plots: the simulator's samples (tripath/simulator/loop/timeseries.py) summed over
replicas.

The simulator samples each replica every ``interval_s`` simulated seconds (queue, running, batch,
KV bytes per tier, cumulative paging bytes per link, preemptions). A cluster's picture is the sum
over its replicas at each sample time. Without samples (interval off), queued and running counts
still come exactly from the records: queued(t) = #{arrival <= t < admitted} and
running(t) = #{admitted <= t < finish} over completed requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tripath.core.records import RequestRecord
from tripath.simulator.loop.timeseries import COLUMNS, LINKS, TIERS

GIB = 2**30
GROUPS = {  # figure -> (columns, unit divisor, y label)
    "requests": (("queue", "running", "batch"), 1.0, "requests / sequences"),
    "KV memory per tier": (tuple(f"kv_{t}_bytes" for t in TIERS), GIB, "GiB resident"),
    "paging traffic": (tuple(f"paging_{link}_bytes" for link in LINKS), GIB, "GiB moved (cumulative)"),
}


def sampled(series: Any) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """{figure: {column: (t, value summed over replicas)}} from a TimeSeries; {} when there is none.

    Columns that stay zero all run long (e.g. SSD bytes without a tiered cache) are left out.
    """
    if series is None or not series.rows:
        return {}
    rows = np.array(series.rows, dtype=float)
    times, inverse = np.unique(rows[:, COLUMNS.index("t_s")], return_inverse=True)
    out: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for figure, (columns, divisor, _) in GROUPS.items():
        lines = {}
        for column in columns:
            total = np.zeros_like(times)
            np.add.at(total, inverse, rows[:, COLUMNS.index(column)])
            if figure == "requests" or total.any():
                lines[column] = (times, total / divisor)
        if lines:
            out[figure] = lines
    return out


def occupancy(records: Sequence[RequestRecord]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"queued": (t, n), "running": (t, n)}: step functions, n holding from t[i] until t[i+1]."""
    done = [r for r in records if r.completed]
    intervals = {"queued": [(r.arrival_s, r.admitted_s) for r in done],
                 "running": [(r.admitted_s, r.finish_s) for r in done]}
    return {name: _steps(spans) for name, spans in intervals.items()}


def _steps(spans: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    if not spans:
        return np.zeros(1), np.zeros(1)
    starts = np.array([s for s, _ in spans], dtype=float)
    ends = np.array([e for _, e in spans], dtype=float)
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones_like(starts), -np.ones_like(ends)])
    # at equal times, departures (-1) before arrivals (+1): a zero-length stay never counts
    order = np.lexsort((deltas, times))
    return times[order], np.cumsum(deltas[order])
