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
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tripath.core.errors import InputError
from tripath.planning.cache import ResultCache
from tripath.planning.candidates import BASELINE, Candidate, by_names, candidates, idle_paths, is_lossy
from tripath.planning.capacity import SearchSpec, first_job, probe, run_searches
from tripath.planning.decision import DecisionRule, RefusedError
from tripath.planning.executor import Executor, LocalPoolExecutor
from tripath.planning.prices import GpuPrices, cost_per_million_output_tokens
from tripath.planning.scenario_dict import refuse_closed_loop, with_fields
from tripath.planning.sweep import TERMS, Job, is_cached
from tripath.profile.profile import Profile, resolve_profile

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


HEADROOM_WARNING = 0.10  # a recommendation whose load or cost headroom is under this is said to be thin


@dataclass(frozen=True)
class Layout:
    """One deployment shape a recommendation may choose: a shipped profile (GPU type, TP degree) and its price."""

    name: str
    profile: Profile
    usd_per_gpu_hour: float | None
    price_source: str | None

    @property
    def gpu(self) -> str:
        return self.profile.key.hardware

    @property
    def tp(self) -> int:
        return int(self.profile.key.tp)

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.name, "gpu": self.gpu, "tp": self.tp, "profile_key": self.profile.key_str(),
                "usd_per_gpu_hour": self.usd_per_gpu_hour, "price_source": self.price_source}


def row_terms(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per given SLA term of a row: the verdict's P99 and replication interval when it was decided by the rule,
    else the outcome's (sla_terms)."""
    verdict = row.get("verdict")
    outcome = row.get("outcome")
    if verdict is None:
        return {} if outcome is None or outcome.get("error") else sla_terms(outcome)
    out = {}
    for term, t in verdict["terms"].items():
        margin = t["margin"]
        out[term] = {"p99_ms": t["p99_ms"], "ci_low_ms": t["ci_low_ms"], "ci_high_ms": t["ci_high_ms"],
                     "target_ms": t["target_ms"], "margin": margin, "verdict": t["verdict"],
                     "over_by": None if margin is None or margin >= 0 else -margin}
    return out


def row_margin(row: dict[str, Any]) -> float | None:
    """The row's SLA margin: its binding term's (target - P99) / target, from its verdict when it was decided by
    the rule (the verdict judged the scenario's SLA; a stage simulated for any SLA carries none), else the outcome's."""
    if row.get("verdict") is None:
        return (row.get("outcome") or {}).get("sla_margin")
    terms = row_terms(row)
    margins = [t["margin"] for t in terms.values() if t["margin"] is not None]
    return min(margins) if margins and len(margins) == len(terms) else None


def rank_key(row: dict[str, Any]) -> tuple[float, bool, int, float]:
    """Cheapest first ($/h, or GPUs without a price), then lossless before lossy, then the simpler deployment
    (fewer paths): two candidates on the same bill are a tie whatever their margins, and a tie goes to the one with
    less to run; last, the larger SLA margin."""
    cost = row.get("cost_usd_per_hour")
    margin = row_margin(row) or 0.0
    paths = row["candidate"]["paths"]
    return (float(row["gpus"]) if cost is None else float(cost), is_lossy(paths), len(paths), -margin)


@dataclass(frozen=True)
class Recommendation:
    """Every (layout, candidate) row searched, the recommended row, the runner-up, the closest when none meets,
    the winner's headroom, and where the numbers come from."""

    scenario: str
    qps: float
    sla_ms: dict[str, float | None]
    layouts: tuple[Layout, ...]
    rows: tuple[dict[str, Any], ...]
    recommended: str | None
    runner_up: str | None
    closest: str | None
    robustness: dict[str, Any] | None
    sources: dict[str, list[str]]
    rule: DecisionRule | None
    allow_lossy: bool = False
    excluded_lossy: tuple[str, ...] = ()

    def row(self, row_id: str | None) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["id"] == row_id), None)

    def _summary(self, row_id: str | None) -> dict[str, Any] | None:
        row = self.row(row_id)
        if row is None:
            return None
        outcome = row.get("outcome") or {}
        terms = row_terms(row)
        return {"id": row["id"], "candidate": row["candidate"]["name"], "paths": row["candidate"].get("paths"),
                "layout": row["layout"], "replicas": row.get("replicas"), "gpus": row.get("gpus"),
                "gpus_per_replica": row.get("gpus_per_replica"),
                "searched_replicas": outcome.get("replicas"),
                "cost_usd_per_hour": row.get("cost_usd_per_hour"),
                "usd_per_million_output_tokens": row.get("usd_per_million_output_tokens"),
                "terms": terms, "binding_term": binding_term(terms), "rejected_share": outcome.get("rejected_share"),
                "verdict": row.get("verdict"), "verdict_below": row.get("verdict_below"),
                "quality_loss": row.get("quality_loss"), "idle": row.get("idle"), "pruned": row.get("pruned"),
                "remark": row.get("remark"), "not_applicable": row.get("not_applicable")}

    def headroom(self) -> dict[str, Any] | None:
        """The recommended row's smallest factor of load or step cost still met, and whether it is under 10 %."""
        if self.robustness is None:
            return None
        factors = {k: self.robustness[k]["meets_up_to"] for k in BISECTIONS}
        kind = min(factors, key=lambda k: factors[k])
        room = factors[kind] - 1.0
        return {"least": kind, "headroom": room, "thin": room < HEADROOM_WARNING}

    def to_dict(self) -> dict[str, Any]:
        chosen = (self.recommended, self.runner_up, self.closest)
        first = self.layouts[0]
        return {"scenario": self.scenario, "qps": self.qps, "sla_ms": self.sla_ms,
                "layouts": [layout.to_dict() for layout in self.layouts],
                "gpu_price_usd_per_gpu_hour": {layout.gpu: layout.usd_per_gpu_hour for layout in self.layouts},
                "profile": {"key": first.profile.key_str(), "source": first.profile.source,
                            "section_sources": self.sources},
                "numbers_from": "simulated on " + ", ".join(
                    f"'{layout.profile.source}' profile {layout.name}" for layout in self.layouts),
                "decision_rule": None if self.rule is None else self.rule.to_dict(),
                "allow_lossy": self.allow_lossy, "excluded_lossy": list(self.excluded_lossy),
                "meets_sla": self.recommended is not None,
                "recommended": self._summary(self.recommended), "runner_up": self._summary(self.runner_up),
                "closest": self._summary(self.closest), "robustness": self.robustness, "headroom": self.headroom(),
                "not_applicable": {r["id"]: r["not_applicable"] for r in self.rows if r.get("not_applicable")},
                "others": [self._summary(r["id"]) for r in self.rows if not r.get("not_applicable")
                           and r["id"] not in chosen],
                "go_further": GO_FURTHER}


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
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
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


def _layouts(names: Sequence[str], prices: GpuPrices | None) -> tuple[Layout, ...]:
    out = []
    for name in names:
        profile = resolve_profile(name) if not isinstance(name, Profile) else name
        label = name if isinstance(name, str) else profile.key_str()
        gpu = profile.key.hardware
        price = None if prices is None else prices.price(gpu)
        out.append(Layout(label, profile, price, None if prices is None else prices.source(gpu)))
    return tuple(out)


FLOOR_DRAWS = 20_000  # prompts drawn for the workload's P99 prompt length (the floor's)
FLOOR_CLEAR = 1.1  # a floor this far over the TTFT target rules a layout out; closer ones are simulated


def p99_prompt(data: dict[str, Any], source: str | None) -> int | None:
    """The workload's P99 prompt length (tokens, an observed draw) over FLOOR_DRAWS prompts drawn as the simulator
    draws them (seed 0); None when the scenario cannot be built."""
    from tripath.simulator.scenario.scenario import scenario_from_dict
    from tripath.simulator.scenario.workload import generate_arrays

    try:
        scenario = scenario_from_dict(with_fields(data, {"workload.requests": FLOOR_DRAWS,
                                                         "workload.duration_s": None}), source)
        rate = scenario.workload.arrival.rate_per_s or 1.0
        _, prompts, _, _, _ = generate_arrays(scenario.workload, np.random.default_rng(0), rate)
    except (InputError, ValueError):
        return None
    return int(np.percentile(prompts, 99.0, method="lower"))


def ttft_floor_ms(data: dict[str, Any], source: str | None, profile: Profile, candidate: Candidate, length: int
                  ) -> float | None:
    """A lower bound on the TTFT P99 in ms: the unloaded prefill of a ``length``-token prompt (the workload's P99
    prompt) on this layout with this candidate's cost transform (SP splits it; compression as its profile says),
    chunked as the scenario's policy chunks. Every request's TTFT is at least its own prefill, and prefill time grows
    with the prompt, so the TTFT P99 is at least this whatever the replica count; queueing, decodes sharing the
    iteration, SP merges, a draft's own prefill and paging only add. None when the scenario cannot be built."""
    from tripath.simulator.paths.step import Transforms
    from tripath.simulator.run_costs import RunCosts
    from tripath.simulator.scenario.scenario import scenario_from_dict

    try:
        scenario = scenario_from_dict(candidate.apply(data), source)
        costs = RunCosts.for_scenario(scenario, profile)
    except (InputError, ValueError):
        return None
    cost = Transforms(costs).cost if costs.sequence_parallel is not None or costs.compression is not None \
        else costs.cost.fresh()
    if scenario.batching.policy != "chunked":
        return cost.mixed_s([length], 0, 0) * 1000.0
    chunk, done, seconds = int(scenario.batching.max_batched_tokens), 0, 0.0
    while done < length:
        tokens = min(chunk, length - done)
        seconds += cost.chunked_s([(tokens, done)], 0, 0)
        done += tokens
    return seconds * 1000.0


KV_NEVER_FULL = 0.9  # a peak live KV under this share of the device's KV budget never made a request wait for memory


def kv_room(base: dict[str, Any]) -> str | None:
    """Why tiering cannot pay on a layout, when it cannot: the baseline at the fewest replicas it simulated (the
    most load on each) never filled the device's KV budget, so its misses there were compute, which fewer replicas
    only worsen, and tiering would page nothing at any count searched (a candidate with tiering is then the one
    without it, by another name). None when the KV came near the budget, or when nothing was simulated."""
    probes = [p for p in base.get("search") or [] if p.get("peak_kv_bytes") is not None and p.get("kv_capacity_bytes")]
    if not probes:
        return None
    fewest = min(probes, key=lambda p: p["replicas"])
    peak, budget = fewest["peak_kv_bytes"], fewest["kv_capacity_bytes"]
    if peak >= KV_NEVER_FULL * budget:
        return None
    return (f"tiering would never engage: the baseline's peak live KV at {fewest['replicas']} replica(s), "
            f"{peak / 2**30:.1f} GiB, stayed under {KV_NEVER_FULL:.0%} of the device's KV budget "
            f"({budget / 2**30:.1f} GiB), and fewer replicas are compute-bound")


def _priced(row: dict[str, Any], layout: Layout, qps: float) -> None:
    """The row's layout, id, bill and, when it meets, its cost per hour and per million output tokens."""
    row["layout"] = layout.to_dict()
    row["id"] = f"{row['candidate']['name']} on {layout.name}"
    _quality(row, layout.profile)
    if row.get("gpus") is None or layout.usd_per_gpu_hour is None:
        return
    per_hour = row["gpus"] * layout.usd_per_gpu_hour
    row["cost_usd_per_hour"] = per_hour
    row["cost_usd_per_1k_requests"] = per_hour / (qps * 3600.0) * 1000.0
    tokens = (row.get("outcome") or {}).get("output_tokens_per_s")
    row["usd_per_million_output_tokens"] = None if not tokens else cost_per_million_output_tokens(per_hour, tokens)


def _quality(row: dict[str, Any], profile: Profile) -> None:
    """A lossy row's published quality cost beside it (the profile's compression quality_loss)."""
    mode = row["candidate"]["strategy"].get("compression", {}).get("mode")
    section = profile.compression.get(mode) if mode else None
    loss = None if section is None else getattr(section, "quality_loss", None)
    if loss is not None:
        row["quality_loss"] = {"value": loss.value, "unit": loss.unit, "source": loss.source, "note": loss.note}


def _searched(specs: list[SearchSpec], layouts: list[Layout], data: dict[str, Any], source: str | None,
              executor: Executor | None, qps: float, desc: str) -> list[dict[str, Any]]:
    rows = run_searches(specs, data, source, executor, desc=desc)
    batch = data.get("batching", {}).get("max_batch_size")
    for spec, layout, row in zip(specs, layouts, rows, strict=True):
        _priced(row, layout, qps)
        idle = idle_paths(spec.candidate, row.get("outcome"), batch)
        if idle is not None:
            row["idle"] = idle
    return rows


def recommend(data: dict[str, Any], source: str | None, layouts: Sequence[str | Profile], qps: float,
              prices: GpuPrices | None = None, seed: int = 0, rule: DecisionRule | None = None,
              max_replicas: int = 16, executor: Executor | None = None, cache: ResultCache | None = None,
              tol: float = 0.02, with_robustness: bool = True, allow_lossy: bool = False,
              replications: int = 2, candidate_names: Sequence[str] | None = None) -> Recommendation:
    """Which layout (GPU type, TP), which path, how many replicas: the cheapest row meeting the SLA.

    ``layouts``: shipped profile names (or profiles) to choose among (catalog.layouts gives a model's family).
    Search: first the baseline on every layout (up to ``max_replicas``), then every other candidate only up to the
    replicas that cost less than the cheapest baseline found (one as dear could never be recommended: at the same
    bill the baseline wins the tie; it is reported as pruned). Lossy candidates (compression) only with
    ``allow_lossy``. ``rule`` decides each probe with confidence (tripath/planning/decision.py); None:
    ``replications`` runs of the scenario's requests, P99 mean. ``candidate_names``: search only these (the
    baseline always: it sets the cost bound)."""
    sla = {term: data.get("sla", {}).get(f"{term}_p99_ms") for term in ("ttft", "tpot", "e2e")}
    if all(v is None for v in sla.values()):
        raise ValueError("no SLA term: give the scenario an [sla] table")
    chosen = _layouts(layouts, prices)
    cache_dir = None if cache is None else str(cache.directory)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    reps = rule.replications if rule is not None else replications

    def spec(layout: Layout, candidate: Candidate, cap: int) -> SearchSpec:
        return SearchSpec(text, source, layout.profile.to_json(), candidate, qps, seed, reps, cap, (),
                          cache_dir=cache_dir, bound_first=True, rule=rule)

    target = sla.get("ttft")
    length = None if target is None else p99_prompt(data, source)

    def floored(layout: Layout, candidate: Candidate) -> dict[str, Any] | None:
        """A row for a candidate the TTFT floor rules out on this layout (None: search it)."""
        if candidate.profile_support(layout.profile, data) is not None or length is None or target is None:
            return None
        floor = ttft_floor_ms(data, source, layout.profile, candidate, length)
        if floor is None or floor <= FLOOR_CLEAR * target:
            return None
        row = {"candidate": candidate.to_dict(), "not_applicable": None,
               "gpus_per_replica": candidate.gpus_per_replica(layout.profile), "floor_ms": floor,
               "pruned": f"cannot meet the TTFT target at any replica count: the workload's P99 prompt "
                         f"({length:,} tokens) takes {floor:,.0f} ms to prefill alone on this layout"}
        _priced(row, layout, qps)
        return row

    base_layouts, base_floor = [], {}
    for layout in chosen:
        ruled = floored(layout, BASELINE)
        if ruled is None:
            base_layouts.append(layout)
        else:
            base_floor[layout.name] = ruled
    searched = _searched([spec(layout, BASELINE, max_replicas) for layout in base_layouts], base_layouts, data,
                         source, executor, qps, f"baselines on {len(base_layouts)} layout(s)")
    by_layout = {layout.name: row for layout, row in zip(base_layouts, searched, strict=True)}
    base_rows = [by_layout.get(layout.name) or base_floor[layout.name] for layout in chosen]
    met = [r for r in base_rows if r.get("gpus") is not None and not r.get("idle")]
    best = min((rank_key(r)[0] for r in met), default=math.inf)
    excluded: list[str] = []
    specs, spec_layouts, pruned = [], [], []
    for layout, base in zip(chosen, base_rows, strict=True):
        room = kv_room(base)
        for candidate in candidates(layout.profile):
            if candidate.name == BASELINE.name or (candidate_names and candidate.name not in candidate_names):
                continue
            if is_lossy(candidate.paths) and not allow_lossy:
                excluded.append(candidate.name)
                continue
            reason = candidate.profile_support(layout.profile, data)
            if reason is not None:  # reported as not applicable, never as pruned
                row = {"candidate": candidate.to_dict(), "not_applicable": reason,
                       "gpus_per_replica": candidate.gpus_per_replica(layout.profile)}
                _priced(row, layout, qps)
                pruned.append(row)
                continue
            ruled = floored(layout, candidate)
            if ruled is not None:
                pruned.append(ruled)
                continue
            if "tiered" in candidate.paths and room is not None:
                row = {"candidate": candidate.to_dict(), "not_applicable": None,
                       "gpus_per_replica": candidate.gpus_per_replica(layout.profile), "pruned": room}
                _priced(row, layout, qps)
                pruned.append(row)
                continue
            per_replica = candidate.gpus_per_replica(layout.profile) * (layout.usd_per_gpu_hour or 1.0)
            # strictly cheaper than the cheapest baseline: at the same bill the baseline, the simpler, wins the tie
            cap = max_replicas if math.isinf(best) else min(max_replicas, math.ceil(best / per_replica - 1e-9) - 1)
            if cap < 1:
                row = {"candidate": candidate.to_dict(), "not_applicable": None,
                       "gpus_per_replica": candidate.gpus_per_replica(layout.profile),
                       "pruned": f"one replica costs as much as the cheapest baseline found (${best:,.2f}/h) or more"}
                _priced(row, layout, qps)
                pruned.append(row)
                continue
            specs.append(spec(layout, candidate, cap))
            spec_layouts.append(layout)
    rows = base_rows + _searched(specs, spec_layouts, data, source, executor, qps,
                                 "the other candidates, up to the cheapest baseline's cost") + pruned
    for row in rows:
        if row.get("replicas") is None and not row.get("pruned") and not row.get("not_applicable") \
                and row["candidate"]["name"] != BASELINE.name and not math.isinf(best):
            row["pruned"] = (f"not met at {row['outcome']['replicas']} replica(s), the most that cost less than "
                             f"the cheapest baseline found")
    ranked = sorted((r for r in rows if r.get("gpus") is not None and not r.get("idle")), key=rank_key)
    winner = ranked[0]["id"] if ranked else None
    runner = ranked[1]["id"] if len(ranked) > 1 else None
    closest = None
    if winner is None:
        ran = [r for r in rows if r.get("outcome") and not r["outcome"].get("error") and row_margin(r) is not None]
        closest = max(ran, key=lambda r: row_margin(r) or 0.0)["id"] if ran else None
    probe_result = None
    if winner is not None and with_robustness:
        row = ranked[0]
        layout = next(la for la in chosen if la.name == row["layout"]["profile"])
        probe_result = robustness(data, source, layout.profile, row["candidate"]["name"], int(row["replicas"]), qps,
                                  seed, reps, cache, tol, executor, rule)
    where = next((la for la in chosen if ranked and la.name == ranked[0]["layout"]["profile"]), chosen[0])
    return Recommendation(data.get("name", "scenario"), qps, sla, chosen, tuple(rows), winner, runner, closest,
                          probe_result, section_sources(where.profile), rule, allow_lossy,
                          tuple(dict.fromkeys(excluded)))


def scenario_qps(data: dict[str, Any]) -> float | None:
    """The scenario's own request rate (``workload.arrival.rate_per_s``), None when it states a load fraction."""
    refuse_closed_loop(data)
    rate = (data.get("workload") or {}).get("arrival", {}).get("rate_per_s")
    return None if rate is None else float(rate)
