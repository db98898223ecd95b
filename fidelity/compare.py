"""Comparison: simulated against measured records of the same requests, as signed relative errors.

Every number here is a pure function of two record lists (simulator.records.RequestRecord) and
two dicts of per-path quantities, so it is tested on synthetic records with hand-computed errors.

Signed relative error = (sim - real) / real: positive when the simulator is pessimistic (predicts
more latency, or more throughput, than was measured), negative when optimistic. It is undefined
(None) when the measured value is zero, missing or not finite.

The issue's first bar: |error| <= 10 % at P50 and <= 15 % at P99 (then 5 % / 10 %). P90 is held to
the tail bar, and throughput and per-path means to the P50 bar (they are central quantities).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from simulator import metrics
from simulator.records import RequestRecord

LATENCY_METRICS = ("ttft", "tpot", "e2e")
LEVELS = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
THROUGHPUT = ("requests_per_s", "output_tokens_per_s")
# (central bar, tail bar) as fractions: the first bar and the one after it
FIRST_BAR = (0.10, 0.15)
SECOND_BAR = (0.05, 0.10)


@dataclass(frozen=True)
class ErrorRow:
    """One compared quantity: its simulated and measured values and the signed relative error."""

    metric: str  # "ttft" | "tpot" | "e2e" | "throughput" | a per-path quantity name
    stat: str  # "p50" | "p90" | "p99" | "requests_per_s" | ... | "mean"
    unit: str
    sim: float | None
    real: float | None
    error: float | None  # (sim - real) / real, None when undefined

    @property
    def tail(self) -> bool:
        return self.stat in ("p90", "p99")

    def within(self, bar: tuple[float, float]) -> bool | None:
        """Whether |error| is inside the bar (the tail bar for P90/P99); None when undefined."""
        if self.error is None:
            return None
        return abs(self.error) <= (bar[1] if self.tail else bar[0])

    def to_dict(self) -> dict[str, object]:
        return {"metric": self.metric, "stat": self.stat, "unit": self.unit, "sim": self.sim,
                "real": self.real, "error": self.error, "within_first_bar": self.within(FIRST_BAR),
                "within_second_bar": self.within(SECOND_BAR)}


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def signed_error(sim: float | None, real: float | None) -> float | None:
    """(sim - real) / real, or None when either side is missing or the measured value is 0."""
    sim, real = _finite(sim), _finite(real)
    if sim is None or real is None or real == 0.0:
        return None
    return (sim - real) / real


def row(metric: str, stat: str, unit: str, sim: float | None, real: float | None) -> ErrorRow:
    sim, real = _finite(sim), _finite(real)
    return ErrorRow(metric, stat, unit, sim, real, signed_error(sim, real))


def check_same_requests(sim: Sequence[RequestRecord], real: Sequence[RequestRecord]) -> None:
    """Both sides must have served exactly the same request list (ids, arrivals, lengths, tasks)."""
    def spec(r: RequestRecord) -> tuple[object, ...]:
        return (r.request_id, r.task, r.arrival_s, r.prompt_tokens, r.output_tokens)

    a = sorted(map(spec, sim))
    b = sorted(map(spec, real))
    if a != b:
        diff = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        raise ValueError(f"simulated and measured request lists differ ({len(a)} vs {len(b)} requests; "
                         f"first difference at sorted index {diff})")


def latency_ms(records: Sequence[RequestRecord], metric: str) -> np.ndarray:
    """Per completed request, in ms (TPOT only for requests with >= 2 output tokens)."""
    return metrics.latencies(records, metric) * 1000.0


def latency_rows(sim: Sequence[RequestRecord], real: Sequence[RequestRecord]) -> list[ErrorRow]:
    rows = []
    for metric in LATENCY_METRICS:
        s, r = latency_ms(sim, metric), latency_ms(real, metric)
        for level, q in LEVELS.items():
            sv = float(np.percentile(s, q)) if s.size else None
            rv = float(np.percentile(r, q)) if r.size else None
            rows.append(row(metric, level, "ms", sv, rv))
    return rows


def throughput_rows(sim: Sequence[RequestRecord], real: Sequence[RequestRecord]) -> list[ErrorRow]:
    """Completed requests and output tokens per second over each side's own makespan."""
    s, r = metrics.throughput(sim), metrics.throughput(real)
    units = {"requests_per_s": "req/s", "output_tokens_per_s": "tokens/s"}
    return [row("throughput", name, units[name], s[name], r[name]) for name in THROUGHPUT]


def path_rows(sim: Mapping[str, tuple[float | None, str]],
              real: Mapping[str, tuple[float | None, str]]) -> list[ErrorRow]:
    """Per-path quantities ({name: (value, unit)}) present on either side, in sorted name order."""
    rows = []
    for name in sorted(set(sim) | set(real)):
        sv, unit = sim.get(name, (None, ""))
        rv, runit = real.get(name, (None, unit))
        rows.append(row(name, "mean", unit or runit, sv, rv))
    return rows


def compare(sim: Sequence[RequestRecord], real: Sequence[RequestRecord],
            sim_paths: Mapping[str, tuple[float | None, str]] | None = None,
            real_paths: Mapping[str, tuple[float | None, str]] | None = None) -> list[ErrorRow]:
    """Every row of one scenario's error table; raises ValueError if the request lists differ."""
    check_same_requests(sim, real)
    return latency_rows(sim, real) + throughput_rows(sim, real) + path_rows(sim_paths or {}, real_paths or {})


def worst(rows: Sequence[ErrorRow]) -> ErrorRow | None:
    """The row with the largest |error| (None when no row has one)."""
    defined = [r for r in rows if r.error is not None]
    return max(defined, key=lambda r: abs(r.error or 0.0)) if defined else None
