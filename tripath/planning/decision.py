"""When a simulated P99 is allowed to decide: a verdict with confidence, and the samples it takes to reach one.

The tail of one replication: the P99 of each SLA term over its steady requests, the first ``warmup`` share of its
arrivals dropped (they met an empty system, so they pull the tail down). The interval: replication means, the mean
of the R per-replication P99s +- t(0.975, R - 1) s / sqrt(R). Replications are independent seeded runs, so this
interval accounts for the correlation between requests of one run (they share queues and batches), which an
order-statistic interval over the pooled requests treats as independent and so draws too narrow.

A term's verdict: "meets" when the interval's top is at or under the target, "misses" when its bottom is above it,
else "undecided". A run that rejected any request misses whatever its latencies: a rejected request (one whose KV the
replica cannot hold at all) is served by no replica, and leaving it out of the percentile would drop exactly the
longest prompts from the tail (sweeps elsewhere tolerate MAX_REJECTED; a verdict does not). The simulation's
verdict: "misses" when a term misses, "meets" when every given term meets, else "undecided".

Sequential sampling (``decide``): stage k simulates N0 x 2^k requests per replication, N0 the larger of the
requests asked for and ``tail_minimum`` (TAIL_EXCEEDANCES / (1 - 0.99) = 1,000: ten requests expected beyond the
P99 in each replication, so the P99 is an interpolation between sampled requests, not the sample's maximum). An
undecided stage runs the next, larger one until its size would pass ``budget_requests``; then the verdict is
"undecided at this budget" and says its interval. An undecided stage whose P99 mean is already over FUTILITY x the
target on some term stops there ("undecided, not simulated further"): more requests narrow the interval around a
mean that far over, so the search, which treats undecided as not meeting, would conclude the same at the budget;
only the label between undecided and misses is left open, and the overloaded runs such a probe is made of are
the slowest to simulate. Each stage is a whole simulation through the result cache, so a
rerun, or a search that revisits a probe, reads it back.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tripath.core import metrics
from tripath.core.metrics import TERMS
from tripath.core.records import RequestRecord

MAX_REJECTED = 0.01  # a sweep rejecting more than this share of its arrivals misses the SLA (tripath/planning/sweep.py)
QUANTILE = 0.99
TAIL_EXCEEDANCES = 10  # requests expected beyond the P99 per replication at the first stage
WARMUP = 0.1  # share of each replication's first arrivals left out of its tail
VERDICTS = ("meets", "misses", "undecided")
FUTILITY = 1.25  # an undecided term whose P99 mean is over this times its target is not simulated further


def tail_minimum(exceedances: int = TAIL_EXCEEDANCES, quantile: float = QUANTILE) -> int:
    """Requests per replication for ``exceedances`` expected beyond the ``quantile`` (1,000 for 10 beyond P99)."""
    return math.ceil(exceedances / (1.0 - quantile) - 1e-9)


def steady_p99s(runs: Sequence[Sequence[RequestRecord]], warmup: float = WARMUP) -> dict[str, list[float | None]]:
    """Per term, each replication's P99 (ms) over its requests after the first ``warmup`` share of arrivals
    (None where none completed)."""
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup}")
    out: dict[str, list[float | None]] = {term: [] for term in TERMS}
    for records in runs:
        ordered = sorted(records, key=lambda r: (r.arrival_s, r.request_id))
        steady = ordered[int(len(ordered) * warmup):]
        for term in TERMS:
            values = metrics.latencies(steady, term)
            out[term].append(float(np.percentile(values, QUANTILE * 100.0)) * 1000.0 if values.size else None)
    return out


def replication_interval(values: Sequence[float | None]) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high) of the replications' values, a 95 % Student-t interval; (None,)*3 when one is missing
    (a replication in which nothing completed has no tail: nothing to decide on), no interval from one value."""
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None, None, None
    estimate = metrics.estimate([float(v) for v in values if v is not None])  # a latency is never below 0
    return estimate["mean"], estimate["ci_low"], estimate["ci_high"]


@dataclass(frozen=True)
class TermVerdict:
    """One SLA term: its P99 (mean over replications, ms), interval, target and verdict."""

    term: str
    p99_ms: float | None
    low_ms: float | None
    high_ms: float | None
    target_ms: float
    verdict: str

    @property
    def margin(self) -> float | None:
        """(target - P99) / target: positive while it meets."""
        return None if self.p99_ms is None else (self.target_ms - self.p99_ms) / self.target_ms

    def to_dict(self) -> dict[str, Any]:
        return {"term": self.term, "p99_ms": self.p99_ms, "ci_low_ms": self.low_ms, "ci_high_ms": self.high_ms,
                "target_ms": self.target_ms, "margin": self.margin, "verdict": self.verdict}


@dataclass(frozen=True)
class Verdict:
    """A simulation's verdict against the SLA, the per-term evidence, and the samples it rests on."""

    verdict: str
    terms: tuple[TermVerdict, ...]
    rejected_share: float
    requests: int  # per replication, at the stage that decided (or the last one)
    replications: int
    stages: int = 1
    budget_reached: bool = False
    stopped: bool = False  # undecided with a mean over FUTILITY x its target: not simulated further

    @property
    def meets(self) -> bool:
        return self.verdict == "meets"

    @property
    def binding(self) -> TermVerdict | None:
        """The term with the smallest margin (None when no term has a P99)."""
        given = [t for t in self.terms if t.margin is not None]
        return min(given, key=lambda t: t.margin or 0.0) if given else None

    @property
    def why(self) -> str:
        """One line: the verdict and the interval behind it."""
        if self.rejected_share > 0.0:
            return (f"misses: {self.rejected_share:.2%} of requests rejected (their KV does not fit this layout at "
                    "all: a rejected request is not served)")
        parts = []
        for t in self.terms:
            span = ("no interval" if t.low_ms is None or t.high_ms is None
                    else f"95% {t.low_ms:,.0f} to {t.high_ms:,.0f} ms")
            p99 = "none completed" if t.p99_ms is None else f"{t.p99_ms:,.0f} ms"
            parts.append(f"{t.term.upper()} P99 {p99} ({span}) vs {t.target_ms:,.0f} ms: {t.verdict}")
        budget = ""
        if self.verdict == "undecided" and self.stopped:
            budget = f" (not simulated further: a P99 mean over {FUTILITY:g}x its target)"
        elif self.verdict == "undecided" and self.budget_reached:
            budget = " at this budget"
        return (f"{self.verdict}{budget} over {self.replications} x {self.requests:,} requests: "
                + "; ".join(parts))

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "terms": {t.term: t.to_dict() for t in self.terms},
                "rejected_share": self.rejected_share, "requests_per_replication": self.requests,
                "replications": self.replications, "stages": self.stages, "budget_reached": self.budget_reached,
                "stopped": self.stopped, "why": self.why}


def term_verdict(low: float | None, high: float | None, target: float) -> str:
    """meets / misses / undecided for an interval against a target (an interval missing an end is undecided)."""
    if low is None or high is None:
        return "undecided"
    if high <= target:
        return "meets"
    if low > target:
        return "misses"
    return "undecided"


def judge(outcome: dict[str, Any], requests: int, stages: int = 1, budget_reached: bool = False,
          targets: dict[str, float | None] | None = None) -> Verdict:
    """The verdict of one sweep outcome (tripath/planning/sweep.py ``run_job``'s dict, with its steady tails)
    against ``targets`` (ms per term; default: the outcome's own, the SLA it was simulated with)."""
    targets = outcome["sla_targets_ms"] if targets is None else targets
    tails = outcome["p99_steady_ms_by_replication"]
    terms = []
    for term in TERMS:
        target = targets.get(term)
        if target is None:
            continue
        mean, low, high = replication_interval(tails[term])
        terms.append(TermVerdict(term, mean, low, high, float(target), term_verdict(low, high, float(target))))
    rejected = float(outcome.get("rejected_share") or 0.0)
    kinds = {t.verdict for t in terms}
    if rejected > 0.0 or "misses" in kinds:
        verdict = "misses"
    elif kinds <= {"meets"} and terms:
        verdict = "meets"
    else:
        verdict = "undecided"
    return Verdict(verdict, tuple(terms), rejected, requests, int(outcome["replications"]), stages, budget_reached)


@dataclass(frozen=True)
class DecisionRule:
    """How much simulation a verdict may take: replications, the first stage's floor, the largest stage."""

    replications: int = 4
    budget_requests: int = 8000  # per replication, the largest stage
    exceedances: int = TAIL_EXCEEDANCES

    def __post_init__(self) -> None:
        if self.replications < 2:
            raise ValueError(f"a verdict needs >= 2 replications for its interval, got {self.replications}")
        if self.budget_requests < 1:
            raise ValueError(f"budget_requests must be >= 1, got {self.budget_requests}")

    def stages(self, asked: int) -> list[int]:
        """Requests per replication of each stage: max(asked, tail minimum), doubling, up to the budget (the first
        stage runs even when it alone passes the budget)."""
        first = max(int(asked), tail_minimum(self.exceedances))
        sizes = [first]
        while sizes[-1] * 2 <= self.budget_requests:
            sizes.append(sizes[-1] * 2)
        return sizes

    def to_dict(self) -> dict[str, Any]:
        return {"replications": self.replications, "budget_requests_per_replication": self.budget_requests,
                "tail_minimum_requests": tail_minimum(self.exceedances), "warmup_share": WARMUP,
                "interval": "95 % Student-t over replications' P99s (replication means)"}


def decide(run_stage: Callable[[int], dict[str, Any]], rule: DecisionRule, asked: int,
           targets: dict[str, float | None] | None = None) -> tuple[Verdict, dict[str, Any]]:
    """Simulate stages (``run_stage(requests per replication)`` gives the outcome dict) until a verdict against
    ``targets`` (judge's) that is not undecided, or the budget; (the verdict, the deciding stage's outcome)."""
    sizes = rule.stages(asked)
    for i, size in enumerate(sizes):
        outcome = run_stage(size)
        if outcome.get("error"):
            raise RefusedError(outcome["error"])
        verdict = judge(outcome, size, i + 1, budget_reached=i == len(sizes) - 1, targets=targets)
        if verdict.verdict != "undecided":
            break
        if i < len(sizes) - 1 and futile(verdict):
            return dataclasses.replace(verdict, stopped=True), outcome
    return verdict, outcome


def futile(verdict: Verdict) -> bool:
    """Whether an undecided verdict has a term whose P99 mean is over FUTILITY x its target."""
    return any(t.p99_ms is not None and t.p99_ms > FUTILITY * t.target_ms for t in verdict.terms)


class RefusedError(Exception):
    """The simulator refused the scenario (its message says the file and field)."""
