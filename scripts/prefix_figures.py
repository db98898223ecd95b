"""The prefix-caching figures of docs/prefix_caching.md: a Mooncake replay with and without the cache.

For each arrival pace (the trace's inter-arrival times x time_scale) it simulates the scenario with prefix
caching (affinity routing), with least-loaded routing, and without the cache, and prints hit rate, TTFT and
TPOT at P50/P99; then, per variant, its saturation throughput (the same rows arriving almost at once) and its
goodput (the highest request rate at which 90% of the requests meet every SLA term). Every run replays the same
trace rows with seed 0, so the figures are deterministic.

    PYTHONPATH=. python scripts/prefix_figures.py [--scenario mooncake-prefix-replay] [--profile NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np

from tripath.core import metrics
from tripath.core.prefix import chain_hashes, max_hit_blocks
from tripath.profile.profile import Profile, resolve_profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import Scenario, load_scenario
from tripath.simulator.scenario.strategy import TieredSpec
from tripath.simulator.scenario.workload import generate_with_prefixes
from tripath.simulator.summary import summary

VARIANTS = ("off", "affinity", "least_loaded", "affinity+tiered")


def _variant(scenario: Scenario, name: str, time_scale: float) -> Scenario:
    """The scenario without the cache ("off"), with it as written ("affinity"), with least-loaded routing, or
    with the tiered cache behind it (the profile's host memory and SSD keep evicted prefix blocks)."""
    strategy = scenario.strategy
    if name == "affinity+tiered":
        strategy = dataclasses.replace(strategy, tiered=TieredSpec())
    if name == "off":
        strategy = dataclasses.replace(strategy, prefix_cache=None)
    elif name == "least_loaded":
        strategy = dataclasses.replace(strategy, prefix_cache=dataclasses.replace(strategy.prefix_cache,
                                                                                  routing="least_loaded"))
    arrival = dataclasses.replace(scenario.workload.arrival, time_scale=time_scale)
    workload = dataclasses.replace(scenario.workload, arrival=arrival)
    return dataclasses.replace(scenario, workload=workload, strategy=strategy)


def figures(scenario: Scenario, profile: Profile, name: str, time_scale: float) -> dict:
    result = simulate(_variant(scenario, name, time_scale), profile, seed=0)
    report = summary(result)
    records = result.runs[0].records
    span = max(r.arrival_s for r in records)
    lat = report["latency_ms"]
    out = {"variant": name, "time_scale": time_scale, "rate_per_s": (len(records) - 1) / span,
           "ttft_p50_ms": lat["ttft"]["p50"]["mean"], "ttft_p99_ms": lat["ttft"]["p99"]["mean"],
           "tpot_p50_ms": lat["tpot"]["p50"]["mean"], "tpot_p99_ms": lat["tpot"]["p99"]["mean"],
           "meets_sla": all(v for v in report["sla"]["p99_meets_target"].values() if v is not None)}
    prefix = report.get("prefix_cache")
    if prefix is not None:
        out["hit_rate_tokens"] = prefix["hit_rate"]["tokens"]["mean"]
        out["hit_rate_blocks"] = prefix["hit_rate"]["blocks"]["mean"]
        out["prefill_tokens_saved"] = prefix["prefill_tokens_saved"]["mean"]
        out["ttft_p50_cached_ms"] = prefix["ttft_ms"]["cached"]["p50"]["mean"]
        out["ttft_p50_uncached_ms"] = prefix["ttft_ms"]["uncached"]["p50"]["mean"]
    return out


def capacity(scenario: Scenario, profile: Profile, name: str, time_scale: float) -> dict:
    """Saturation throughput: the trace's rows arriving time_scale x as fast (all queued almost at once), served
    to the end; completed requests per second of the run is the most the cluster sustains on this mix."""
    result = simulate(_variant(scenario, name, time_scale), profile, seed=0)
    report = summary(result)
    out = {"variant": name, "time_scale": time_scale,
           "throughput_rps": report["throughput"]["requests_per_s"]["mean"],
           "output_tokens_per_s": report["throughput"]["output_tokens_per_s"]["mean"]}
    if "prefix_cache" in report:
        out["hit_rate_tokens"] = report["prefix_cache"]["hit_rate"]["tokens"]["mean"]
    return out


def goodput(scenario: Scenario, profile: Profile, name: str, fast: float, slow: float, attainment: float,
            steps: int = 8) -> dict:
    """The fastest pace at which at least ``attainment`` of the requests meet every SLA term (the goodput of
    tripath/planning/capacity.py), by bisection on time_scale between ``fast`` (misses) and ``slow`` (meets)."""

    def attained(time_scale: float) -> tuple[float, float]:
        result = simulate(_variant(scenario, name, time_scale), profile, seed=0)
        records = result.runs[0].records
        sla = scenario.sla
        share = metrics.sla_attainment(records, sla.ttft_p99_ms, sla.tpot_p99_ms, sla.e2e_p99_ms)["all"]
        return share, (len(records) - 1) / max(r.arrival_s for r in records)

    lo, hi = fast, slow
    if attained(hi)[0] < attainment or attained(lo)[0] >= attainment:
        return {"variant": name, "error": f"time_scale bracket [{fast}, {slow}] does not straddle {attainment}"}
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        if attained(mid)[0] >= attainment:
            hi = mid
        else:
            lo = mid
    share, rate = attained(hi)
    return {"variant": name, "attainment": attainment, "time_scale": hi, "goodput_rps": rate, "attained": share}


def ideal_hit_rate(scenario: Scenario) -> float:
    """The token hit rate of one cache that never evicts, serving the rows in arrival order (an upper bound on
    what any replica count, routing or budget can hit on them)."""
    requests, prefixes = generate_with_prefixes(scenario.workload, np.random.default_rng(0), None,
                                                scenario.strategy.prefix_cache.block_tokens)
    block = prefixes.block_tokens
    seen: set[int] = set()
    hit = total = 0
    for request, keys in zip(requests, prefixes.keys, strict=True):
        hashes = chain_hashes(keys)
        n = 0
        for h in hashes[: max_hit_blocks(request.prompt_tokens, block)]:
            if h not in seen:
                break
            n += 1
        hit += n * block
        total += request.prompt_tokens
        seen.update(hashes)
    return hit / total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", default="mooncake-prefix-replay")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--scales", default="1,2,4,8", help="time_scale values of the table")
    parser.add_argument("--saturate", type=float, default=0.01, help="time_scale of the saturation run")
    parser.add_argument("--attainment", type=float, default=0.9, help="SLA attainment of the goodput search")
    args = parser.parse_args()
    scenario = load_scenario(args.scenario)
    profile = resolve_profile(args.profile or scenario.profile)
    rows = [figures(scenario, profile, name, float(s)) for s in args.scales.split(",") for name in VARIANTS]
    variants = VARIANTS
    caps = [capacity(scenario, profile, name, args.saturate) for name in variants]
    good = [goodput(scenario, profile, name, 1.0, 32.0, args.attainment) for name in variants]
    print(json.dumps({"scenario": scenario.name, "profile": profile.key_str(),
                      "ideal_hit_rate_tokens": ideal_hit_rate(scenario), "rows": rows, "saturation": caps,
                      "goodput": good}, indent=1))


if __name__ == "__main__":
    main()
