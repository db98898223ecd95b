"""Time series for the explorer's plots: the simulator's own when it provides them, else from records.

From the records alone (simulator/records.py) two step functions are exact, not estimated:
queued(t) = #{arrival <= t < admitted} and running(t) = #{admitted <= t < finish}, counted over
completed requests (a rejected request never queues). Memory per tier, paging traffic and the
batch size per iteration exist only where the simulator samples them (issue 8's time series);
``simulator_series`` picks those up from a run when present and returns nothing otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simulator.records import RequestRecord

# attribute names a RunResult may carry its sampled time series under (issue 8's outputs)
SERIES_ATTRIBUTES = ("timeseries", "time_series", "series")


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


def simulator_series(run: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A run's sampled series as {name: (t, value)}, when the simulator provides them; else {}."""
    for attribute in SERIES_ATTRIBUTES:
        raw = getattr(run, attribute, None)
        if raw is not None:
            return _as_series(raw)
    return {}


def _as_series(raw: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Accept {name: values} with a time column ("t_s" / "time_s" / "t"), or an object with to_dict()."""
    if hasattr(raw, "to_dict"):
        raw = raw.to_dict()
    if not isinstance(raw, dict):
        return {}
    time_key = next((k for k in ("t_s", "time_s", "t", "times_s") if k in raw), None)
    if time_key is None:
        return {}
    t = np.asarray(raw[time_key], dtype=float)
    out = {}
    for name, values in raw.items():
        array = np.asarray(values)
        if name != time_key and array.shape == t.shape and np.issubdtype(array.dtype, np.number):
            out[name] = (t, array.astype(float))
    return out
