"""The plain-text report of a simulation summary (the CLI's default output; --json prints the dict itself).

Every number printed says where it comes from: latencies are simulated on the profile's
cost models, whose source kind (seed / published / measured / projected) heads the report.
"""

from __future__ import annotations

from typing import Any

from tripath.simulator.paths.provenance import one_line

_METRIC_NAMES = {
    "ttft": "TTFT (time to first token)",
    "tpot": "TPOT (time per output token)",
    "e2e": "end-to-end",
    "queueing": "queueing delay",
}
_LEVELS = ("p50", "p90", "p99", "p999")


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 10_000:
        return f"{value / 1000:.1f} s"
    return f"{value:.1f}"


def _ci(est: dict[str, float | None]) -> str:
    if est.get("ci_low") is None or est.get("ci_high") is None:
        return ""
    return f" [{_ms(est['ci_low'])}, {_ms(est['ci_high'])}]"


def _pct(est: dict[str, float | None] | None) -> str:
    if est is None or est.get("mean") is None:
        return "-"
    mean = est["mean"]
    assert mean is not None
    text = f"{100 * mean:.1f}%"
    if est.get("ci_low") is not None and est.get("ci_high") is not None:
        text += f" [{100 * est['ci_low']:.1f}, {100 * est['ci_high']:.1f}]"
    return text


def format_summary(report: dict[str, Any]) -> str:
    """A readable table of the summary dict built by tripath.simulator.summary.summary."""
    profile = report["profile"]
    counts = report["counts"]
    rate = report["arrival_rate_per_s"]
    lines = [
        f"scenario {report['scenario']}: {report['replications']} replication(s), seed {report['seed']}, "
        f"{report['replicas']} replica(s)",
        f"profile  {profile['key']}  (numbers of kind '{profile['source']}'; latencies below are simulated)",
        # a trace replay has its own timestamps and no single rate
        f"arrivals {rate['source']}" if rate["value"] is None
        else f"arrivals {rate['value']:.4g} req/s ({rate['source']})",
        f"requests {counts['arrived']} arrived, {counts['completed']} completed, {counts['rejected']} rejected",
    ]
    if report.get("strategies") is not None:
        lines.append(f"paths    {one_line(report['strategies'])}")
    if report.get("loop_reason"):
        lines.append(f"loop     {report.get('loop')}: {report['loop_reason']}")
    for reason, n in sorted(report.get("reject_reasons", {}).items()):
        lines.append(f"         rejected {n}: {reason}")
    overload = report.get("overload")
    if overload:  # the waiting queue grew without bound (tripath/simulator/tally.py)
        growth, peak = overload["queue_growth_per_arrival"]["mean"], overload["peak_waiting"]["mean"]
        lines.append(f"OVERLOADED in {overload['overloaded_replications']} of {report['replications']} replication(s): "
                     f"the waiting queue grew by {growth:.0%} of the arrivals over the second half (peak "
                     f"{peak:,.0f} waiting): the queue grows without bound and the latencies with the run's length")
    lines.append("")
    header = f"{'latency, ms (mean [95% CI] over replications)':<34}" + "".join(f"{lvl:>24}" for lvl in _LEVELS)
    lines.append(header)
    for metric, name in _METRIC_NAMES.items():
        row = report["latency_ms"].get(metric)
        if row is None:
            continue
        cells = "".join(f"{_ms(row[lvl]['mean']) + _ci(row[lvl]):>24}" for lvl in _LEVELS)
        lines.append(f"{name:<34}{cells}")
    sla = report["sla"]
    targets = {k: v for k, v in sla["targets_ms"].items() if v is not None}
    if targets:
        lines.append("")
        lines.append("SLA (P99 targets)                 target       simulated P99   met   requests within target")
        for term, target in targets.items():
            p99 = report["latency_ms"][term]["p99"]["mean"]
            met = sla["p99_meets_target"][term]
            verdict = "-" if met is None else ("yes" if met else "NO")
            lines.append(f"  {_METRIC_NAMES[term]:<32}{_ms(target):>8}   {_ms(p99):>13}   {verdict:>3}   "
                         f"{_pct(sla['attainment'].get(term))}")
        lines.append(f"  {'all terms':<32}{'':>8}   {'':>13}   {'':>3}   {_pct(sla['attainment'].get('all'))}")
    thr = report["throughput"]
    lines.append("")
    lines.append("throughput " + ", ".join(f"{k} {v['mean']:.4g}" for k, v in thr.items() if v["mean"] is not None))
    util = [u["mean"] for u in report["utilisation"] if u["mean"] is not None]
    if util:
        lines.append(f"utilisation (busy fraction per replica) mean {sum(util) / len(util):.1%}")
    paths = report.get("per_request_paths") or {}
    shown = [(k, v["mean"]) for k, v in paths.items() if isinstance(v, dict) and v.get("mean")]
    if shown:
        lines.append("per request, mean (simulated): " + ", ".join(f"{k} {v:.4g}" for k, v in shown))
    series = report.get("timeseries")
    if series:
        lines.append(f"time series: {series['samples']} samples every {series['interval_s']:g} s -> {series['file']}")
    ext = report["extrapolations"]
    if ext.get("fraction_outside_domain"):
        lines.append(f"note: {ext['fraction_outside_domain']:.1%} of cost-model queries fell outside the "
                     "profile's measured domain (extrapolated)")
    if ext.get("sp_fraction_outside_domain"):
        lines.append(f"note: {ext['sp_fraction_outside_domain']:.1%} of sequence-parallel prefill chunks fell "
                     "outside the profile's SP rows or merge fit (extrapolated: end rows held)")
    return "\n".join(lines)
