"""A sweep: simulation jobs, their compact outcomes, run on an executor through the cache.

A ``Job`` is everything one simulation depends on, as plain text and numbers (picklable for a
process pool or Ray, hashable for the cache). ``run_job`` simulates it and keeps what planning
reads: P50/P99 per SLA term with 95% confidence intervals, SLA attainment, rejections, GPU-hours
per 1,000 requests, peak KV memory, paging stall per request and, optionally, P99 per window of
arrival time (transients).

Meeting the SLA (``Outcome.meets_sla``): every given term's P99 (mean over replications) is at
or under its target, and at most 1% of arrived requests were rejected (a rejected request has
no latency to put in a percentile, but it did not meet the SLA either).
"""

from __future__ import annotations

import base64
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from tripath.core import metrics
from tripath.core.errors import InputError
from tripath.core.metrics import TERMS
from tripath.planning.cache import ResultCache, cache_key
from tripath.planning.decision import MAX_REJECTED, steady_p99s
from tripath.planning.executor import Executor, LocalPoolExecutor
from tripath.planning.scenario_dict import canonical
from tripath.profile.profile import Profile, profile_from_json
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.traces import load_trace
from tripath.simulator.summary import summary

# what a cache entry holds (``simulate_job``): bumped when its shape changes, so an older entry is never read
ENTRY_FORMAT = 2


@dataclass(frozen=True)
class Job:
    """One simulation: scenario (canonical JSON of the TOML dict), profile (canonical JSON), seed."""

    scenario_json: str
    source: str | None
    profile_json: str
    seed: int = 0
    replications: int = 1
    window_s: float | None = None  # P99 per window of arrival time, for transients

    def key(self) -> str:
        """The cache key of the simulation: without the scenario's SLA, which only judges its outcome
        (``judge``), unless the batching policy steers by it ("adaptive"), so an SLA change reuses every
        simulation already run."""
        scenario = json.loads(self.scenario_json)
        if scenario.get("batching", {}).get("policy") != "adaptive":
            scenario.pop("sla", None)
        return cache_key({"scenario": scenario, "profile": json.loads(self.profile_json), "seed": self.seed,
                          "replications": self.replications, "window_s": self.window_s, "entry": ENTRY_FORMAT})

    def targets_ms(self) -> dict[str, float | None]:
        """The scenario's SLA P99 targets (ms) by term, None where not given."""
        sla = json.loads(self.scenario_json).get("sla", {})
        return {term: None if sla.get(f"{term}_p99_ms") is None else float(sla[f"{term}_p99_ms"]) for term in TERMS}


def make_job(data: dict[str, Any], source: str | None, profile: Profile, seed: int = 0, replications: int = 1,
             window_s: float | None = None) -> Job:
    scenario_json = canonical(data)
    return Job(scenario_json, source, profile.to_json(), seed, replications, window_s)


@dataclass(frozen=True)
class Outcome:
    """What planning reads from one simulation (``data`` is the JSON-ready dict run_job made)."""

    data: dict[str, Any]

    @property
    def error(self) -> str | None:
        """Why the simulator refused this scenario (None when it ran)."""
        return self.data.get("error")

    def p99_ms(self, term: str) -> float | None:
        return self.data["p99_ms"][term]["mean"]

    @property
    def meets_sla(self) -> bool:
        return self.error is None and bool(self.data["meets_sla"])

    @property
    def gpus(self) -> int:
        return int(self.data["gpus"])

    def to_dict(self) -> dict[str, Any]:
        return self.data


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _windows(runs_records: list[Sequence[metrics.RequestRecord]], window_s: float) -> list[dict[str, Any]]:
    """P99 per window of arrival time (requests grouped by when they arrived), estimated over replications, and
    the window's latencies (ms), which tripath/planning/whatif.py pools over jobs for its interval."""
    end = max((r.arrival_s for records in runs_records for r in records), default=0.0)
    count = max(1, math.ceil(end / window_s)) if end > 0 else 1
    out = []
    for i in range(count):
        lo, hi = i * window_s, (i + 1) * window_s
        per_run = [[r for r in records if lo <= r.arrival_s < hi or (i == count - 1 and r.arrival_s == hi)]
                   for records in runs_records]
        row: dict[str, Any] = {"start_s": lo, "end_s": hi, "arrived": sum(len(p) for p in per_run)}
        for term in TERMS:
            values = [metrics.latencies(p, term) for p in per_run]
            row[f"{term}_p99_ms"] = metrics.percentile_estimate(values, "p99", 1000.0)
            row[f"{term}_ms"] = [float(v) * 1000.0 for v in np.concatenate(values)]  # pooled by load_step
        out.append(row)
    return out


def run_job(job: Job) -> dict[str, Any]:
    """Simulate one job and return its JSON-ready outcome, judged against its SLA (``simulate_job``, then
    ``judge``)."""
    return judge(simulate_job(job), job)


def judge(entry: dict[str, Any], job: Job) -> dict[str, Any]:
    """The outcome of a simulation (``simulate_job``'s entry, from the cache or just run) judged against the job's
    SLA: its targets, the share of requests that met each term and all of them (``attainment``, mean over
    replications, as the simulator's summary counts it: tripath/simulator/tally.py), each term's P99 margin to its
    target, and whether it meets the SLA (module docstring). An error entry is returned as it is."""
    if "error" in entry:
        return entry
    data = dict(entry["outcome"])
    targets = job.targets_ms()
    p99 = data["p99_ms"]
    margins = {term: (None if targets[term] is None or p99[term]["mean"] is None
                      else (targets[term] - p99[term]["mean"]) / targets[term]) for term in TERMS}
    given = [m for term, m in margins.items() if targets[term] is not None]
    data["sla_targets_ms"] = targets
    data["attainment"] = _attainment(entry["tails"], targets)
    data["sla_margin"] = min(given) if given and all(m is not None for m in given) else None
    data["meets_sla"] = data["rejected_share"] <= MAX_REJECTED and all(m is not None and m >= 0.0 for m in given)
    return data


def _attainment(tails: list[dict[str, Any]], targets_ms: dict[str, float | None]) -> dict[str, float | None]:
    """metrics.sla_attainment from each replication's stored latencies: the share of arrived requests whose term
    is at or under its target (seconds, as the simulator compares them), and of those meeting every given term."""
    given = [(term, ms / 1000.0) for term, ms in targets_ms.items() if ms is not None]
    shares: dict[str, list[float]] = {term: [] for term, _ in given}
    every: list[float] = []
    for tail in tails:
        arrived = int(tail["arrived"])
        values = {term: np.frombuffer(base64.b64decode(tail[term]), dtype=np.float64) for term, _ in given}
        met_all = np.ones(len(next(iter(values.values()))) if values else 0, dtype=bool)
        for term, target in given:
            met = values[term] <= target
            shares[term].append(int(met.sum()) / arrived if arrived else math.nan)
            met_all &= met
        every.append(int(met_all.sum()) / arrived if arrived else math.nan)
    out: dict[str, float | None] = {term: None for term in TERMS}
    for term, values_of in shares.items():
        out[term] = metrics.estimate(values_of, high=1.0)["mean"]
    out["all"] = metrics.estimate(every, high=1.0)["mean"] if given else None
    return out


def _tails(records: Sequence[Any]) -> dict[str, Any]:
    """One replication's completed requests' TTFT, TPOT and E2E (seconds, float64, base64; a request of one output
    token has no interval to miss: TPOT -inf) and its arrived count: what ``judge`` needs for any SLA."""
    done = metrics.completed(records)
    ttft = np.array([r.first_token_s - r.arrival_s for r in done], dtype=np.float64)
    e2e = np.array([r.finish_s - r.arrival_s for r in done], dtype=np.float64)
    tpot = np.array([(r.finish_s - r.first_token_s) / (r.output_tokens - 1) if r.output_tokens >= 2 else -math.inf
                     for r in done], dtype=np.float64)
    return {"arrived": len(records),
            **{term: base64.b64encode(values.tobytes()).decode() for term, values in
               (("ttft", ttft), ("tpot", tpot), ("e2e", e2e))}}


def simulate_job(job: Job) -> dict[str, Any]:
    """Simulate one job (a module-level function: picklable) and return its cache entry: the SLA-free outcome and
    each replication's latencies (``judge`` turns it into what planning reads).

    A scenario the simulator refuses (a strategy the profile cannot support, a field this
    simulator does not know yet) gives ``{"error": "<file: field: problem>"}``, not an exception:
    one unsupported candidate must not sink a whole sweep, and the reason is what gets reported.
    """
    profile = profile_from_json(job.profile_json)
    try:
        scenario = scenario_from_dict(json.loads(job.scenario_json), job.source)
        result = simulate(scenario, profile, seed=job.seed, replications=job.replications)
    except InputError as err:
        return {"error": str(err)}
    report = summary(result)
    records = [run.records for run in result.runs]
    latency = report["latency_ms"]
    counts = report["counts"]
    rejected_share = counts["rejected"] / counts["arrived"] if counts["arrived"] else 0.0
    p99 = {term: latency[term]["p99"] for term in TERMS}
    gpus = int(scenario.cluster.gpus)
    gpu_hours = []
    for recs in records:
        done = len(metrics.completed(recs))
        span = metrics.makespan(recs)
        gpu_hours.append(gpus * span / 3600.0 / done * 1000.0 if done else math.nan)
    data = {
        "scenario": scenario.name,
        "profile": {"key": result.profile_key, "source": result.profile_source},
        "numbers_from": f"simulated on a '{result.profile_source}' profile ({result.profile_key})",
        "seed": job.seed,
        "replications": job.replications,
        "gpus": gpus,
        "replicas": result.replicas,
        "rate_per_s": _finite(result.rate_per_s) if result.rate_per_s is not None else None,
        "p50_ms": {term: latency[term]["p50"] for term in TERMS},
        "p99_ms": p99,
        # per replication (same seeds across candidates), so a difference can be judged pairwise
        "p99_ms_by_replication": {term: [metrics.latency_percentiles(recs)[term]["p99"] * 1000.0 for recs in records]
                                  for term in TERMS},
        # the tails verdicts are decided on (tripath/planning/decision.py): warm-up arrivals left out
        "p99_steady_ms_by_replication": steady_p99s(records),
        "counts": counts,
        "rejected_share": rejected_share,
        "reject_reasons": report["reject_reasons"],
        "throughput_rps": report["throughput"]["requests_per_s"]["mean"],
        "output_tokens_per_s": report["throughput"]["output_tokens_per_s"]["mean"],
        "gpu_hours_per_1k": metrics.estimate(gpu_hours)["mean"],
        "kv_capacity_bytes": result.kv_capacity_bytes,
        "peak_kv_bytes": max((rs.peak_kv_bytes for run in result.runs for rs in run.replicas), default=0),
        "paging_ms_per_request": report["per_request_paths"]["paging_ms"]["mean"],
        "accepted_tokens_per_request": report["per_request_paths"]["accepted_tokens"]["mean"],
        "windows": None if job.window_s is None else _windows(records, job.window_s),
    }
    prefix = report.get("prefix_cache")
    if prefix is not None:  # only with prefix caching on: every other outcome keeps its keys
        data["prefix_cache"] = {"hit_rate_tokens": prefix["hit_rate"]["tokens"]["mean"],
                                "prefill_tokens_saved": prefix["prefill_tokens_saved"]["mean"],
                                "ttft_p50_ms": {group: prefix["ttft_ms"][group]["p50"]["mean"]
                                                for group in ("cached", "uncached")},
                                **({"note": prefix["note"]} if "note" in prefix else {})}
    return {"outcome": _json_ready(data), "tails": [_tails(recs) for recs in records]}


def _json_ready(value: Any) -> Any:
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


def preload_traces(data: dict[str, Any], source: str | None = None) -> None:
    """Read the scenario's workload traces into this process's trace cache before a pool forks, so its workers
    inherit them instead of each reading them again (a bad scenario or trace is left to the jobs to report)."""
    try:
        workload = scenario_from_dict(data, source).workload
        names = [spec.trace for spec in (workload.prompt_tokens, workload.output_tokens) if spec.kind == "empirical"]
        if workload.arrival.kind == "trace":
            names.append(workload.arrival.trace)
        for name in dict.fromkeys(n for n in names if n):
            load_trace(name)
    except (InputError, ValueError):
        return


def run_sweep(jobs: Sequence[Job], executor: Executor | None = None, cache: ResultCache | None = None,
              desc: str = "simulating") -> list[Outcome]:
    """Outcomes in job order; identical jobs run once; cached ones are not rerun. Progress on stderr."""
    executor = executor or LocalPoolExecutor(1)
    keys = [job.key() for job in jobs]
    found: dict[str, dict[str, Any]] = {}
    if cache is not None:
        for key in dict.fromkeys(keys):
            hit = cache.get(key)
            if hit is not None:
                found[key] = hit
    todo = {key: job for key, job in zip(keys, jobs, strict=True) if key not in found}
    with tqdm(total=len(todo), desc=desc, file=sys.stderr, disable=None, leave=False) as bar:
        results = executor.map(simulate_job, list(todo.values()), progress=bar)
    for key, value in zip(todo, results, strict=True):
        found[key] = value
        if cache is not None and "error" not in value:  # a refusal may be the SLA's own: never shared by the key
            cache.put(key, value)
    return [Outcome(judge(found[key], job)) for key, job in zip(keys, jobs, strict=True)]


class NotCached(Exception):
    """A job the cache does not hold, met by a ``cached_only`` walk (which simulates nothing)."""


def run_cached(job: Job, cache_dir: str | None = None, cached_only: bool = False) -> Outcome:
    """One job through the cache in this process (searches whose next job depends on the last); with
    ``cached_only``, NotCached instead of a simulation when the cache does not hold it (a search walked from the
    cache first, so that only the searches that need new simulations go to a pool)."""
    cache = None if cache_dir is None else ResultCache(cache_dir)
    key = job.key()
    hit = cache.get(key) if cache is not None else None
    if hit is None:
        if cached_only:
            raise NotCached(key)
        hit = simulate_job(job)
        if cache is not None and "error" not in hit:
            cache.put(key, hit)
    return Outcome(judge(hit, job))
