"""Comparison: simulated against measured records of the same requests, as signed relative errors.

Every number here is a pure function of two record lists (tripath.core.records.RequestRecord) and
two dicts of per-path quantities, so it is tested on synthetic records with hand-computed errors.

Signed relative error = (sim - real) / real: positive when the simulator is pessimistic (predicts
more latency, or more throughput, than was measured), negative when optimistic. It is undefined
(None) when the measured value is zero, missing or not finite.

The first bar: |error| <= 10 % at P50 and <= 15 % at P99 (the second: 5 % / 10 %). P90 is held to
the tail bar, and throughput and per-path means to the P50 bar (they are central quantities).

Noise: a row may carry the measured value's 95 % interval (``real_ci``, from tripath.fidelity.bootstrap).
``within_noise`` says the simulated value lies inside it, and ``error_band`` is the error the
interval's ends would give. This is information, not a pass: the bars judge ``error`` alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from tripath.core import metrics
from tripath.core.records import RequestRecord

LATENCY_METRICS = metrics.TERMS  # the latencies compared: the SLA terms
LEVELS = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
THROUGHPUT = ("requests_per_s", "output_tokens_per_s")
# (central bar, tail bar) as fractions: the first fidelity bar and the tighter second one
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
    real_ci: tuple[float, float] | None = None  # the measured value's 95 % bootstrap interval (lo, hi)

    @property
    def tail(self) -> bool:
        return self.stat in ("p90", "p99")

    @property
    def within_noise(self) -> bool | None:
        """Whether the simulated value lies inside the measured 95 % interval; None without both."""
        if self.real_ci is None or self.sim is None:
            return None
        return self.real_ci[0] <= self.sim <= self.real_ci[1]

    @property
    def error_band(self) -> tuple[float, float] | None:
        """((sim - hi) / real, (sim - lo) / real): the errors the ends of the measured interval imply."""
        if self.real_ci is None or self.error is None or self.sim is None or self.real is None:
            return None
        return (self.sim - self.real_ci[1]) / self.real, (self.sim - self.real_ci[0]) / self.real

    def within(self, bar: tuple[float, float]) -> bool | None:
        """Whether |error| is inside the bar (the tail bar for P90/P99); None when undefined."""
        if self.error is None:
            return None
        return abs(self.error) <= (bar[1] if self.tail else bar[0])

    def to_dict(self) -> dict[str, object]:
        return {"metric": self.metric, "stat": self.stat, "unit": self.unit, "sim": self.sim,
                "real": self.real, "error": self.error, "within_first_bar": self.within(FIRST_BAR),
                "within_second_bar": self.within(SECOND_BAR),
                "real_ci": list(self.real_ci) if self.real_ci else None,
                "error_band": list(self.error_band) if self.error_band else None, "within_noise": self.within_noise}


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


ROUND_STATS = ("mean", "sd", "p10", "p90")


def tokens_per_round(records: Sequence[RequestRecord]) -> np.ndarray:
    """Per completed request with draft rounds: tokens it emitted per round, 1 + accepted / rounds.

    Both sides count only rounds that proposed (K >= 1): the simulator's ledger and the engine's
    per-request SpecCounters alike, so a last plain step (one token left) is in neither.
    """
    done = [r for r in records if r.completed and r.draft_rounds > 0]
    return np.array([1.0 + r.accepted_tokens / r.draft_rounds for r in done], dtype=float)


def round_rows(sim: Sequence[RequestRecord], real: Sequence[RequestRecord]) -> list[ErrorRow]:
    """The spread over requests of tokens per round (mean, sd, P10, P90), sim vs real; [] unless both
    sides recorded draft rounds (a speculative scenario whose engine side counted them per request).

    What a request's TPOT spread rests on: a request accepting less pays more rounds per token, so a
    simulated spread narrower than the served one shows up here before it does in the TPOT tail.
    """
    s, r = tokens_per_round(sim), tokens_per_round(real)
    if s.size < 2 or r.size < 2:
        return []

    def stat(x: np.ndarray, name: str) -> float:
        if name == "mean":
            return float(x.mean())
        if name == "sd":
            return float(x.std(ddof=1))
        return float(np.percentile(x, float(name[1:])))

    return [row("tokens_per_round_request", name, "tokens", stat(s, name), stat(r, name)) for name in ROUND_STATS]


def compare(sim: Sequence[RequestRecord], real: Sequence[RequestRecord],
            sim_paths: Mapping[str, tuple[float | None, str]] | None = None,
            real_paths: Mapping[str, tuple[float | None, str]] | None = None,
            real_ci: Mapping[tuple[str, str], tuple[float, float] | None] | None = None) -> list[ErrorRow]:
    """Every row of one scenario's error table; raises ValueError if the request lists differ.

    ``real_ci``: {(metric, stat): (lo, hi)} of the measured side (tripath.fidelity.bootstrap.bootstrap_ci),
    attached to the rows it names; rows it does not name (path means) carry none.
    """
    check_same_requests(sim, real)
    rows = (latency_rows(sim, real) + throughput_rows(sim, real) + path_rows(sim_paths or {}, real_paths or {})
            + round_rows(sim, real))
    if not real_ci:
        return rows
    return [replace(r, real_ci=_finite_pair(real_ci.get((r.metric, r.stat)))) for r in rows]


def _finite_pair(pair: tuple[float, float] | None) -> tuple[float, float] | None:
    if pair is None or not all(math.isfinite(v) for v in pair):
        return None
    return float(pair[0]), float(pair[1])


def worst(rows: Sequence[ErrorRow]) -> ErrorRow | None:
    """The row with the largest |error| (None when no row has one)."""
    defined = [r for r in rows if r.error is not None]
    return max(defined, key=lambda r: abs(r.error or 0.0)) if defined else None
