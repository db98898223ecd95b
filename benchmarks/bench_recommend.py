"""The capacity search (`tripath plan`, the matrix) cold: the previous schedule against today's, in one run, on the
same scenario (`tripath recommend` always runs today's, on every layout, with its decision rule: docs/planning.md).

previous: every candidate's replica search from 1 replica (1, 2, 4, ... then bisection), submitted in the
candidates' order. today's (the default): each search simulates the bound (--max-replicas) first and stops there
on a miss, the searches are submitted largest estimated cost first (tripath/planning/capacity.py). Both run on the
same process pool (--workers, default every core), so the ratio is what the search and its order save. Every run
is cold: a fresh temporary cache directory.

It checks that the two plans are the same (to_dict, but for each search's trace) and prints per run the wall time,
the CPU time of this process and its pool workers, the number of simulations (cache entries written) and the
ratio of the best wall times.

    .venv/bin/python benchmarks/bench_recommend.py [SCENARIO] [--workers N] [--repeats R] [--requests N]
        [--max-replicas N] [--qps Q] [--profile P]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tripath.planning.cache import ResultCache
from tripath.planning.capacity import plan
from tripath.planning.executor import LocalPoolExecutor
from tripath.planning.recommend import scenario_qps
from tripath.planning.scenario_dict import load_scenario_dict, with_requests
from tripath.profile.profile import resolve_profile

SCHEDULES = {"previous": {"bound_first": False, "longest_first": False},
             "today": {"bound_first": True, "longest_first": True}}


def cpu_s() -> float:
    """User + system CPU seconds of this process and its waited-for children (the pool's workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def cold_run(data: dict[str, Any], source: str, profile: Any, qps: float, workers: int, max_replicas: int,
             schedule: dict[str, bool]) -> tuple[float, float, int, str]:
    """(wall s, CPU s, simulations, canonical JSON of the recommendation) of one run on a fresh cache."""
    with tempfile.TemporaryDirectory(prefix="bench-recommend-") as folder:
        cache = ResultCache(folder)
        wall, cpu = time.perf_counter(), cpu_s()
        result = plan(data, source, profile, qps, gpu_price=2.0, replications=2, max_replicas=max_replicas,
                      executor=LocalPoolExecutor(workers), cache=cache, attainment_levels=(), **schedule)
        wall, cpu = time.perf_counter() - wall, cpu_s() - cpu
        runs = sum(1 for _ in Path(folder).rglob("*.json"))
        rows = [{k: v for k, v in row.items() if k != "search"} for row in result.to_dict()["candidates"]]
    return wall, cpu, runs, json.dumps(rows, sort_keys=True, allow_nan=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="default", help="scenario TOML path or shipped name")
    parser.add_argument("--workers", type=int, default=None, help="pool size (default: every core)")
    parser.add_argument("--repeats", type=int, default=1, help="cold runs per schedule, alternating (best kept)")
    parser.add_argument("--requests", type=int, default=None, help="override the scenario's request count")
    parser.add_argument("--max-replicas", type=int, default=8, help="replica search bound (recommend's default 8)")
    parser.add_argument("--qps", type=float, default=None, help="request rate (default: the scenario's rate_per_s)")
    parser.add_argument("--profile", default=None, help="profile name or path (default: the scenario's)")
    args = parser.parse_args()
    data, source = load_scenario_dict(args.scenario)
    if args.requests is not None:
        data = with_requests(data, args.requests)
    if (args.profile or data.get("profile")) is None:
        print(f"{source}: profile: the scenario names none: pass --profile", file=sys.stderr)
        return 2
    profile = resolve_profile(args.profile or data["profile"])
    qps = args.qps if args.qps is not None else scenario_qps(data)
    if qps is None:
        print(f"{source}: workload.arrival.rate_per_s: no request rate: pass --qps", file=sys.stderr)
        return 2
    workers = LocalPoolExecutor(args.workers).workers
    best: dict[str, float] = {}
    outputs: dict[str, str] = {}
    print(f"recommend {data.get('name', args.scenario)} at {qps:g} req/s, cold, {workers} worker(s)")
    for repeat in range(args.repeats):
        names = list(SCHEDULES) if repeat % 2 == 0 else list(SCHEDULES)[::-1]  # ABBA: no order favours one
        for name in names:
            schedule = SCHEDULES[name]
            wall, cpu, runs, text = cold_run(data, source, profile, qps, workers, args.max_replicas, schedule)
            print(f"  {name:<8} wall {wall:6.2f} s  CPU {cpu:6.2f} s  simulations {runs}")
            best[name] = min(best.get(name, float("inf")), wall)
            if outputs.setdefault(name, text) != text:
                print(f"{name}: two runs with the same seed gave different recommendations", file=sys.stderr)
                return 1
    if outputs["previous"] != outputs["today"]:
        print("the two schedules gave different recommendations", file=sys.stderr)
        return 1
    print(f"same recommendation; best wall previous/today: {best['previous'] / best['today']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
