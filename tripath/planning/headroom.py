"""Headroom: how far the recommended deployment is from missing its SLA.

With the recommended candidate and replica count held fixed, the smallest factor on the step costs (every
coefficient of the profile's prefill, decode and step-overhead models: these formulas are linear in their
coefficients, so the factor scales every iteration's cost; paging and SP merge costs are left as they are) and,
separately, on the arrival rate, at which the SLA is no longer met. Found by expanding from 1 in steps that double
(1.05, 1.1, 1.2, 1.4, ...) until a miss, then bisecting to ``tol``; it assumes a larger factor never helps. Every
probe uses the plan's seed (common random numbers), and the two bisections run in parallel with each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tripath.planning.cache import ResultCache
from tripath.planning.candidates import by_names
from tripath.planning.capacity import SearchSpec, first_job, probe
from tripath.planning.decision import DecisionRule, RefusedError
from tripath.planning.executor import Executor, LocalPoolExecutor
from tripath.planning.scenario_dict import canonical
from tripath.planning.sweep import Job, is_cached
from tripath.profile.profile import Profile

STEP_COST_MODELS = ("prefill", "decode", "step_overhead")
MAX_FACTOR = 4.0
BISECTIONS = ("step_costs", "arrival_rate")  # robustness's two factors, in the order the output lists them
FIRST_STEP = 0.05  # threshold's first probe is 1 + FIRST_STEP; the step doubles after every factor that meets


def scaled_step_costs(profile: Profile, factor: float) -> Profile:
    """The profile with every prefill, decode and step-overhead cost times ``factor`` (coefficients, or the cells
    of a measured table: every step formula is linear in them)."""
    if not factor > 0:
        raise ValueError(f"cost factor must be > 0, got {factor}")
    costs = {name: model.scaled(factor) if name in STEP_COST_MODELS else model for name, model in profile.costs.items()}
    return dataclasses.replace(profile, costs=costs)



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
    rule: DecisionRule | None = None

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
        """The first simulation of ``replicas`` of the candidate with this factor (what a warm cache holds)."""
        return first_job(self.spec(factor), self.replicas)

    def meets(self, factor: float) -> bool:
        """Whether that probe (through the cache and the decision rule) meets the SLA."""
        spec = self.spec(factor)
        try:
            outcome, verdict = probe(spec, self.replicas, spec.qps)
        except RefusedError:
            return False
        return outcome.meets_sla if verdict is None else verdict.meets


def bisect(job: Bisection) -> tuple[float, float | None]:
    """``threshold`` of the job's probe (module level: runs in a worker)."""
    return threshold(job.meets, job.tol)


def robustness(data: dict[str, Any], source: str | None, profile: Profile, candidate_name: str, replicas: int,
               qps: float, seed: int = 0, replications: int = 1, cache: ResultCache | None = None,
               tol: float = 0.01, executor: Executor | None = None, rule: DecisionRule | None = None
               ) -> dict[str, Any]:
    """The step-cost factor and the arrival-rate factor at which ``replicas`` of the candidate stop meeting
    (the two bisections in parallel on ``executor``; each is a pure function of its job; in this process when
    the cache holds both first probes, a warm rerun)."""
    by_names(profile, [candidate_name])  # an unknown name fails here, before any job
    text = canonical(data)
    cache_dir = None if cache is None else str(cache.directory)
    out: dict[str, Any] = {"candidate": candidate_name, "replicas": replicas, "tolerance": tol,
                           "max_factor": MAX_FACTOR}
    jobs = [Bisection(kind, text, source, profile, candidate_name, replicas, qps, seed, replications, cache_dir, tol,
                      rule) for kind in BISECTIONS]
    first = min(1.0 + FIRST_STEP, MAX_FACTOR)
    if executor is None or all(is_cached(job.job(first), cache_dir) for job in jobs):
        executor = LocalPoolExecutor(1)
    for kind, (last_met, first_missed) in zip(BISECTIONS, executor.map(bisect, jobs), strict=True):
        out[kind] = {"meets_up_to": last_met, "misses_at": first_missed}
    return out
