"""The answer: which path, how many GPUs, what it costs, how sure, for one scenario at one request rate.

Sizing is tripath/planning/capacity.py's ``plan`` (fewest replicas per candidate meeting the SLA; no goodput
curves, which the answer does not print). The candidates that meet the SLA are ranked as the decision matrix
ranks them (tripath/planning/capacity.py ``Plan.ranked``: fewest GPUs, lossless before lossy, larger SLA margin);
the first is recommended, the second is the runner-up. When none meets it, the closest is the candidate with
the largest SLA margin (the least negative) at the largest replica count searched, and each term says by how
much its P99 exceeds the target. The runner-up skips candidates with the winner's very numbers (a path that
changed nothing, such as tiering that never paged).

The binding term is the SLA term with the smallest margin (target - P99) / target.

Robustness: with the recommended candidate and replica count held fixed, the smallest factor on the step costs
(every coefficient of the profile's prefill, decode and step-overhead models: these formulas are linear in
their coefficients, so the factor scales every iteration's cost; paging and SP merge costs are left as they
are) and, separately, on the arrival rate, at which the SLA is no longer met. Found by expanding from 1 in
steps that double (1.05, 1.1, 1.2, 1.4, ...) until a miss, then bisecting to ``tol``; it assumes a larger
factor never helps. Every probe uses the plan's seed (common random numbers).

Speed (docs/planning.md): the sizing searches run in parallel on the executor, largest first, each simulating the
bound (``max_replicas``) first (tripath/planning/capacity.py ``bound_first``), and the two robustness bisections
run in parallel with each other; neither changes a number, only when each simulation runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tripath.planning.cache import ResultCache
from tripath.planning.candidates import by_names
from tripath.planning.capacity import Plan, SearchSpec, plan, sized_job
from tripath.planning.executor import Executor, LocalPoolExecutor
from tripath.planning.scenario_dict import refuse_closed_loop
from tripath.planning.sweep import TERMS, Job, is_cached, run_cached
from tripath.profile.profile import Profile

STEP_COST_MODELS = ("prefill", "decode", "step_overhead")
MAX_FACTOR = 4.0
BISECTIONS = ("step_costs", "arrival_rate")  # robustness's two factors, in the order the output lists them
FIRST_STEP = 0.05  # threshold's first probe is 1 + FIRST_STEP; the step doubles after every factor that meets
GO_FURTHER = ("to go further: measure your own deployment (`tripath calibrate`, docs/) and rerun with --profile; "
              "`tripath plan SCENARIO --qps Q` adds goodput curves, `tripath whatif` varies any field")


def scaled_step_costs(profile: Profile, factor: float) -> Profile:
    """The profile with every prefill, decode and step-overhead cost times ``factor`` (coefficients, or the cells
    of a measured table: every step formula is linear in them)."""
    if not factor > 0:
        raise ValueError(f"cost factor must be > 0, got {factor}")
    costs = {name: model.scaled(factor) if name in STEP_COST_MODELS else model for name, model in profile.costs.items()}
    return dataclasses.replace(profile, costs=costs)


def section_sources(profile: Profile) -> dict[str, list[str]]:
    """Per top-level profile section, the source kinds its numbers carry (every nested ``source`` field)."""
    data = json.loads(profile.to_json())
    out: dict[str, list[str]] = {}

    def walk(node: Any, found: set[str]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "source" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value, found)
        elif isinstance(node, list):
            for value in node:
                walk(value, found)

    for section, value in data.items():
        if section in ("source", "key", "provenance", "notes", "schema_version"):
            continue
        found: set[str] = set()
        walk(value, found)
        if found:
            out[section] = sorted(found)
    return out


def threshold(meets: Callable[[float], bool], tol: float = 0.01, max_factor: float = MAX_FACTOR
              ) -> tuple[float, float | None]:
    """(largest factor found meeting, smallest found missing) around the flip of ``meets`` above 1.

    meets(1) is assumed true. Expands 1 + 0.05 x 2^i until a miss (None when even ``max_factor`` meets),
    then bisects until the two are within ``tol`` of each other."""
    lo, hi, step = 1.0, None, FIRST_STEP
    while hi is None:
        probe = min(1.0 + step, max_factor)
        if meets(probe):
            lo = probe
            if probe >= max_factor:
                return lo, None
            step *= 2.0
        else:
            hi = probe
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def sla_terms(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per given SLA term: P99 mean and interval (ms), target, margin, and the overshoot when it misses."""
    out: dict[str, dict[str, Any]] = {}
    for term in TERMS:
        target = outcome["sla_targets_ms"][term]
        if target is None:
            continue
        p99 = outcome["p99_ms"][term]
        mean = p99["mean"]
        margin = None if mean is None else (target - mean) / target
        out[term] = {"p99_ms": mean, "ci_low_ms": p99.get("ci_low"), "ci_high_ms": p99.get("ci_high"),
                     "target_ms": target, "margin": margin,
                     "over_by": None if margin is None or margin >= 0 else -margin}
    return out


def binding_term(terms: dict[str, dict[str, Any]]) -> str | None:
    """The term with the smallest margin (None when no term has a P99)."""
    given = {t: v["margin"] for t, v in terms.items() if v["margin"] is not None}
    return min(given, key=lambda t: given[t]) if given else None


@dataclass(frozen=True)
class Recommendation:
    """The plan, the chosen row (recommended or closest), the runner-up, robustness and provenance."""

    plan: Plan
    recommended: str | None
    runner_up: str | None
    closest: str | None
    robustness: dict[str, Any] | None
    sources: dict[str, list[str]]
    replications: int = 1

    def row(self, name: str | None) -> dict[str, Any] | None:
        return next((r for r in self.plan.rows if r["candidate"]["name"] == name), None)

    def _summary(self, name: str | None) -> dict[str, Any] | None:
        row = self.row(name)
        if row is None:
            return None
        outcome = row.get("outcome")
        terms = {} if outcome is None or outcome.get("error") else sla_terms(outcome)
        return {"candidate": name, "paths": row["candidate"].get("paths"), "replicas": row.get("replicas"),
                "gpus": row.get("gpus"), "gpus_per_replica": row.get("gpus_per_replica"),
                "searched_replicas": None if outcome is None else outcome.get("replicas"),
                "cost_usd_per_hour": row.get("cost_usd_per_hour"), "terms": terms,
                "binding_term": binding_term(terms), "rejected_share": (outcome or {}).get("rejected_share"),
                "remark": row.get("remark")}

    def to_dict(self) -> dict[str, Any]:
        p = self.plan
        return {"scenario": p.scenario, "qps": p.qps, "sla_ms": p.sla_ms, "gpu_price_usd_per_gpu_hour": p.gpu_price,
                "profile": {"key": p.profile_key, "source": p.profile_source, "section_sources": self.sources},
                "numbers_from": f"simulated on a '{p.profile_source}' profile ({p.profile_key})",
                "sizing": p.sizing, "meets_sla": self.recommended is not None,
                "recommended": self._summary(self.recommended), "runner_up": self._summary(self.runner_up),
                "closest": self._summary(self.closest), "robustness": self.robustness,
                "not_applicable": {r["candidate"]["name"]: r["not_applicable"] for r in p.rows
                                   if r.get("not_applicable")},
                "others": [self._summary(r["candidate"]["name"]) for r in p.rows if not r.get("not_applicable")
                           and r["candidate"]["name"] not in (self.recommended, self.runner_up, self.closest)],
                "replications": self.replications,
                "go_further": GO_FURTHER}


def _same_numbers(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("gpus") == b.get("gpus") and all(
        a["outcome"]["p99_ms"][t]["mean"] == b["outcome"]["p99_ms"][t]["mean"] for t in TERMS)


def _runner_up(rows: tuple[dict[str, Any], ...], ranked: list[str]) -> str | None:
    """The next ranked candidate whose GPUs or P99s differ from the winner's (a path that changed nothing,
    e.g. tiering that never paged, is no alternative); the plain next one when all are the same."""
    if len(ranked) < 2:
        return None
    by_name = {r["candidate"]["name"]: r for r in rows}
    best = by_name[ranked[0]]
    return next((n for n in ranked[1:] if not _same_numbers(by_name[n], best)), ranked[1])


def closest_candidate(rows: tuple[dict[str, Any], ...]) -> str | None:
    """Of a plan's rows that ran, the one with the largest SLA margin (the least negative): the closest to meeting."""
    ran = [r for r in rows if r.get("outcome") and not r["outcome"].get("error")
           and r["outcome"].get("sla_margin") is not None]
    if not ran:
        return None
    return max(ran, key=lambda r: r["outcome"]["sla_margin"])["candidate"]["name"]


@dataclass(frozen=True)
class Bisection:
    """One robustness bisection (a picklable job: the two run in parallel): ``kind`` step_costs or arrival_rate."""

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
    tol: float

    def __post_init__(self) -> None:
        if self.kind not in BISECTIONS:
            raise ValueError(f"bisection kind must be one of {', '.join(BISECTIONS)}, got {self.kind!r}")

    def job(self, factor: float) -> Job:
        """The simulation of ``replicas`` of the candidate with this factor on the step costs or the rate."""
        cost_factor, rate_factor = (factor, 1.0) if self.kind == "step_costs" else (1.0, factor)
        scaled = self.profile if cost_factor == 1.0 else scaled_step_costs(self.profile, cost_factor)
        candidate = by_names(self.profile, [self.candidate_name])[0]
        spec = SearchSpec(self.scenario_json, self.source, scaled.to_json(), candidate, self.qps * rate_factor,
                          self.seed, self.replications, attainment_levels=(), cache_dir=self.cache_dir)
        return sized_job(spec, self.replicas, spec.qps)

    def meets(self, factor: float) -> bool:
        """Whether that simulation (through the cache) meets the SLA."""
        return run_cached(self.job(factor), self.cache_dir).meets_sla


def bisect(job: Bisection) -> tuple[float, float | None]:
    """``threshold`` of the job's probe (module level: runs in a worker)."""
    return threshold(job.meets, job.tol)


def robustness(data: dict[str, Any], source: str | None, profile: Profile, candidate_name: str, replicas: int,
               qps: float, seed: int = 0, replications: int = 1, cache: ResultCache | None = None,
               tol: float = 0.01, executor: Executor | None = None) -> dict[str, Any]:
    """The step-cost factor and the arrival-rate factor at which ``replicas`` of the candidate stop meeting
    (the two bisections in parallel on ``executor``; each is a pure function of its job; in this process when
    the cache holds both first probes, a warm rerun)."""
    by_names(profile, [candidate_name])  # an unknown name fails here, before any job
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    cache_dir = None if cache is None else str(cache.directory)
    out: dict[str, Any] = {"candidate": candidate_name, "replicas": replicas, "tolerance": tol,
                           "max_factor": MAX_FACTOR}
    jobs = [Bisection(kind, text, source, profile, candidate_name, replicas, qps, seed, replications, cache_dir, tol)
            for kind in BISECTIONS]
    first = min(1.0 + FIRST_STEP, MAX_FACTOR)
    if executor is None or all(is_cached(job.job(first), cache_dir) for job in jobs):
        executor = LocalPoolExecutor(1)
    for kind, (last_met, first_missed) in zip(BISECTIONS, executor.map(bisect, jobs), strict=True):
        out[kind] = {"meets_up_to": last_met, "misses_at": first_missed}
    return out


def recommend(data: dict[str, Any], source: str | None, profile: Profile, qps: float,
              gpu_price: float | None = None, seed: int = 0, replications: int = 2, max_replicas: int = 8,
              executor: Executor | None = None, cache: ResultCache | None = None, tol: float = 0.01,
              with_robustness: bool = True, bound_first: bool = True, longest_first: bool = True) -> Recommendation:
    """Size every candidate at ``qps`` (``plan``), rank those meeting the SLA, probe the winner's robustness.

    ``bound_first`` and ``longest_first`` are ``plan``'s: the same recommendation either way, only faster."""
    result = plan(data, source, profile, qps, gpu_price=gpu_price, seed=seed, replications=replications,
                  max_replicas=max_replicas, executor=executor, cache=cache, attainment_levels=(),
                  bound_first=bound_first, longest_first=longest_first)
    ranked = [r["candidate"]["name"] for r in result.ranked()]
    best = ranked[0] if ranked else None
    runner = _runner_up(result.rows, ranked)
    closest = None if best is not None else closest_candidate(result.rows)
    probe = None
    if best is not None and with_robustness:
        row = next(r for r in result.rows if r["candidate"]["name"] == best)
        probe = robustness(data, source, profile, best, int(row["replicas"]), qps, seed, replications, cache, tol,
                           executor)
    return Recommendation(result, best, runner, closest, probe, section_sources(profile), replications)


def scenario_qps(data: dict[str, Any]) -> float | None:
    """The scenario's own request rate (``workload.arrival.rate_per_s``), None when it states a load fraction."""
    refuse_closed_loop(data)
    rate = (data.get("workload") or {}).get("arrival", {}).get("rate_per_s")
    return None if rate is None else float(rate)
