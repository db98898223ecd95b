"""Metrics: pure functions over request records (no SimPy), as Ciw computes from get_all_records().

Per completed request (seconds):
  TTFT        = first_token - arrival
  TPOT        = (finish - first_token) / (output_tokens - 1), only for requests with >= 2 output tokens
                (the mean time between consecutive output tokens after the first)
  end-to-end  = finish - arrival
  queueing    = admitted - arrival
Percentiles are numpy's default (linear interpolation between order statistics); P99.9 is 99.9.

SLA attainment (targets in ms, as scenario.sla gives them): the fraction of *arrived* requests
that completed and met the term; a rejected request meets no term. A request with one output
token has no TPOT and meets the TPOT term vacuously. ``all`` requires every given term.

Throughput is over the makespan: from the first arrival to the last finish. Utilisation is each
replica's busy time (an iteration in progress) over the same makespan.

Across replications (``estimate``): the mean with a 95% Student-t confidence interval,
mean +- t(0.975, R - 1) * sd / sqrt(R), intersected with the quantity's range (a throughput, count or
time is >= 0, a fraction such as utilisation or attainment lies in [0, 1]); the true value lies in that
range, so the cut interval covers it whenever the uncut one does, and it never shows a negative
throughput or a utilisation above 100 %. No interval when R = 1.

A latency percentile (``percentile_estimate``) is the mean over replications of each replication's
percentile, with a distribution-free order-statistic interval from the requests of all replications
pooled (``quantile_interval``): the q-quantile lies between the order statistics x(l) and x(u) with
probability P(l <= B < u), B ~ Binomial(n, q), at least 95 %. Its ends are observed latencies, so it
never goes below zero (a Student-t interval over a few skewed P99s can); it treats the requests as
independent draws. Too few requests for an end (at P99 the upper end needs n >= 368) leave it None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from tripath.core.records import COMPLETED, REJECTED, ReplicaStats, RequestRecord

PERCENTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
SlaTerm = Literal["ttft", "tpot", "e2e"]
TERMS: tuple[SlaTerm, ...] = ("ttft", "tpot", "e2e")  # the SLA terms, the one spelling every package uses
LATENCY_METRICS = (*TERMS, "queueing")
SLA_TERMS: dict[SlaTerm, str] = {term: f"{term}_p99_ms" for term in TERMS}  # term -> its key in [sla]
CONFIDENCE = 0.95
INTERVAL_METHOD = "order-statistic 95 %"
INTERVAL_NOTE = ("distribution-free binomial interval of each percentile over the requests of all replications "
                 "pooled (its ends are observed latencies, never below zero; None where too few requests for an "
                 "end); mean = the mean over replications of each replication's percentile (tripath/core/metrics.py)")


def sla_targets(sla: Mapping[str, Any] | None) -> dict[SlaTerm, float | None]:
    """A scenario's ``[sla]`` table as the P99 target in ms per term (None: not given, or no table), so every
    reader of the table spells the terms and their keys the same way."""
    return {term: (sla or {}).get(SLA_TERMS[term]) for term in TERMS}


def completed(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.status == COMPLETED]


def latencies(records: Sequence[RequestRecord], metric: str) -> np.ndarray:
    """Per-request values of one latency metric, in seconds, for completed requests (request order)."""
    done = completed(records)
    if metric == "tpot":
        done = [r for r in done if r.output_tokens >= 2]
    arrival = np.array([r.arrival_s for r in done], dtype=float)
    admitted = np.array([r.admitted_s for r in done], dtype=float)
    first = np.array([r.first_token_s for r in done], dtype=float)
    finish = np.array([r.finish_s for r in done], dtype=float)
    if metric == "ttft":
        return first - arrival
    if metric == "tpot":
        return (finish - first) / (np.array([r.output_tokens for r in done], dtype=float) - 1.0)
    if metric == "e2e":
        return finish - arrival
    if metric == "queueing":
        return admitted - arrival
    raise ValueError(f"unknown metric {metric!r}; known: {', '.join(LATENCY_METRICS)}")


def percentiles(values: np.ndarray) -> dict[str, float]:
    """P50/P90/P99/P99.9 of ``values``; NaN for every level when there are none."""
    if values.size == 0:
        return {name: math.nan for name in PERCENTILES}
    points = np.percentile(values, list(PERCENTILES.values()))
    return {name: float(v) for name, v in zip(PERCENTILES, points, strict=True)}


def latency_percentiles(records: Sequence[RequestRecord]) -> dict[str, dict[str, float]]:
    """{metric: {p50, p90, p99, p999}} in seconds for TTFT, TPOT, end-to-end and queueing delay."""
    return {metric: percentiles(latencies(records, metric)) for metric in LATENCY_METRICS}


def counts(records: Sequence[RequestRecord]) -> dict[str, int]:
    done = sum(1 for r in records if r.status == COMPLETED)
    rejected = sum(1 for r in records if r.status == REJECTED)
    return {"arrived": len(records), "completed": done, "rejected": rejected}


def sla_attainment(records: Sequence[RequestRecord], ttft_ms: float | None = None,
                   tpot_ms: float | None = None, e2e_ms: float | None = None) -> dict[str, float | None]:
    """Fraction of arrived requests meeting each given term, and all given terms; None for absent terms."""
    targets = {"ttft": ttft_ms, "tpot": tpot_ms, "e2e": e2e_ms}
    n = len(records)
    met_all = np.array([r.status == COMPLETED for r in records], dtype=bool)
    result: dict[str, float | None] = {}
    for term, target_ms in targets.items():
        if target_ms is None:
            result[term] = None
            continue
        met = np.array([meets(r, term, target_ms / 1000.0) for r in records], dtype=bool)
        met_all &= met
        result[term] = float(met.mean()) if n else math.nan
    given = any(t is not None for t in targets.values())
    result["all"] = (float(met_all.mean()) if n else math.nan) if given else None
    return result


def meets(record: RequestRecord, term: str, target_s: float) -> bool:
    """Whether one request met one SLA term (target in seconds); a rejected request meets none."""
    if record.status != COMPLETED:
        return False
    if term == "ttft":
        return record.first_token_s - record.arrival_s <= target_s
    if term == "e2e":
        return record.finish_s - record.arrival_s <= target_s
    if record.output_tokens < 2:  # tpot: no inter-token interval to miss
        return True
    return (record.finish_s - record.first_token_s) / (record.output_tokens - 1) <= target_s


def makespan(records: Sequence[RequestRecord]) -> float:
    """Seconds from the first arrival to the last finish (0 when nothing completed)."""
    done = completed(records)
    if not done:
        return 0.0
    return max(r.finish_s for r in done) - min(r.arrival_s for r in records)


def throughput(records: Sequence[RequestRecord]) -> dict[str, float]:
    """Completed requests and generated tokens per second over the makespan."""
    span = makespan(records)
    done = completed(records)
    tokens = sum(r.output_tokens for r in done)
    if span <= 0.0:
        return {"requests_per_s": math.nan, "output_tokens_per_s": math.nan}
    return {"requests_per_s": len(done) / span, "output_tokens_per_s": tokens / span}


def utilisation(records: Sequence[RequestRecord], replicas: Sequence[ReplicaStats]) -> list[float]:
    """Busy fraction of each replica over the run's makespan."""
    span = makespan(records)
    return [r.busy_s / span if span > 0.0 else math.nan for r in replicas]


def estimate(values: Sequence[float], low: float | None = 0.0, high: float | None = None
             ) -> dict[str, float | None]:
    """Mean over replications with a 95% Student-t interval cut to the quantity's range [low, high];
    NaN replications are left out. The default range is [0, inf): throughputs, counts, times and bytes
    cannot be negative; fractions pass high=1.0, signed differences low=None."""
    finite = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if finite.size == 0:
        return {"mean": None, "ci_low": None, "ci_high": None}
    mean = float(finite.mean())
    if finite.size < 2:
        return {"mean": mean, "ci_low": None, "ci_high": None}
    # scipy.stats.t.ppf(q, df) is stdtrit(df, q) underneath; scipy.special loads in a quarter of the time
    # scipy.stats takes, and only where an interval is computed.
    from scipy.special import stdtrit

    half = float(stdtrit(finite.size - 1, 0.975) * finite.std(ddof=1) / math.sqrt(finite.size))
    ci_low, ci_high = mean - half, mean + half
    if low is not None:
        ci_low = max(ci_low, low)
    if high is not None:
        ci_high = min(ci_high, high)
    return {"mean": mean, "ci_low": ci_low, "ci_high": ci_high}


def quantile_interval(values: np.ndarray, q: float, confidence: float = CONFIDENCE
                      ) -> tuple[float | None, float | None]:
    """Distribution-free interval for the ``q``-quantile (0 < q < 1) of the values' distribution.

    The order statistics x(l) <= x(u) (1-based) with l the largest rank such that P(B <= l - 1) <= a/2
    and u the smallest such that P(B <= u - 1) >= 1 - a/2, B ~ Binomial(n, q), a = 1 - confidence:
    then P(x(l) <= quantile < x(u)) >= confidence. An end with no such rank within 1..n is None.
    """
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n == 0:
        return None, None
    from scipy.special import bdtr

    alpha = 1.0 - confidence
    cdf = bdtr(np.arange(n + 1), n, q)  # cdf[k] = P(B <= k)
    low_ranks = np.nonzero(cdf[:n] <= alpha / 2)[0]  # rank l = k + 1 with P(B <= k) <= a/2
    high_ranks = np.nonzero(cdf[:n] >= 1.0 - alpha / 2)[0]  # rank u = k + 1 with P(B <= k) >= 1 - a/2
    low = float(x[low_ranks[-1]]) if low_ranks.size else None
    high = float(x[high_ranks[0]]) if high_ranks.size else None
    return low, high


def percentile_estimate(per_run: Sequence[np.ndarray], level: str, scale: float = 1.0) -> dict[str, float | None]:
    """One percentile (a PERCENTILES key) over replications, times ``scale`` (1000: seconds to ms): the mean
    of each replication's percentile and the order-statistic interval over all replications' values pooled."""
    runs = [np.asarray(v, dtype=float) for v in per_run]
    mean = estimate([percentiles(v)[level] * scale for v in runs])["mean"]
    if mean is None:
        return {"mean": None, "ci_low": None, "ci_high": None}
    low, high = quantile_interval(np.concatenate(runs), PERCENTILES[level] / 100.0)
    return {"mean": mean, "ci_low": None if low is None else low * scale,
            "ci_high": None if high is None else high * scale}
