"""The explorer's one call into the simulator, cached: the same functions `tripath simulate` runs.

``run`` takes the scenario as a TOML-shaped dict (built by scenario_form.py) and the profile as
its JSON text, rebuilds both through their validating readers (scenario_from_dict,
Profile.from_dict), and calls tripath.simulator.runner.simulate and summary. st.cache_data keys the
result on (scenario JSON, profile text, seed, replications): the same inputs return the stored
result instead of simulating again; the simulator is deterministic, so nothing is lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from tripath.app.widgets.profiles import parse_profile
from tripath.core import metrics
from tripath.simulator.runner import SimulationResult, simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.summary import records_csv, summary

CDF_METRICS = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class Outcome:
    """What the explorer shows: the CLI's summary, the records CSV and per-request latencies (s)."""

    report: dict[str, Any]
    records_csv: str
    latencies_s: dict[str, tuple[np.ndarray, ...]]  # metric -> one array per replication
    result: SimulationResult


def canonical(scenario: dict[str, Any]) -> str:
    """One text per scenario dict (sorted keys), the cache key the app and its tests share."""
    return json.dumps(scenario, sort_keys=True)


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


def percentile_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary's latency percentiles as table rows (ms): mean and 95% interval per metric and level."""
    names = {"p50": "P50", "p90": "P90", "p99": "P99", "p999": "P99.9"}
    rows = []
    for metric, levels in report["latency_ms"].items():
        for level, est in levels.items():
            rows.append({"metric": metric, "percentile": names[level], "mean ms": est["mean"],
                         "95% CI low": est["ci_low"], "95% CI high": est["ci_high"]})
    return rows


def sla_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each SLA term: target, simulated P99, met or not, and the share of requests within the target."""
    sla = report["sla"]
    rows = []
    for term, target in sla["targets_ms"].items():
        if target is None:
            continue
        share = sla["attainment"].get(term) or {}
        p99 = report["latency_ms"][term]["p99"]["mean"]
        rows.append({"term": f"{term} P99", "target ms": target, "simulated P99 ms": p99,
                     "met": sla["p99_meets_target"][term], "share within target": share.get("mean")})
    return rows
