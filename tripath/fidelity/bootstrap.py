"""Bootstrap confidence intervals of the measured side: how far each measured percentile could move.

A measured P99 over ~100 requests rests on the one or two largest values, so a second serving of
the same requests can move it by tens of percent (docs/fidelity.md, "Machine noise"). Before an
error is read as the simulator's, the report asks: would the measured value itself have landed
anywhere near the simulated one on another draw of the requests? The percentile bootstrap (Efron
& Tibshirani 1993, ch. 13) answers it: resample the measured request records with replacement,
recompute every statistic on each resample, and take the 2.5th and 97.5th percentiles of those
statistics as the 95 % interval.

What it does and does not cover: requests are resampled as if independent. Requests that queue
behind one another are positively correlated, which the bootstrap ignores, so under queueing the
interval is, if anything, too narrow: a value outside it is still not proof of a simulator error,
but a value inside it is within the measurement's own spread. Throughput is completed requests (or
output tokens) over the makespan from the first arrival to the last finish; the arrivals are the
same on both sides, so its interval is narrow by construction (the makespan moves only when a
resample drops the first or the last request).

Everything is vectorised over resamples (a (resamples, n) index matrix), so the interval costs little
beside the serving (docs/fidelity.md; benchmarks/bench_fidelity_bootstrap.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from tripath.core.records import RequestRecord
from tripath.fidelity.compare import LATENCY_METRICS, LEVELS, THROUGHPUT

RESAMPLES = 1000
LEVEL = 0.95
Interval = tuple[float, float]


def ci_rng(seed: int, scenario: str, side: str) -> np.random.Generator:
    """The resampling stream of one (run seed, scenario, measured side): the same inputs, the same interval.

    crc32, not hash(): Python salts str hashes per process, and the interval must be reproducible.
    """
    key = [seed, zlib.crc32(scenario.encode("utf-8")), zlib.crc32(side.encode("utf-8"))]
    return np.random.default_rng(np.random.SeedSequence(key))


def per_request_ms(records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """TTFT, TPOT and E2E per request in ms, aligned with ``records``; NaN where undefined.

    Undefined as in tripath.core.metrics.latencies: not completed, or (TPOT) fewer than 2 output tokens.
    """
    done = np.array([r.completed for r in records], dtype=bool)
    arrival = np.array([r.arrival_s for r in records], dtype=float)
    first = np.array([r.first_token_s for r in records], dtype=float)
    finish = np.array([r.finish_s for r in records], dtype=float)
    out = np.array([r.output_tokens for r in records], dtype=float)
    nan = np.full(len(records), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(done & (out >= 2), (finish - first) / (out - 1.0), nan)
    return {"ttft": np.where(done, first - arrival, nan) * 1000.0, "tpot": tpot * 1000.0,
            "e2e": np.where(done, finish - arrival, nan) * 1000.0}


def row_percentiles(samples: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """Percentiles of each row ignoring NaN, numpy's default linear rule: shape (len(qs), rows).

    Equal to np.nanpercentile(samples, qs, axis=1), without its per-row Python loop: NaN sorts last,
    so row i's m finite values are its first m after sorting, and percentile q sits at position
    q/100 * (m - 1) between two of them. Rows with no finite value give NaN.
    """
    ordered = np.sort(samples, axis=1)  # (rows, n), NaN last
    m = np.isfinite(ordered).sum(axis=1)  # (rows,)
    rows = np.arange(ordered.shape[0])
    out = np.full((len(qs), ordered.shape[0]), np.nan)
    ok = m > 0
    for k, q in enumerate(qs):
        pos = q / 100.0 * np.maximum(m - 1, 0)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, np.maximum(m - 1, 0))
        frac = pos - lo
        a, b = ordered[rows, lo], ordered[rows, hi]
        out[k] = np.where(ok, a + (b - a) * frac, np.nan)
    return out


def _interval(stats: np.ndarray, level: float) -> Interval | None:
    """The central ``level`` interval of one statistic's bootstrap values (None if too few are finite)."""
    finite = stats[np.isfinite(stats)]
    if finite.size < 0.5 * stats.size:  # most resamples had nothing to measure: no honest interval
        return None
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(finite, [tail, 100.0 - tail])
    return float(lo), float(hi)


def bootstrap_ci(records: Sequence[RequestRecord], rng: np.random.Generator, resamples: int = RESAMPLES,
                 level: float = LEVEL) -> dict[tuple[str, str], Interval | None]:
    """{(metric, stat): (lo, hi)} for every latency percentile of LEVELS and both throughputs.

    The statistics are computed exactly as tripath.fidelity.compare computes the measured values (same
    latency definitions, same percentile rule, throughput over the resample's own makespan).
    """
    if resamples < 2:
        raise ValueError(f"resamples: must be >= 2, got {resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: must be in (0, 1), got {level}")
    keys = [(m, lv) for m in LATENCY_METRICS for lv in LEVELS] + [("throughput", t) for t in THROUGHPUT]
    n = len(records)
    if n == 0:
        return dict.fromkeys(keys)
    idx = rng.integers(0, n, size=(resamples, n))  # (resamples, n): each row one resample of the requests
    result: dict[tuple[str, str], Interval | None] = {}
    for metric, values in per_request_ms(records).items():
        stats = row_percentiles(values[idx], list(LEVELS.values()))  # (levels, resamples)
        for k, level_name in enumerate(LEVELS):
            result[metric, level_name] = _interval(stats[k], level)
    done = np.array([r.completed for r in records], dtype=bool)[idx]  # (resamples, n)
    arrival = np.array([r.arrival_s for r in records], dtype=float)[idx]
    finish = np.array([r.finish_s if r.completed else -np.inf for r in records], dtype=float)[idx]
    out = np.array([r.output_tokens for r in records], dtype=float)[idx]
    span = finish.max(axis=1) - arrival.min(axis=1)  # as metrics.makespan: first arrival to last finish
    with np.errstate(invalid="ignore", divide="ignore"):
        valid = done.any(axis=1) & (span > 0.0)
        rps = np.where(valid, done.sum(axis=1) / span, np.nan)
        tps = np.where(valid, (out * done).sum(axis=1) / span, np.nan)
    result["throughput", "requests_per_s"] = _interval(rps, level)
    result["throughput", "output_tokens_per_s"] = _interval(tps, level)
    return result
