"""The summary of a simulation (JSON-ready) and the files a run writes: records.csv and summary.json.

Latencies in the summary are milliseconds. Each is the mean over replications of that
replication's percentile, with a distribution-free order-statistic 95 % interval over the pooled
requests (tripath/core/metrics.py: percentile_estimate); other quantities over replications carry a
Student-t interval (estimate).
Files are written atomically (a temp file in the same folder, then os.replace).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tripath.core import metrics
from tripath.core.atomic import write_text
from tripath.core.records import RequestRecord
from tripath.simulator.prefix_summary import prefix_section

if TYPE_CHECKING:
    from tripath.simulator.runner import SimulationResult

RECORD_COLUMNS = ("replication", "request_id", "task", "arrival_s", "prompt_tokens", "output_tokens",
                  "replica", "admitted_s", "first_token_s", "finish_s", "status", "reject_reason",
                  "draft_rounds", "accepted_tokens", "paging_s", "merge_s", "preemptions")
# Per-path record fields averaged over completed requests in the summary: (field, summary key, scale)
PATH_FIELDS = (("draft_rounds", "draft_rounds", 1.0), ("accepted_tokens", "accepted_tokens", 1.0),
               ("paging_s", "paging_ms", 1000.0), ("merge_s", "merge_ms", 1000.0), ("preemptions", "preemptions", 1.0))


def summary(result: SimulationResult) -> dict[str, Any]:
    """Everything a user reads about the result, with where each number comes from."""
    runs = result.runs
    records = [run.records for run in runs]
    estimate = metrics.estimate
    latency: dict[str, dict[str, Any]] = {}
    for metric in metrics.LATENCY_METRICS:
        values = [metrics.latencies(r, metric) for r in records]
        latency[metric] = {level: metrics.percentile_estimate(values, level, 1000.0) for level in metrics.PERCENTILES}
    sla = result.scenario.sla
    targets = {"ttft": sla.ttft_p99_ms, "tpot": sla.tpot_p99_ms, "e2e": sla.e2e_p99_ms}
    attained = [metrics.sla_attainment(r, sla.ttft_p99_ms, sla.tpot_p99_ms, sla.e2e_p99_ms) for r in records]
    attainment = {term: (None if a0 is None else estimate([a[term] for a in attained], high=1.0))
                  for term, a0 in attained[0].items()}
    p99_met = {term: (None if target is None or latency[term]["p99"]["mean"] is None
                      else latency[term]["p99"]["mean"] <= target) for term, target in targets.items()}
    counts = [metrics.counts(r) for r in records]
    throughputs = [metrics.throughput(r) for r in records]
    utilisations = [metrics.utilisation(run.records, run.replicas) for run in runs]
    extrapolations = _extrapolations(result)
    out = {
        "scenario": result.scenario.name,
        "profile": {"key": result.profile_key, "source": result.profile_source},
        "numbers_from": f"simulated (SimPy) on cost models of kind '{result.profile_source}'",
        "seed": result.seed,
        "replications": len(runs),
        "fast_path": result.fast,
        "replicas": result.replicas,
        "arrival_rate_per_s": {"value": result.rate_per_s, "source": result.rate_source},
        "saturation_estimate": None if result.saturation is None else {
            "batch": result.saturation.batch, "requests_per_s": result.saturation.requests_per_s,
            "source": "estimate (tripath/simulator/capacity.py) from the profile's costs and mean lengths" if
            result.saturation.detail is None else
            "estimate (tripath/simulator/paths/capacity.py) from the profile's costs and path sections and mean "
            "lengths",
            **({} if result.saturation.detail is None else {"paths": result.saturation.detail})},
        "kv_capacity_bytes": {"value": result.kv_capacity_bytes, "source": result.kv_capacity_source},
        "latency_ms": latency,
        "latency_interval": {"method": metrics.INTERVAL_METHOD, "note": metrics.INTERVAL_NOTE},
        "counts": {key: sum(c[key] for c in counts) for key in ("arrived", "completed", "rejected")},
        "reject_reasons": dict(Counter(r.reject_reason for run in records for r in run if r.reject_reason)),
        "counts_per_replication": {key: estimate([c[key] for c in counts]) for key in counts[0]},
        "sla": {"targets_ms": targets, "attainment": attainment, "p99_meets_target": p99_met},
        "throughput": {key: estimate([t[key] for t in throughputs]) for key in throughputs[0]},
        "utilisation": [estimate([u[i] for u in utilisations], high=1.0) for i in range(result.replicas)],
        "extrapolations": extrapolations,
        "events": sum(run.events for run in runs),
        "iterations": sum(run.iterations for run in runs),
        "loop": getattr(result, "loop", "replica"),
        "loop_reason": getattr(result, "loop_reason", ""),
        "strategies": getattr(result, "strategies", None),
        "per_request_paths": _paths(records),
        "timeseries": _timeseries(result),
    }
    prefix = prefix_section(runs)
    if prefix is not None:  # only with prefix caching on: every other summary keeps its bytes
        out["prefix_cache"] = prefix
    return out


def _paths(records: list[tuple[RequestRecord, ...]]) -> dict[str, Any]:
    """Means per completed request of the per-path record fields, over replications."""
    out: dict[str, Any] = {}
    for field, key, scale in PATH_FIELDS:
        means = []
        for run in records:
            done = [getattr(r, field) for r in run if r.completed]
            means.append(scale * sum(done) / len(done) if done else 0.0)
        out[key] = metrics.estimate(means)
    out["note"] = ("means per completed request, simulated: speculative rounds and accepted draft tokens, "
                   "paging stall and sequence-parallel merge ms summed over its iterations, evictions")
    return out


def _timeseries(result: SimulationResult) -> dict[str, Any] | None:
    interval = getattr(result, "timeseries_interval_s", None)
    if interval is None:
        return None
    return {"interval_s": interval, "file": "timeseries.csv (with --out)",
            "samples": sum(len(run.timeseries.rows) for run in result.runs if run.timeseries is not None),
            "source": "simulated state sampled every interval_s of simulated time "
                      "(tripath/simulator/loop/timeseries.py)"}


def _extrapolations(result: SimulationResult) -> dict[str, Any]:
    totals: dict[str, int] = {}
    for run in result.runs:
        for key, value in run.extrapolations.to_dict().items():
            totals[key] = totals.get(key, 0) + value
    queries = totals["prefill_queries"] + totals["decode_queries"]
    outside = totals["prefill_outside_domain"] + totals["decode_outside_domain"]
    totals_any: dict[str, Any] = dict(totals)
    totals_any["fraction_outside_domain"] = outside / queries if queries else 0.0
    sp_queries = totals.get("sp_prefill_queries", 0)
    totals_any["sp_fraction_outside_domain"] = (totals.get("sp_prefill_outside_domain", 0) / sp_queries
                                                if sp_queries else 0.0)
    totals_any["note"] = ("cost-model queries outside the profile's measured domain (extrapolated); sp_*: prefill "
                          "chunks priced on the sequence-parallel rows outside their contexts or the merge fit's "
                          "domain (the same chunks are in prefill_queries too)")
    return totals_any


def records_csv(runs_records: list[tuple[RequestRecord, ...]]) -> str:
    """All replications' records as CSV text; floats in repr form so they read back exactly."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(RECORD_COLUMNS)
    for replication, records in enumerate(runs_records):
        for r in records:
            writer.writerow((replication, r.request_id, r.task, repr(r.arrival_s), r.prompt_tokens,
                             r.output_tokens, r.replica, repr(r.admitted_s), repr(r.first_token_s),
                             repr(r.finish_s), r.status, r.reject_reason, r.draft_rounds, r.accepted_tokens,
                             repr(r.paging_s), repr(r.merge_s), r.preemptions))
    return buffer.getvalue()


def _json_ready(value: Any) -> Any:
    """NaN and infinities become null: JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


def write_outputs(result: SimulationResult, out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write records.csv (with a replication column) and summary.json into ``out_dir``; timeseries.csv
    too when the result carries samples (simulate(..., timeseries_interval_s=...))."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"records": folder / "records.csv", "summary": folder / "summary.json"}
    summary_text = json.dumps(_json_ready(summary(result)), indent=2, allow_nan=False) + "\n"
    write_text(paths["records"], records_csv([run.records for run in result.runs]))
    if getattr(result, "timeseries_interval_s", None) is not None:
        from tripath.simulator.loop.timeseries import timeseries_csv

        paths["timeseries"] = folder / "timeseries.csv"
        write_text(paths["timeseries"], timeseries_csv([run.timeseries for run in result.runs]))
    write_text(paths["summary"], summary_text)
    return paths
