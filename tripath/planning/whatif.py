"""What-ifs: the cross product of scenario fields, and a load step's transient under fixed vs adaptive batching.

``whatif`` varies dotted scenario fields (``batching.max_wait_ms=0,5,10,20``) and simulates every
combination with the same seed (common random numbers: differences between points come from the
change, not from different draws); each point carries P99s with 95% confidence intervals over the
replications.

``load_step`` multiplies the arrival rate by FACTOR at time T. The arrivals are the scenario's
own (its length and task distributions, Poisson at its rate) with every arrival after T moved to
T + (t - T) / FACTOR: a Poisson process time-compressed by FACTOR is a Poisson process at FACTOR
times the rate. They are written as a Mooncake-format trace (planning's cache folder, named by a
hash of its content) and replayed under the scenario's batching policy ("fixed") and under
policy = "adaptive"; the outcome is P99 per window of arrival time, per replication seed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tripath.core import metrics
from tripath.core.atomic import write_text
from tripath.core.limits import MAX_SWEEP_POINTS, MAX_SWEEP_REQUESTS, MAX_WINDOWS, check_count, check_fits
from tripath.planning.cache import DEFAULT_CACHE_DIR, ResultCache
from tripath.planning.executor import Executor
from tripath.planning.scenario_dict import build, get_field, with_fields, with_rate
from tripath.planning.sweep import make_job, run_sweep
from tripath.profile.profile import Profile
from tripath.simulator.runner import arrival_rate, cluster_config
from tripath.simulator.scenario.workload import generate_requests

ALIASES = {"workload.rate": "workload.arrival.rate_per_s", "workload.rate_per_s": "workload.arrival.rate_per_s",
           "workload.load": "workload.arrival.load_fraction",
           "workload.load_fraction": "workload.arrival.load_fraction"}


def parse_value(text: str) -> Any:
    """A TOML-ish scalar: int, float, true/false, else the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_vary(text: str) -> tuple[str, list[Any]]:
    """``field=v1,v2,...`` -> (dotted field, values); ``workload.rate`` means workload.arrival.rate_per_s."""
    field, sep, values = text.partition("=")
    field = field.strip()
    if not sep or not field or not values.strip():
        raise ValueError(f"--vary wants FIELD=V1,V2,... (e.g. batching.max_wait_ms=0,5,10), got {text!r}")
    return ALIASES.get(field, field), [parse_value(v) for v in values.split(",") if v.strip()]


def _setting(field: str, value: Any) -> dict[str, Any]:
    """One field change; a rate and a load fraction exclude each other, so setting one drops the other."""
    changes: dict[str, Any] = {field: value}
    if field == "workload.arrival.rate_per_s":
        changes["workload.arrival.load_fraction"] = None
    elif field == "workload.arrival.load_fraction":
        changes["workload.arrival.rate_per_s"] = None
    return changes


@dataclass(frozen=True)
class WhatIf:
    scenario: str
    profile_key: str
    profile_source: str
    fields: tuple[str, ...]
    points: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "profile": {"key": self.profile_key, "source": self.profile_source},
                "numbers_from": f"simulated on a '{self.profile_source}' profile ({self.profile_key}); "
                                f"P99 as mean over replications; interval: {metrics.INTERVAL_METHOD} over the "
                                "pooled requests",
                "fields": list(self.fields), "points": list(self.points)}


def whatif(data: dict[str, Any], source: str | None, profile: Profile, vary: Sequence[tuple[str, Sequence[Any]]],
           seed: int = 0, replications: int = 2, executor: Executor | None = None,
           cache: ResultCache | None = None) -> WhatIf:
    """Simulate the cross product of ``vary`` (each (dotted field, values)); points in product order."""
    if not vary:
        raise ValueError("nothing to vary: give at least one FIELD=V1,V2,...")
    fields = tuple(field for field, _ in vary)
    check_count(math.prod(len(values) for _, values in vary), MAX_SWEEP_POINTS, None, "--vary",
                "what-if points (the product of the --vary value counts)")
    settings = list(itertools.product(*(values for _, values in vary)))
    jobs = []
    total = 0  # requests simulated in all, where the variants fix their count
    for combo in settings:
        changes: dict[str, Any] = {}
        for field, value in zip(fields, combo, strict=True):
            changes.update(_setting(field, value))
        variant = with_fields(data, changes)
        # a bad value fails here, naming the field, before anything runs; so does a point too big to hold
        requests = build(variant, source).workload.planned_requests or 0
        check_fits(requests * replications, source, "workload.requests x --replications")
        total += requests * replications
        jobs.append(make_job(variant, source, profile, seed, replications))
    check_count(total, MAX_SWEEP_REQUESTS, None, "--vary x --replications", "requests to simulate in all")
    outcomes = run_sweep(jobs, executor, cache, desc="what-if")
    points = []
    for combo, outcome in zip(settings, outcomes, strict=True):
        point: dict[str, Any] = {"settings": dict(zip(fields, combo, strict=True))}
        if outcome.error:
            point["error"] = outcome.error
        else:
            o = outcome.data
            point.update({"p99_ms": o["p99_ms"], "p50_ms": o["p50_ms"], "attainment": o["attainment"],
                          "meets_sla": o["meets_sla"], "rate_per_s": o["rate_per_s"], "counts": o["counts"]})
        points.append(point)
    return WhatIf(data.get("name", "scenario"), profile.key_str(), profile.source, fields, tuple(points))


def step_trace(data: dict[str, Any], source: str | None, profile: Profile, factor: float, at_s: float,
               seed: int, folder: Path, window_s: float | None = None) -> Path:
    """The scenario's arrivals with the rate times ``factor`` after ``at_s``, as a Mooncake jsonl trace; with
    ``window_s``, refused before it is written when its arrivals span more than MAX_WINDOWS windows."""
    if not factor > 0 or not at_s >= 0:
        raise ValueError(f"load step wants FACTOR > 0 and SECONDS >= 0, got {factor}@{at_s}")
    scenario = build(data, source)
    config, _ = cluster_config(scenario, profile)
    rate, _, _ = arrival_rate(scenario, profile, config)
    if rate is None:
        raise ValueError("a load step needs Poisson or gamma arrivals (a trace replay has its own timestamps)")
    requests = generate_requests(scenario.workload, np.random.default_rng(seed), rate)
    times = [r.arrival_s if r.arrival_s <= at_s else at_s + (r.arrival_s - at_s) / factor for r in requests]
    end = max(times, default=0.0)
    if window_s is not None:
        check_count(max(1, math.ceil(end / window_s)), MAX_WINDOWS, None, "--window-s",
                    f"windows of {window_s:g} s over the {end:,.0f} s of arrivals")
    lines = []
    for r, t in zip(requests, times, strict=True):
        lines.append(json.dumps({"timestamp": t * 1000.0, "input_length": r.prompt_tokens,
                                 "output_length": r.output_tokens}))
    text = "\n".join(lines) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    if not path.exists():
        write_text(path, text)
    return path


@dataclass(frozen=True)
class Transient:
    scenario: str
    profile_key: str
    profile_source: str
    factor: float
    at_s: float
    window_s: float
    series: dict[str, Any]  # policy label -> {"policy": ..., "windows": [...]} or {"error": ...}

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "profile": {"key": self.profile_key, "source": self.profile_source},
                "numbers_from": f"simulated on a '{self.profile_source}' profile ({self.profile_key}); "
                                "P99 per window of arrival time, mean over replication seeds; interval: "
                                f"{metrics.INTERVAL_METHOD} over the window's requests pooled",
                "load_step": {"factor": self.factor, "at_s": self.at_s}, "window_s": self.window_s,
                "series": self.series}


def load_step(data: dict[str, Any], source: str | None, profile: Profile, factor: float, at_s: float,
              window_s: float | None = None, seed: int = 0, replications: int = 2,
              executor: Executor | None = None, cache: ResultCache | None = None) -> Transient:
    """P99 per window around a load step, under the scenario's batching ("fixed") and "adaptive"."""
    folder = (cache.directory if cache is not None else Path(tempfile.gettempdir()) / DEFAULT_CACHE_DIR) / "traces"
    window = window_s or max(at_s / 5.0, 1.0)
    requests = build(data, source).workload.planned_requests or 0
    check_count(2 * replications * requests, MAX_SWEEP_REQUESTS, None, "--replications",
                "requests to simulate in all (2 policies x replications x the scenario's requests)")
    policies = {"fixed": get_field(data, "batching.policy") or "continuous", "adaptive": "adaptive"}
    jobs, labels = [], []
    seeds = np.random.SeedSequence(seed).generate_state(replications)
    for label, policy in policies.items():
        for rep_seed in seeds:
            trace = step_trace(data, source, profile, factor, at_s, int(rep_seed), folder, window)
            variant = with_fields(data, {"batching.policy": policy, "workload.requests": None,
                                         "workload.duration_s": None, "workload.arrival": {"kind": "trace",
                                                                                           "trace": str(trace)},
                                         "workload.prompt_tokens": {"kind": "trace"},
                                         "workload.output_tokens": {"kind": "trace"}})
            jobs.append(make_job(variant, source, profile, seed, 1, window_s=window))
            labels.append(label)
    outcomes = run_sweep(jobs, executor, cache, desc="load step")
    series: dict[str, Any] = {}
    for label, policy in policies.items():
        mine = [o for lab, o in zip(labels, outcomes, strict=True) if lab == label]
        errors = [o.error for o in mine if o.error]
        if errors:
            series[label] = {"policy": policy, "error": errors[0]}
            continue
        count = min(len(o.data["windows"]) for o in mine)
        windows = []
        for i in range(count):
            rows = [o.data["windows"][i] for o in mine]
            row: dict[str, Any] = {"start_s": rows[0]["start_s"], "end_s": rows[0]["end_s"],
                                   "arrived": sum(r["arrived"] for r in rows)}
            for term in metrics.TERMS:  # the jobs' window latencies pooled: the order-statistic interval over them all
                row[f"{term}_p99_ms"] = metrics.percentile_estimate([np.asarray(r[f"{term}_ms"]) for r in rows],
                                                                    "p99")
            windows.append(row)
        series[label] = {"policy": policy, "windows": windows}
    return Transient(data.get("name", "scenario"), profile.key_str(), profile.source, factor, at_s, window, series)


def rate_of(data: dict[str, Any], source: str | None, profile: Profile) -> float | None:
    """The scenario's resolved arrival rate (its rate_per_s, or load_fraction x the saturation estimate)."""
    scenario = build(data, source)
    config, _ = cluster_config(scenario, profile)
    return arrival_rate(scenario, profile, config)[0]


__all__ = ["WhatIf", "Transient", "whatif", "load_step", "parse_vary", "parse_value", "step_trace", "rate_of",
           "with_rate"]
