"""Capacity planning: per candidate, the fewest replicas meeting the SLA at a load, its goodput, its cost.

Replica search: exponential (1, 2, 4, ... replicas) until the SLA is met, then binary search
between the last miss and the first hit. It assumes more replicas never hurt (true of the
simulator's load balancing for the same arrivals; tests/planning/test_capacity.py checks the
answer against a scan of every count on a small case). With ``bound_first`` (what recommend
uses) the bound is simulated first: when it misses, so does every smaller count under that same
assumption, and the search ends after one simulation with the answer the full search gives;
when it meets, the search runs as above and reuses that simulation.

Candidates are searched in parallel, one per worker; they are submitted largest estimated cost
first (the per-iteration loop's candidates at the most GPUs: ``cost_estimate``) so the longest
searches do not start last, and the rows come back in the candidates' order whatever the
submission order (each search is a pure function of its spec). When the cache holds every search's first
simulation (a warm rerun), the searches run in this process: a pool would only read the cache, after forking.

Goodput at attainment X: the highest arrival rate at which at least X of the arrived requests
meet every SLA term. Search: from the planned load, double (or halve) until the SLA flips, then
bisect to a relative width of ``rel_tol``. Every rate is simulated with the same seed (common
random numbers), so a tighter SLA can only lower the answer.

Cost: GPUs x price per GPU-hour (``gpu_price`` USD, the user's number); per 1,000 requests at the
planned load: GPUs x price / (qps x 3600) x 1000.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from tqdm import tqdm

from tripath.core.errors import InputError
from tripath.core.metrics import TERMS
from tripath.core.metrics import sla_targets as scenario_sla_targets
from tripath.planning.cache import ResultCache
from tripath.planning.candidates import Candidate, by_names, is_lossy, tiering_idle
from tripath.planning.decision import DecisionRule, RefusedError, Verdict, decide
from tripath.planning.executor import Executor, LocalPoolExecutor
from tripath.planning.scenario_dict import canonical, with_fields, with_rate, with_requests
from tripath.planning.sweep import Job, NotCached, Outcome, preload_traces, run_cached
from tripath.profile.profile import Profile, profile_from_json
from tripath.simulator.loop.stepper_setup import needs_stepper
from tripath.simulator.scenario.scenario import scenario_from_dict

ATTAINMENT_LEVELS = (0.9, 0.95, 0.99)
# How much longer one simulation on the per-iteration loop takes than on the fast path at the same GPUs, roughly
# (MEASURED on data/scenarios/default.toml: speculative 1.36 s vs baseline 0.025 s at 32 GPUs, docs/planning.md).
# It only orders the submissions: a wrong value costs time, never a different number.
PER_ITERATION_COST = 50.0


@dataclass(frozen=True)
class SearchSpec:
    """One candidate's whole search (a picklable job: searches run in parallel, one per candidate)."""

    scenario_json: str
    source: str | None
    profile_json: str
    candidate: Candidate
    qps: float
    seed: int = 0
    replications: int = 1
    max_replicas: int = 256
    attainment_levels: tuple[float, ...] = ATTAINMENT_LEVELS
    rel_tol: float = 0.02
    cache_dir: str | None = None
    bound_first: bool = False  # simulate max_replicas first; a miss there ends the search (see the module doc)
    rule: DecisionRule | None = None  # decide each probe with confidence (tripath/planning/decision.py); None:
    # the P99 mean of ``replications`` runs of the scenario's requests against the target, as it is
    cached_only: bool = False  # read every probe from the cache, NotCached where it holds none (run_searches)

    def __post_init__(self) -> None:
        if not self.qps > 0:
            raise ValueError(f"qps must be > 0, got {self.qps}")
        if self.max_replicas < 1:
            raise ValueError(f"max_replicas must be >= 1, got {self.max_replicas}")
        for level in self.attainment_levels:
            if not 0.0 < level <= 1.0:
                raise ValueError(f"attainment levels must be in (0, 1], got {level}")


def sized_job(spec: SearchSpec, replicas: int, rate: float, requests: int | None = None) -> Job:
    """The simulation of ``replicas`` replicas of the spec's candidate at ``rate`` req/s (its cluster sized to them),
    of ``requests`` requests per replication when given (a decision stage: the rule's replications too)."""
    data = spec.candidate.apply(json.loads(spec.scenario_json))
    data = with_fields(with_rate(data, rate), {"cluster.gpus": replicas * _replica_gpus(spec)})
    replications = spec.replications
    if requests is not None:
        data = with_requests(data, requests)
        replications = spec.rule.replications if spec.rule is not None else replications
    scenario_json = canonical(data)
    return Job(scenario_json, spec.source, spec.profile_json, spec.seed, replications)


def asked_requests(spec: SearchSpec) -> int:
    """The requests per replication the scenario asks for (its request count, or its duration at its rate)."""
    workload = json.loads(spec.scenario_json).get("workload", {})
    if workload.get("requests") is not None:
        return int(workload["requests"])
    duration = workload.get("duration_s")
    return 0 if duration is None else int(math.ceil(float(duration) * spec.qps))


def probe(spec: SearchSpec, replicas: int, rate: float) -> tuple[Outcome, Verdict | None]:
    """One sized simulation: through the decision rule's stages when the spec has a rule (its verdict beside the
    deciding stage's outcome), else the scenario as it is (no verdict)."""
    if spec.rule is None:
        return run_cached(sized_job(spec, replicas, rate), spec.cache_dir, spec.cached_only), None
    verdict, data = decide(lambda n: run_cached(sized_job(spec, replicas, rate, n), spec.cache_dir,
                                                spec.cached_only).data,
                           spec.rule, asked_requests(spec), sla_targets(spec))
    return Outcome(data), verdict


def sla_targets(spec: SearchSpec) -> dict[str, float | None]:
    """The scenario's P99 targets in ms per term (None: not given)."""
    return scenario_sla_targets(json.loads(spec.scenario_json).get("sla"))


def search_replicas(meets: Any, max_replicas: int) -> tuple[int | None, list[tuple[int, bool]]]:
    """Smallest n in [1, max_replicas] with meets(n), assuming meets is monotone; (None, trace) if none.

    Exponential then binary search: O(log n) evaluations. ``trace`` lists (n, met) in order."""
    trace: list[tuple[int, bool]] = []

    def check(n: int) -> bool:
        ok = bool(meets(n))
        trace.append((n, ok))
        return ok

    miss, n = 0, 1
    while not check(n):
        miss = n
        if n >= max_replicas:
            return None, trace
        n = min(2 * n, max_replicas)
    hit = n
    while hit - miss > 1:
        mid = (miss + hit) // 2
        if check(mid):
            hit = mid
        else:
            miss = mid
    return hit, trace


def search_rate(meets: Any, start: float, rel_tol: float = 0.02, max_steps: int = 40) -> float | None:
    """Highest rate with meets(rate) (monotone: true below, false above), to relative width rel_tol.

    None when even start / 2**20 fails. A rate that meets at start * 2**20 is returned as that bound."""
    lo: float | None = None
    hi: float | None = None
    rate = start
    if meets(rate):
        lo = rate
        for _ in range(20):
            rate *= 2.0
            if not meets(rate):
                hi = rate
                break
            lo = rate
        if hi is None:
            return lo
    else:
        hi = rate
        for _ in range(20):
            rate /= 2.0
            if meets(rate):
                lo = rate
                break
            hi = rate
        if lo is None:
            return None
    for _ in range(max_steps):
        if (hi - lo) <= rel_tol * hi:
            break
        mid = 0.5 * (lo + hi)
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return lo


def plan_candidate(spec: SearchSpec) -> dict[str, Any]:
    """The replica search and goodput curve of one candidate (module level: runs in a worker)."""
    candidate = spec.candidate
    profile = profile_from_json(spec.profile_json)
    base = json.loads(spec.scenario_json)
    reason = candidate.profile_support(profile, base)
    out: dict[str, Any] = {"candidate": candidate.to_dict(), "not_applicable": reason,
                           "gpus_per_replica": candidate.gpus_per_replica(profile)}
    if reason is not None:
        return out
    outcomes: dict[int, Outcome] = {}
    verdicts: dict[int, Verdict | None] = {}
    refused: dict[int, str] = {}

    def simulated(n: int) -> Outcome | None:
        if n not in outcomes and n not in refused:  # the bound probe's simulation is reused by the search
            try:
                outcomes[n], verdicts[n] = probe(spec, n, spec.qps)
            except RefusedError as err:
                refused[n] = str(err)
        return outcomes.get(n)

    def meets(n: int) -> bool:
        outcome = simulated(n)
        if outcome is None or outcome.error is not None:
            raise _Refused(refused.get(n) or (outcome.error if outcome is not None else ""))
        verdict = verdicts[n]
        return outcome.meets_sla if verdict is None else verdict.meets

    bound_ok = False
    if spec.bound_first and spec.max_replicas >= 1:
        bound = simulated(spec.max_replicas)
        bound_ok = bound is not None and bound.error is None
    try:
        if bound_ok and not meets(spec.max_replicas):
            replicas, trace = None, [(spec.max_replicas, False)]
        else:  # a refusal at the bound is reported only where the full search reaches the bound
            replicas, trace = search_replicas(meets, spec.max_replicas)
            if bound_ok:
                trace = [(spec.max_replicas, True), *trace]
    except _Refused as err:
        out["not_applicable"] = f"the simulator refused it: {err}"
        return out
    out["search"] = [{"replicas": n, "meets_sla": ok, "peak_kv_bytes": outcomes[n].data.get("peak_kv_bytes"),
                      "kv_capacity_bytes": outcomes[n].data.get("kv_capacity_bytes"),
                      **({} if verdicts.get(n) is None else {"verdict": verdicts[n].to_dict()})} for n, ok in trace]
    out["replicas"] = replicas
    shown = spec.max_replicas if replicas is None else replicas
    out["outcome"] = outcomes[shown].to_dict()
    if verdicts.get(shown) is not None:
        out["verdict"] = verdicts[shown].to_dict()
    if replicas is None:
        return out
    out["gpus"] = replicas * out["gpus_per_replica"]
    if replicas > 1 and verdicts.get(replicas - 1) is not None:  # the count below: why it is not enough
        out["verdict_below"] = verdicts[replicas - 1].to_dict()
    out["goodput_rps"] = goodput_curve(spec, replicas)
    return out


def goodput_curve(spec: SearchSpec, replicas: int) -> dict[str, float | None]:
    """Goodput (req/s) at each attainment level of ``spec``, for ``replicas`` replicas of its candidate."""
    curve: dict[str, float | None] = {}
    for level in spec.attainment_levels:
        def meets_rate(rate: float, level: float = level) -> bool:
            outcome = run_cached(sized_job(spec, replicas, rate), spec.cache_dir, spec.cached_only)
            attained = None if outcome.error else outcome.data["attainment"]["all"]
            return attained is not None and attained >= level
        curve[str(level)] = search_rate(meets_rate, spec.qps, spec.rel_tol)
    return curve


class _Refused(Exception):
    pass


def cost_estimate(spec: SearchSpec) -> float:
    """A rough relative cost of one simulation at the spec's bound: GPUs there, times PER_ITERATION_COST when the
    candidate runs on the per-iteration loop (0 for a scenario the simulator refuses: it ends at once)."""
    data = spec.candidate.apply(json.loads(spec.scenario_json))
    try:
        per_iteration = needs_stepper(scenario_from_dict(data, spec.source))
    except (InputError, ValueError):
        return 0.0
    return spec.max_replicas * _replica_gpus(spec) * (PER_ITERATION_COST if per_iteration else 1.0)


def _replica_gpus(spec: SearchSpec) -> int:
    """GPUs of one replica of the spec's candidate (Candidate.gpus_per_replica, from the profile's JSON key): tp x
    attention data-parallel ranks x the sequence-parallel degree."""
    key = json.loads(spec.profile_json)["key"]
    degree = int(spec.candidate.strategy.get("sequence_parallel", {}).get("degree", 1))
    return int(key["tp"]) * int(key.get("attention_dp", 1)) * degree


def run_searches(specs: Sequence[SearchSpec], data: dict[str, Any], source: str | None,
                 executor: Executor | None = None, longest_first: bool = True, desc: str = "sizing"
                 ) -> list[dict[str, Any]]:
    """``plan_candidate`` of every spec on the executor (each a pure function of its spec), rows in the specs'
    order; submitted by descending ``cost_estimate`` when ``longest_first``. With a cache, every search is first
    walked in this process from the cache alone (``from_cache``): the ones it holds whole are done there, and only
    those that need a new simulation go to the executor (a warm rerun, or one whose changed SLA re-judges most
    probes from the cache, forks no pool for searches it could only read)."""
    executor = executor or LocalPoolExecutor(1)
    rows: list[dict[str, Any]] = [{} for _ in specs]
    with tqdm(total=len(specs), desc=desc, unit="search", file=sys.stderr, disable=None, leave=False) as bar:
        pending = []
        for i, spec in enumerate(specs):
            row = from_cache(spec)
            if row is None:
                pending.append(i)
            else:
                rows[i] = row
                bar.update(1)
        if pending:
            preload_traces(data, source)
        if longest_first:
            costs = {i: cost_estimate(specs[i]) for i in pending}
            pending.sort(key=lambda i: -costs[i])  # stable: equal estimates keep the candidates' order
        done = executor.map(plan_candidate, [specs[i] for i in pending], progress=bar)
    for i, row in zip(pending, done, strict=True):
        rows[i] = row
    return rows


def from_cache(spec: SearchSpec) -> dict[str, Any] | None:
    """The spec's search (``plan_candidate``) when the cache holds every simulation it needs, else None (nothing
    is simulated: a miss ends the walk). Always None without a cache."""
    if spec.cache_dir is None:
        return None
    try:
        return plan_candidate(dataclasses.replace(spec, cached_only=True))
    except NotCached:
        return None


def strict_from_dict(cls: Any, data: dict[str, Any], what: str) -> Any:
    """A typed row dataclass from its ``to_dict`` (every field by name), refusing a missing or unknown key by name:
    the one codec of PlanRow and recommend's RowSummary."""
    names = {f.name for f in fields(cls)}
    missing, unknown = sorted(names - set(data)), sorted(set(data) - names)
    if missing or unknown:
        raise ValueError(f"not {what}: missing {missing}, unknown {unknown}")
    return cls(**data)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


@dataclass(frozen=True)
class PlanRow:
    """One candidate of a capacity plan as the CLI and the app report it, typed once over the search's row dict
    (``Plan.rows``, ``plan_candidate``): its size, the P99s at that size (or at the largest size searched when none
    meets), cost, goodput and why a value is missing. ``to_dict``/``from_dict`` are its codec; ``status`` and
    ``line`` its words, the same in both."""

    candidate: str
    replicas: int | None  # the fewest meeting the SLA; None when none up to the bound does
    gpus: int | None
    gpus_per_replica: int | None
    searched_replicas: int | None  # where ``p99_ms`` was taken
    p99_ms: dict[str, float | None]  # per SLA term: the mean over replications
    sla_margin: float | None
    rejected_share: float | None
    cost_usd_per_hour: float | None
    cost_usd_per_1k_requests: float | None
    goodput_rps: dict[str, float | None]
    not_applicable: str | None
    remark: str | None

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> PlanRow:
        outcome = row.get("outcome") or {}
        p99 = outcome.get("p99_ms") or {}
        return cls(candidate=row["candidate"]["name"], replicas=row.get("replicas"), gpus=row.get("gpus"),
                   gpus_per_replica=row.get("gpus_per_replica"), searched_replicas=outcome.get("replicas"),
                   p99_ms={t: (p99.get(t) or {}).get("mean") for t in TERMS}, sla_margin=outcome.get("sla_margin"),
                   rejected_share=outcome.get("rejected_share"), cost_usd_per_hour=row.get("cost_usd_per_hour"),
                   cost_usd_per_1k_requests=row.get("cost_usd_per_1k_requests"),
                   goodput_rps=dict(row.get("goodput_rps") or {}), not_applicable=row.get("not_applicable"),
                   remark=row.get("remark"))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanRow:
        """Back from ``to_dict``; a missing or unknown key is refused by name."""
        return strict_from_dict(cls, data, "a plan row")

    @property
    def ran(self) -> bool:
        return self.not_applicable is None and self.searched_replicas is not None

    def status(self) -> str:
        """Why the row has no size, in words ("" when it has one)."""
        if self.not_applicable:
            return f"not applicable: {self.not_applicable}"
        if self.replicas is None:
            return (f"no replica count up to {self.searched_replicas} meets the SLA (P99 there "
                    f"{' / '.join(_ms(self.p99_ms[t]) for t in TERMS)})")
        return ""

    def line(self) -> str:
        """The row in one line: its status, or its size, cost, P99s at that size and goodput."""
        if self.status():
            return f"{self.candidate:<34} {self.status()}"
        goodput = ", ".join(f">={float(k):.0%}: {'-' if v is None else f'{v:.3g}'}"
                            for k, v in self.goodput_rps.items())
        cost = ("" if self.cost_usd_per_hour is None else
                f" ${self.cost_usd_per_hour:,.2f}/h, ${self.cost_usd_per_1k_requests or 0.0:,.3f}/1K req")
        return (f"{self.candidate:<34} {self.replicas} replica(s) = {self.gpus} GPU(s){cost}; "
                f"P99 {' / '.join(_ms(self.p99_ms[t]) for t in TERMS)}; goodput req/s {goodput}")


@dataclass(frozen=True)
class Plan:
    """Per candidate: replicas, GPUs, the outcome at that size, goodput curve, cost; and the cheapest."""

    scenario: str
    profile_key: str
    profile_source: str
    qps: float
    sla_ms: dict[str, float | None]
    gpu_price: float | None
    rows: tuple[dict[str, Any], ...]
    tp: int = 1
    scenario_gpus: int = 1
    ranks: int = 1  # the profile's attention data-parallel ranks per replica (key.attention_dp)

    @property
    def sizing(self) -> str:
        """How the GPUs are counted: the search sizes every candidate, whatever the scenario's cluster says."""
        dp = f" x {self.ranks} attention data-parallel ranks" if self.ranks > 1 else ""
        return (f"GPUs per candidate = replicas x one replica's GPUs (the profile's TP{self.tp}{dp}, x the SP degree "
                f"for sequence-parallel candidates); the scenario's cluster.gpus ({self.scenario_gpus}) is not used")

    def ranked(self) -> list[dict[str, Any]]:
        """The rows that meet the SLA at some size, best first: fewest GPUs, then lossless before lossy
        (candidates.LOSSY_PATHS), then the larger SLA margin; ties keep the candidates' order."""
        ok = [r for r in self.rows if r.get("gpus") is not None]
        return sorted(ok, key=lambda r: (r["gpus"], is_lossy(r["candidate"]["paths"]),
                                         -(r["outcome"].get("sla_margin") or 0.0)))

    @property
    def recommended(self) -> dict[str, Any] | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def summaries(self) -> list[PlanRow]:
        """Every row typed (``PlanRow``), in the candidates' order."""
        return [PlanRow.of_row(r) for r in self.rows]

    def to_dict(self) -> dict[str, Any]:
        best = self.recommended
        return {"scenario": self.scenario, "profile": {"key": self.profile_key, "source": self.profile_source},
                "numbers_from": f"simulated on a '{self.profile_source}' profile ({self.profile_key})",
                "qps": self.qps, "sla_ms": self.sla_ms, "gpu_price_usd_per_gpu_hour": self.gpu_price,
                "sizing": self.sizing,
                "candidates": list(self.rows), "recommended": None if best is None else best["candidate"]["name"]}


def plan(data: dict[str, Any], source: str | None, profile: Profile, qps: float,
         sla_ms: dict[str, float | None] | None = None, gpu_price: float | None = None,
         candidate_names: Sequence[str] | None = None, seed: int = 0, replications: int = 1,
         max_replicas: int = 256, executor: Executor | None = None, cache: ResultCache | None = None,
         attainment_levels: tuple[float, ...] = ATTAINMENT_LEVELS, bound_first: bool = False,
         longest_first: bool = True, rule: DecisionRule | None = None) -> Plan:
    """Capacity plan of the scenario (a TOML dict) at ``qps``; ``sla_ms`` overrides the scenario's SLA terms.

    ``bound_first``: each search simulates ``max_replicas`` first (SearchSpec). ``longest_first``: submit the
    searches by descending ``cost_estimate`` (else in the candidates' order); the rows are the same either way."""
    changes = {f"sla.{term}_p99_ms": value for term, value in (sla_ms or {}).items() if value is not None}
    data = with_fields(data, changes)
    sla = scenario_sla_targets(data.get("sla"))
    if all(v is None for v in sla.values()):
        raise ValueError("no SLA term: give the scenario an [sla] table or --sla-ttft-ms/--sla-tpot-ms/--sla-e2e-ms")
    chosen = by_names(profile, list(candidate_names) if candidate_names else None)
    cache_dir = None if cache is None else str(cache.directory)
    text = canonical(data)
    profile_json = profile.to_json()
    specs = [SearchSpec(text, source, profile_json, c, qps, seed, replications, max_replicas,
                        attainment_levels, cache_dir=cache_dir, bound_first=bound_first, rule=rule) for c in chosen]
    rows = run_searches(specs, data, source, executor, longest_first)
    batch = data.get("batching", {}).get("max_batch_size")
    for candidate, row in zip(chosen, rows, strict=True):
        remark = tiering_idle(candidate, row.get("outcome"), batch)
        if remark is not None:
            row["remark"] = remark
        if row.get("gpus") is not None and gpu_price is not None:
            row["cost_usd_per_hour"] = row["gpus"] * gpu_price
            row["cost_usd_per_1k_requests"] = row["gpus"] * gpu_price / (qps * 3600.0) * 1000.0
    return Plan(data.get("name", "scenario"), profile.key_str(), profile.source, qps, sla, gpu_price, tuple(rows),
                int(profile.key.tp), int(data.get("cluster", {}).get("gpus", 1)), int(profile.key.attention_dp))
