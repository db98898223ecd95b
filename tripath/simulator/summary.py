"""The summary of a simulation (JSON-ready) and the files a run writes: records.csv and summary.json.

Latencies in the summary are milliseconds. Each is the mean over replications of that
replication's percentile, with a distribution-free order-statistic 95 % interval over the pooled
requests (tripath/core/metrics.py: percentile_estimate); other quantities over replications carry a
Student-t interval (estimate).
Every number is built from one RunTally per replication (tripath/simulator/tally.py): folded here from the
records a run holds in memory, or during a streamed run as its records went to disk (runner.simulate_recording),
so both give the same summary bit for bit.
Files are written atomically (a temp file in the same folder, then os.replace); records.csv row by row, never
held whole as text.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tripath.core import metrics
from tripath.core.atomic import AtomicFile, write_text
from tripath.core.errors import InputError
from tripath.core.records import RECORD_COLUMNS, RequestRecord, write_records
from tripath.simulator.prefix_summary import prefix_section
from tripath.simulator.tally import OVERLOAD_GROWTH, PATH_FIELDS, RunTally, tally_records

if TYPE_CHECKING:
    from tripath.simulator.runner import SimulationResult

__all__ = ["PATH_FIELDS", "RECORD_COLUMNS", "records_csv", "run_tallies", "summary", "write_outputs",
           "write_records"]


def summary(result: SimulationResult) -> dict[str, Any]:
    """Everything a user reads about the result, with where each number comes from."""
    runs = result.runs
    tallies = run_tallies(result)
    estimate = metrics.estimate
    latency: dict[str, dict[str, Any]] = {}
    for metric in metrics.LATENCY_METRICS:
        values = [t.latencies(metric) for t in tallies]
        check_finite(f"latency_ms.{metric}", values, result)  # before estimate(), which leaves non-finite out
        latency[metric] = {level: metrics.percentile_estimate(values, level, 1000.0) for level in metrics.PERCENTILES}
    sla = result.scenario.sla
    targets = {"ttft": sla.ttft_p99_ms, "tpot": sla.tpot_p99_ms, "e2e": sla.e2e_p99_ms}
    attained = [t.attainment() for t in tallies]
    attainment = {term: (None if a0 is None else estimate([a[term] for a in attained], high=1.0))
                  for term, a0 in attained[0].items()}
    p99_met = {term: (None if target is None or latency[term]["p99"]["mean"] is None
                      else latency[term]["p99"]["mean"] <= target) for term, target in targets.items()}
    counts = [t.counts() for t in tallies]
    throughputs = [t.throughput() for t in tallies]
    utilisations = [t.utilisation(run.replicas) for t, run in zip(tallies, runs, strict=True)]
    reasons: Counter[str] = Counter()
    for t in tallies:  # in first-seen order, replication after replication
        reasons.update(t.reasons)
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
        "reject_reasons": dict(reasons),
        "counts_per_replication": {key: estimate([c[key] for c in counts]) for key in counts[0]},
        "sla": {"targets_ms": targets, "attainment": attainment, "p99_meets_target": p99_met},
        "throughput": {key: estimate([t[key] for t in throughputs]) for key in throughputs[0]},
        "utilisation": [estimate([u[i] for u in utilisations], high=1.0) for i in range(len(utilisations[0]))],
        "extrapolations": extrapolations,
        "events": sum(run.events for run in runs),
        "iterations": sum(run.iterations for run in runs),
        "loop": getattr(result, "loop", "replica"),
        "loop_reason": getattr(result, "loop_reason", ""),
        "strategies": getattr(result, "strategies", None),
        "per_request_paths": _paths(tallies),
        "timeseries": _timeseries(result),
    }
    prefix = prefix_section(runs)
    if prefix is not None:  # only with prefix caching on: every other summary keeps its bytes
        out["prefix_cache"] = prefix
    overload = _overload(tallies)
    if overload is not None:  # only when the waiting queue grew without bound: every other summary keeps its bytes
        out["overload"] = overload
    check_finite("per_request_paths", [t.path_means() for t in tallies], result)
    check_finite("", out, result)
    return out


def check_finite(field: str, value: Any, result: SimulationResult) -> None:
    """Refuse a run whose results are not all finite numbers: an InputError naming the scenario file, the result's
    field and the profile, never a report of "inf s" nor a --json dump that fails on an infinity (exit 70).

    The profile's costs are bounded (tripath/profile/fields.py) and the scenario's sizes and clock too
    (tripath/core/limits.py), so this is the last guard: whatever combination still overflows a float is refused
    as the input it is. ``value``: a number, a numpy array, or dicts and lists of them (searched in order)."""
    found = _first_non_finite(field, value)
    if found is not None:
        where, number = found
        raise InputError(result.scenario.source_path, where, f"the simulated result is {number} (not a finite "
                         f"number) on profile {result.profile_key}: the profile's costs and the scenario's sizes take "
                         "it past a float's range; check the profile's cost numbers and the scenario's token counts")


def _first_non_finite(field: str, value: Any) -> tuple[str, float] | None:
    """(dotted place, value) of the first NaN or infinity in ``value``, else None."""
    if isinstance(value, dict):
        items: Iterable[tuple[str, Any]] = ((f"{field}.{key}" if field else str(key), v) for key, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{field}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, np.ndarray):
        bad = np.flatnonzero(~np.isfinite(value))
        return None if bad.size == 0 else (f"{field}[{bad[0]}]", float(value.flat[bad[0]]))
    elif isinstance(value, float | np.floating) and not math.isfinite(value):
        return field, float(value)
    else:
        return None
    for where, item in items:
        found = _first_non_finite(where, item)
        if found is not None:
            return found
    return None


def run_tallies(result: SimulationResult) -> tuple[RunTally, ...]:
    """One RunTally per replication: the streamed run's own, else folded from the records it holds."""
    if result.tallies is not None:
        return result.tallies
    sla = result.scenario.sla
    return tuple(tally_records(run.records, sla.ttft_p99_ms, sla.tpot_p99_ms, sla.e2e_p99_ms) for run in result.runs)


def _overload(tallies: tuple[RunTally, ...]) -> dict[str, Any] | None:
    """The waiting queue's peak and growth where it grew without bound in some replication (tally.py), else None."""
    overloaded = sum(t.overloaded for t in tallies)
    if not overloaded:
        return None
    return {
        "overloaded_replications": overloaded,
        "peak_waiting": metrics.estimate([t.peak_waiting for t in tallies]),
        "queue_growth_per_arrival": metrics.estimate([t.queue_growth for t in tallies]),
        "note": (f"the waiting queue grew by more than {OVERLOAD_GROWTH:.0%} of the arrivals over the second half "
                 "of the arrivals: requests arrived faster than they were served, so the queue (and the latencies "
                 "above) grew with the run's length and describe this run, not a steady state; peak_waiting: most "
                 "requests arrived and not yet admitted at once (tripath/simulator/tally.py)"),
    }


def _paths(tallies: tuple[RunTally, ...]) -> dict[str, Any]:
    """Means per completed request of the per-path record fields, over replications."""
    out: dict[str, Any] = {}
    means = [t.path_means() for t in tallies]
    for _, key, _ in PATH_FIELDS:
        out[key] = metrics.estimate([m[key] for m in means])
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
    write_records(buffer, runs_records)
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


def write_outputs(result: SimulationResult, out_dir: str | os.PathLike[str],
                  report: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write records.csv (with a replication column) and summary.json into ``out_dir``; timeseries.csv
    too when the result carries samples (simulate(..., timeseries_interval_s=...)). ``report``: summary(result)
    where the caller has it already. A streamed result's records.csv was written during its run: it must be
    ``out_dir``'s (runner.simulate_recording(..., records_path=out_dir / "records.csv"))."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"records": folder / "records.csv", "summary": folder / "summary.json"}
    summary_text = json.dumps(_json_ready(summary(result) if report is None else report), indent=2,
                              allow_nan=False) + "\n"
    if result.tallies is None:
        with AtomicFile(paths["records"]) as handle:
            write_records(handle, (run.records for run in result.runs))
    elif result.records_path is None or not paths["records"].exists() or \
            not Path(result.records_path).samefile(paths["records"]):
        raise ValueError(f"this run streamed its records to {result.records_path}, not to {paths['records']}")
    if getattr(result, "timeseries_interval_s", None) is not None:
        from tripath.simulator.loop.timeseries import timeseries_csv

        paths["timeseries"] = folder / "timeseries.csv"
        write_text(paths["timeseries"], timeseries_csv([run.timeseries for run in result.runs]))
    write_text(paths["summary"], summary_text)
    return paths
