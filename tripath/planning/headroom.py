"""Headroom: how far the recommended deployment is from missing its SLA.

With the recommended candidate and replica count held fixed, the factor on the step costs (every coefficient of the
profile's prefill, decode and step-overhead models: these formulas are linear in their coefficients, so the factor
scales every iteration's cost; paging and SP merge costs are left as they are) and, separately, on the arrival
rate, at which a P99 reaches its target.

Each factor is probed on a fixed grid, 1 + GRID_STEP x k: from k = 1, doubling k until a probe is over the SLA
(some term's P99 over its target, or a request rejected), then bisecting k to two neighbours, one under and one
over; the factor is then interpolated linearly on the P99s of those two probes (the binding term's: the first to
reach its target). Beside it, where the first term's 95 % interval top reaches its target (``confident_factor``, on
the same probes: what the sample can promise). It assumes a larger factor never helps. Every probe is one
simulation at the sample the recommendation was decided on (the verdict's requests per replication and its
replications, the plan's seed: common random numbers), its P99 the mean over replications of each one's steady
P99, as the verdict reads it (tripath/planning/decision.py).

Why a grid and one sample, not a verdict with confidence bisected to a tolerance: each probe is a cached simulation
whose numbers do not depend on the SLA, and the grid's points are the same for every SLA (the doubling ones always),
so a rerun with another target re-reads them and simulates only the few new points near its own crossing; the
point estimate is what a planner asks (at what load does the P99 reach the target), and a verdict with confidence at
every probe would escalate each one near the crossing to the largest sample. Both factors are walked from the cache
in this process first; only one that needs a new simulation goes to the executor (the two run in parallel there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tripath.core.metrics import TERMS
from tripath.planning.cache import ResultCache
from tripath.planning.candidates import by_names
from tripath.planning.capacity import SearchSpec, sized_job, sla_targets
from tripath.planning.decision import DecisionRule, judge
from tripath.planning.executor import Executor, LocalPoolExecutor
from tripath.planning.scenario_dict import canonical
from tripath.planning.sweep import Job, NotCached, run_cached
from tripath.profile.profile import Profile

STEP_COST_MODELS = ("prefill", "decode", "step_overhead")
GRID_STEP = 0.05  # the factors probed: 1 + GRID_STEP x k
MAX_FACTOR = 4.0
MAX_INDEX = round((MAX_FACTOR - 1.0) / GRID_STEP)
BISECTIONS = ("step_costs", "arrival_rate")  # robustness's two factors, in the order the output lists them


def scaled_step_costs(profile: Profile, factor: float) -> Profile:
    """The profile with every prefill, decode and step-overhead cost times ``factor`` (coefficients, or the cells
    of a measured table: every step formula is linear in them)."""
    if not factor > 0:
        raise ValueError(f"cost factor must be > 0, got {factor}")
    costs = {name: model.scaled(factor) if name in STEP_COST_MODELS else model for name, model in profile.costs.items()}
    return dataclasses.replace(profile, costs=costs)


def grid_factor(k: int) -> float:
    """The k-th factor of the grid, 1 + GRID_STEP x k (rounded, so the same k always gives the same bytes)."""
    return round(1.0 + GRID_STEP * k, 9)


def crossing(over: Callable[[int], bool], max_index: int = MAX_INDEX) -> tuple[int, int | None]:
    """(the largest grid index found under, the smallest found over) for a predicate assumed false at 0 and monotone:
    k = 1, 2, 4, ... (the last capped at ``max_index``) until ``over``, then bisection to neighbours;
    (max_index, None) when even ``max_index`` is under."""
    lo, hi, k = 0, None, 1
    while hi is None:
        k = min(k, max_index)
        if over(k):
            hi = k
        else:
            lo = k
            if k >= max_index:
                return lo, None
            k *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if over(mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


def interpolated(under: dict[str, Any], over: dict[str, Any], key: str = "p99_ms") -> tuple[float, str | None]:
    """The factor at which the first term reaches its target, linear between two probes' ``key`` values (P99s, or
    their intervals' tops: ``Bisection.point`` dicts, one under and one over), and that term; the under probe's
    factor and None when the over one is over by a rejection or a missing value (nothing to interpolate: the
    conservative end)."""
    found = []
    for term, target in over["targets_ms"].items():
        low, high = under[key].get(term), over[key].get(term)
        if low is None or high is None or high <= target:
            continue
        share = 0.0 if high <= low else min(1.0, max(0.0, (target - low) / (high - low)))
        found.append((under["factor"] + share * (over["factor"] - under["factor"]), term))
    if over["rejected_share"] > 0.0 or any(over[key].get(t) is None for t in over["targets_ms"]) or not found:
        return under["factor"], None
    return min(found)


def above(point: dict[str, Any], key: str) -> bool:
    """Whether a probe is over the SLA by ``key`` (P99s or their intervals' tops): a rejection, a missing value, or
    a value over its target."""
    values = point[key]
    return point["rejected_share"] > 0.0 or any(values.get(t) is None or values[t] > v
                                                for t, v in point["targets_ms"].items())


def confident_factor(points: list[dict[str, Any]]) -> float:
    """Where the first term's 95 % interval top reaches its target, interpolated between the probes around it (the
    first probe over by its interval's top and the one before it; probes in factor order, the first under): at most
    the estimate, since a top is never under its P99. The last factor when none is over."""
    for before, point in zip(points, points[1:], strict=False):
        if above(point, "ci_high_ms"):
            return interpolated(before, point, "ci_high_ms")[0]
    return points[-1]["factor"]


@dataclass(frozen=True)
class Bisection:
    """One headroom factor's walk (a picklable job: the two run in parallel): ``kind`` step_costs or arrival_rate;
    ``requests`` per replication of each probe (the deciding stage's; None: the scenario's own, without a rule)."""

    kind: str
    scenario_json: str
    source: str | None
    profile: Profile
    candidate_name: str
    replicas: int
    qps: float
    seed: int
    replications: int
    cache_dir: str | None
    requests: int | None = None
    rule: DecisionRule | None = None
    cached_only: bool = False

    def __post_init__(self) -> None:
        if self.kind not in BISECTIONS:
            raise ValueError(f"bisection kind must be one of {', '.join(BISECTIONS)}, got {self.kind!r}")

    def spec(self, factor: float) -> SearchSpec:
        """The search spec of the candidate with this factor on the step costs or on the rate."""
        cost_factor, rate_factor = (factor, 1.0) if self.kind == "step_costs" else (1.0, factor)
        scaled = self.profile if cost_factor == 1.0 else scaled_step_costs(self.profile, cost_factor)
        candidate = by_names(self.profile, [self.candidate_name])[0]
        return SearchSpec(self.scenario_json, self.source, scaled.to_json(), candidate, self.qps * rate_factor,
                          self.seed, self.replications, attainment_levels=(), cache_dir=self.cache_dir, rule=self.rule)

    def job(self, factor: float) -> Job:
        """The one simulation of ``replicas`` of the candidate with this factor."""
        spec = self.spec(factor)
        return sized_job(spec, self.replicas, spec.qps, self.requests if self.rule is not None else None)

    def point(self, k: int) -> dict[str, Any]:
        """Grid point k: its factor, each SLA term's P99 (ms: the verdict's mean of steady replication P99s with a
        rule, else the outcome's P99 mean) and target, the rejected share, and whether it is over the SLA."""
        factor = grid_factor(k)
        spec = self.spec(factor)
        targets = {t: v for t, v in sla_targets(spec).items() if v is not None}
        outcome = run_cached(self.job(factor), self.cache_dir, self.cached_only)
        if outcome.error is not None:
            return {"factor": factor, "p99_ms": {}, "targets_ms": targets, "rejected_share": 1.0, "over": True,
                    "error": outcome.error}
        if self.rule is not None:
            verdict = judge(outcome.data, self.requests or 0, targets=targets)
            p99 = {t.term: t.p99_ms for t in verdict.terms}
            high = {t.term: t.high_ms for t in verdict.terms}
            point = {"factor": factor, "p99_ms": p99, "ci_high_ms": high, "targets_ms": targets,
                     "rejected_share": verdict.rejected_share}
            return {**point, "over": above(point, "p99_ms")}
        p99 = {t: outcome.p99_ms(t) for t in TERMS if t in targets}  # no interval: its top is the P99 itself
        return {"factor": factor, "p99_ms": p99, "ci_high_ms": p99, "targets_ms": targets,
                "rejected_share": float(outcome.data.get("rejected_share") or 0.0), "over": not outcome.meets_sla}

    def walk(self) -> dict[str, Any]:
        """The grid walk (``crossing``) and its interpolated factor: ``meets_up_to`` and ``misses_at`` (the two
        neighbouring grid factors; misses_at None when even MAX_FACTOR is under), ``estimate`` (where the binding
        term's P99 reaches its target), ``confident`` (where a 95 % interval's top does: ``confident_factor``),
        ``binding_term`` and every probe simulated."""
        points = {0: self.point(0)}

        def over(k: int) -> bool:
            if k not in points:
                points[k] = self.point(k)
            return bool(points[k]["over"])

        if points[0]["over"]:  # the held deployment itself is over at this sample (no rule: another statistic)
            lo, hi = 0, 0
        else:
            lo, hi = crossing(over)
        if hi is None:
            estimate, binding = grid_factor(lo), None
        elif hi == lo:
            estimate, binding = 1.0, None
        else:
            estimate, binding = interpolated(points[lo], points[hi])
        ordered = [points[i] for i in sorted(points)]
        confident = 1.0 if hi == lo else min(estimate, confident_factor(ordered))
        return {"meets_up_to": grid_factor(lo), "misses_at": None if hi is None else grid_factor(hi),
                "estimate": estimate, "confident": confident, "binding_term": binding,
                "points": [{k: v for k, v in point.items() if k != "targets_ms"} for point in ordered]}


def walk(job: Bisection) -> dict[str, Any]:
    """``Bisection.walk`` (module level: runs in a worker)."""
    return job.walk()


def robustness(data: dict[str, Any], source: str | None, profile: Profile, candidate_name: str, replicas: int,
               qps: float, seed: int = 0, replications: int = 1, cache: ResultCache | None = None,
               executor: Executor | None = None, rule: DecisionRule | None = None, requests: int | None = None
               ) -> dict[str, Any]:
    """The step-cost factor and the arrival-rate factor at which ``replicas`` of the candidate reach the SLA's
    targets (each a pure function of its job), probed at ``requests`` per replication (the recommendation's
    deciding stage) with the rule's replications; each factor walked from the cache in this process first, the
    ones that need a simulation on ``executor``, in parallel."""
    by_names(profile, [candidate_name])  # an unknown name fails here, before any job
    text = canonical(data)
    cache_dir = None if cache is None else str(cache.directory)
    reps = rule.replications if rule is not None else replications
    out: dict[str, Any] = {"candidate": candidate_name, "replicas": replicas, "grid_step": GRID_STEP,
                           "max_factor": MAX_FACTOR, "requests_per_replication": requests if rule else None,
                           "replications": reps}
    jobs = [Bisection(kind, text, source, profile, candidate_name, replicas, qps, seed, replications, cache_dir,
                      requests, rule) for kind in BISECTIONS]
    found: dict[str, dict[str, Any]] = {}
    for job in jobs:
        if cache_dir is None:
            continue
        try:
            found[job.kind] = dataclasses.replace(job, cached_only=True).walk()
        except NotCached:
            pass
    pending = [job for job in jobs if job.kind not in found]
    for job, result in zip(pending, (executor or LocalPoolExecutor(1)).map(walk, pending), strict=True):
        found[job.kind] = result
    for kind in BISECTIONS:
        out[kind] = found[kind]
    return out
