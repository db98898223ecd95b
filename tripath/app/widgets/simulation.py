"""The explorer's one call into the simulator, cached: the same functions `tripath simulate` runs.

``run`` takes the scenario as a TOML-shaped dict (built by scenario_form.py) and the profile as
its JSON text, rebuilds both through their validating readers (scenario_from_dict,
Profile.from_dict), and calls tripath.simulator.runner.simulate and summary. st.cache_data keys the
result on (scenario JSON, profile text, seed, replications): the same inputs return the stored
result instead of simulating again; the simulator is deterministic, so nothing is lost.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from tripath.app.widgets import display
from tripath.app.widgets.profiles import parse_profile
from tripath.core import metrics
from tripath.core.errors import InputError
from tripath.planning.matrix import cell_rate
from tripath.planning.sweep import MAX_REJECTED
from tripath.profile.profile import Profile
from tripath.simulator.runner import SimulationResult, simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.summary import records_csv, summary

CDF_METRICS = metrics.TERMS
METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end", "queueing": "queueing delay"}
LEVEL_NAMES = {"p50": "P50", "p90": "P90", "p99": "P99", "p999": "P99.9"}


@dataclass(frozen=True)
class Outcome:
    """What the explorer shows: the CLI's summary, the records CSV and per-request latencies (s)."""

    report: dict[str, Any]
    records_csv: str
    latencies_s: dict[str, tuple[np.ndarray, ...]]  # metric -> one array per replication
    result: SimulationResult


@st.cache_data(show_spinner=False, max_entries=16)
def run(scenario_json: str, profile_text: str, profile_name: str, seed: int, replications: int,
        interval_s: float | None = None) -> Outcome:
    """Simulate ``replications`` seeded replications, exactly as `tripath simulate --seed --replications`.

    ``interval_s`` asks the simulator for its time series (queue, batch, KV per tier, paging) at that
    sampling interval; the records are the same with or without it (tripath/simulator/loop/timeseries.py).
    """
    scenario = scenario_from_dict(json.loads(scenario_json), None)
    profile = parse_profile(profile_text, profile_name)
    result = simulate(scenario, profile, seed=seed, replications=replications, timeseries_interval_s=interval_s)
    latencies = {m: tuple(metrics.latencies(run.records, m) for run in result.runs) for m in CDF_METRICS}
    return Outcome(summary(result), records_csv([run.records for run in result.runs]), latencies, result)


def baseline_rate(scenario: dict[str, Any], profile: Profile) -> tuple[dict[str, Any], str | None]:
    """A load given as a fraction, turned into req/s of the BASELINE's saturation estimate, and a line saying so.

    The simulator reads ``load_fraction`` against the saturation of the scenario's own paths, so
    switching a path on would change the arrival rate and a reader would take the load change for
    the path's gain; fixed to the baseline's (planning.matrix.cell_rate, as the decision matrix does),
    the rate stays put. A scenario the reader refuses is returned unchanged: the run reports why.
    """
    arrival = scenario.get("workload", {}).get("arrival", {})
    fraction = arrival.get("load_fraction")
    if fraction is None:
        return scenario, None
    try:
        rate = cell_rate(scenario, None, profile)
    except InputError:
        return scenario, None
    if rate is None:
        return scenario, None
    fixed = copy.deepcopy(scenario)
    fixed["workload"]["arrival"] = {**{k: v for k, v in arrival.items() if k != "load_fraction"}, "rate_per_s": rate}
    return fixed, (f"{rate:.4g} req/s = {fraction:g} of the baseline's saturation {rate / fraction:.4g} req/s "
                   "(estimate of tripath/simulator/capacity.py; the same rate whichever paths are on)")


def percentile_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary's latency percentiles as table rows (ms): mean and 95% interval per metric and level.

    The interval's ends are those display.shown_interval lets through: none when the point (the mean over
    replications) lies outside the pooled interval, and the note says why an end is missing."""
    rows = []
    for metric, levels in report["latency_ms"].items():
        for level, est in levels.items():
            low, high, why = display.shown_interval(est)
            rows.append({"metric": METRIC_NAMES.get(metric, metric), "percentile": LEVEL_NAMES[level],
                         "mean (ms)": est["mean"], "95% low (ms)": low, "95% high (ms)": high, "note": why or ""})
    return rows


def rejected_share(report: dict[str, Any]) -> float:
    """Rejected requests over arrived ones (0 when none arrived)."""
    counts = report["counts"]
    return counts["rejected"] / counts["arrived"] if counts["arrived"] else 0.0


def sla_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each SLA term given: target, simulated P99, met or not, and the share of requests within the target.

    A term without a target (None) is not judged: it has no row. A term is "met" only when its P99 is within the
    target AND at most MAX_REJECTED of the requests were rejected (the rule planning's ``meets_sla`` applies): a
    rejected request has no latency, but it did not meet the SLA either.
    """
    sla = report["sla"]
    rejected = rejected_share(report)
    rows = []
    for term, target in sla["targets_ms"].items():
        if target is None:
            continue
        share = sla["attainment"].get(term) or {}
        p99 = report["latency_ms"][term]["p99"]["mean"]
        within = share.get("mean")
        p99_met = sla["p99_meets_target"][term]
        if p99 is None:
            met = f"{display.DASH} {display.NO_REQUEST}"
        elif rejected > MAX_REJECTED:
            met = f"no: {display.pct(rejected)} of the requests rejected"
        else:
            met = "yes" if p99_met else "no: P99 over the target"
        rows.append({"term": f"{METRIC_NAMES[term]} P99", "target (ms)": target, "simulated P99 (ms)": p99,
                     "met": met, "requests within target (%)": None if within is None else 100.0 * within})
    return rows


def throughput_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Throughput over the makespan and each replica's busy share: mean over replications and its 95 %
    Student-t interval cut to the quantity's range (>= 0; a busy share within 0-100 %: tripath/core/metrics.py)."""
    def row(quantity: str, est: dict[str, Any], scale: float = 1.0) -> dict[str, Any]:
        values = {col: None if est.get(key) is None else scale * est[key]
                  for col, key in (("value", "mean"), ("95% low", "ci_low"), ("95% high", "ci_high"))}
        note = ("no value: nothing completed" if values["value"] is None else
                "no interval: it needs 2 or more replications with a value" if None in values.values() else "")
        return {"quantity": quantity, **values, "note": note}

    tput = report["throughput"]
    rows = [row("completed requests (req/s)", tput["requests_per_s"]),
            row("generated tokens (tokens/s)", tput["output_tokens_per_s"])]
    rows += [row(f"replica {i} busy (% of the makespan)", est, 100.0) for i, est in enumerate(report["utilisation"])]
    return rows


def path_rows(report: dict[str, Any], outcome: Outcome | None = None) -> list[dict[str, Any]]:
    """What each switched-on path did: its parameters, the profile numbers it read, and what it moved.

    From the summary's ``strategies`` and ``per_request_paths`` and the saturation estimate's path
    detail; host / SSD traffic from the simulator's time series when it sampled one (cumulative bytes
    per paging link at the last sample, summed over replicas, mean over replications).
    """
    strategies = report.get("strategies") or {}
    on = strategies.get("on") or []
    per = report["per_request_paths"]
    detail = (report.get("saturation_estimate") or {}).get("paths") or {}
    rows: list[dict[str, Any]] = []

    def add(path: str, quantity: str, value: Any, source: str) -> None:
        rows.append({"path": path, "quantity": quantity, "value": value, "from": source})

    if "speculative" in on:
        params = strategies["speculative"]["parameters"]
        add("speculative", "draft tokens per round (K)", params.get("k"), str(params.get("k_from", "")))
        for entry in strategies["speculative"]["numbers_from"]:
            if entry["field"].startswith("acceptance."):  # acceptance.TASK and acceptance.TASK.between_prompt_sd
                add("speculative", f"{entry['unit']}, task {entry['field'].split('.')[1]}", entry["value"],
                    f"profile ({entry['source']})")
        rounds, accepted = per["draft_rounds"]["mean"], per["accepted_tokens"]["mean"]
        add("speculative", "draft rounds per request", rounds, "simulated")
        add("speculative", "accepted draft tokens per request", accepted, "simulated")
        if detail.get("tokens_per_round") is not None:
            add("speculative", "tokens per round (expected)", detail["tokens_per_round"],
                "estimate (tripath/simulator/paths/capacity.py)")
    if "tiered" in on:
        params = strategies["tiered"]["parameters"]
        add("tiered", "host memory (GiB)", params.get("host_capacity_gib"), str(params.get("host_from", "")))
        add("tiered", "SSD (GiB)", params.get("ssd_capacity_gib"), str(params.get("ssd_from", "")))
        add("tiered", "paging stall per request (ms)", per["paging_ms"]["mean"], "simulated")
        for link, gib in _traffic_gib(outcome).items():
            add("tiered", f"KV moved {link.replace('_', ' -> ')} (GiB)", gib, "simulated (time series)")
    if "sequence_parallel" in on:
        params = strategies["sequence_parallel"]["parameters"]
        add("sequence parallel", "SP degree (GPUs per sequence)", params.get("degree"), "scenario")
        add("sequence parallel", "merge time per request (ms)", per["merge_ms"]["mean"], "simulated")
    if "compression" in on:
        params = strategies["compression"]["parameters"]
        add("compression", "mode", params.get("mode"), "scenario")
    if on and detail.get("kv_bytes_per_token") is not None:
        add(", ".join(on), "KV per token (KiB)", detail["kv_bytes_per_token"] / 1024.0,
            "estimate (tripath/simulator/paths/capacity.py)")
    if per["preemptions"]["mean"]:
        add("batching", "preemptions per request", per["preemptions"]["mean"], "simulated")
    return rows


def _traffic_gib(outcome: Outcome | None) -> dict[str, float]:
    """Cumulative paging GiB per link at the last sample, summed over replicas, mean over replications."""
    from tripath.simulator.loop.timeseries import COLUMNS, LINKS

    if outcome is None:
        return {}
    totals: dict[str, list[float]] = {link: [] for link in LINKS}
    for run in outcome.result.runs:
        series = run.timeseries
        if series is None or not series.rows:
            return {}
        last_t = max(row[0] for row in series.rows)
        last = [row for row in series.rows if row[0] == last_t]
        for link in LINKS:
            totals[link].append(sum(row[COLUMNS.index(f"paging_{link}_bytes")] for row in last) / 2**30)
    return {link: sum(v) / len(v) for link, v in totals.items() if v and any(v)}
