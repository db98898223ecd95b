"""The per-iteration loop on chunked prefill with fast-forward off and on, measured in one run, records compared.

    .venv/bin/python benchmarks/bench_chunked.py [--requests 1000] [--gpus 24] [--repeats 3]

The default scenario (data/scenarios/default.toml: Llama-3.1-70B TP4 on A100, measured kernel tables, Mooncake
conversation lengths, Poisson 0.5 req/s) with ``batching.policy = "chunked"`` and ``cluster.gpus`` 24 (6
replicas): the workload the planner simulates per probe. Both sides serve the same requests (seed 0) on the
same converted costs; only StepperConfig.fast_forward differs (tripath/simulator/loop/stepper.py). Times are
this thread's CPU time (time.thread_time: other jobs on the shared cores disturb it less than wall time), the
best of ``--repeats`` alternating runs, for the simulation alone (the workload is drawn and the costs converted
once, before timing). Each side's records and replica stats are hashed with floats as hex, so "identical" means
bit for bit.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import time
import tomllib

import numpy as np

from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.core.records import RunResult
from tripath.planning.scenario_dict import with_fields
from tripath.profile.profile import resolve_profile
from tripath.simulator.loop.cluster import Cluster, ClusterConfig
from tripath.simulator.loop.stepper import Stepper, StepperSetup
from tripath.simulator.loop.stepper_setup import stepper_setup
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.runner import arrival_rate, cluster_config
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.workload import generate_requests


def _digest(result: RunResult) -> str:
    digest = hashlib.sha256()
    for row in (*result.records, *result.replicas):
        digest.update(repr(tuple(v.hex() if isinstance(v, float) else v
                                 for v in dataclasses.astuple(row))).encode())
    return digest.hexdigest()[:16]


def _case(requests: int, gpus: int) -> tuple[list, ClusterConfig, RunCosts, StepperSetup]:
    """The default scenario on chunked prefill: its requests, cluster, converted costs and loop setup."""
    with open(SCENARIOS_DIR / "default.toml", "rb") as fh:
        data = with_fields(tomllib.load(fh), {"batching.policy": "chunked", "workload.requests": requests,
                                              "cluster.gpus": gpus})
    scenario = scenario_from_dict(data, "default.toml")
    profile = resolve_profile(scenario.profile)
    config, _ = cluster_config(scenario, profile)
    costs = RunCosts.for_scenario(scenario, profile)
    rate, _, _ = arrival_rate(scenario, profile, config, costs)
    child = np.random.SeedSequence(0).spawn(1)[0]
    specs = generate_requests(scenario.workload, np.random.default_rng(child), rate, closed_loop=True)
    setup = stepper_setup(scenario, costs, config.replicas, child)
    assert setup is not None, "chunked prefill runs on the per-iteration loop"
    return specs, config, costs, setup


def _timed(specs: list, config: ClusterConfig, costs: RunCosts, setup: StepperSetup,
           forward: bool) -> tuple[float, RunResult, list[Stepper]]:
    setup = dataclasses.replace(setup, config=dataclasses.replace(setup.config, fast_forward=forward))
    gc.collect()
    gc.disable()
    cpu = time.thread_time()
    cluster = Cluster(specs, config, costs.cost.fresh(), setup=setup)
    result = cluster.run()
    cpu = time.thread_time() - cpu
    gc.enable()
    return cpu, result, list(cluster.replicas)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    specs, config, costs, setup = _case(args.requests, args.gpus)
    times: dict[bool, list[float]] = {False: [], True: []}
    digests: dict[bool, set[str]] = {False: set(), True: set()}
    steppers: list[Stepper] = []
    for _ in range(args.repeats):
        for forward in (False, True):
            cpu, result, steppers = _timed(specs, config, costs, setup, forward)
            times[forward].append(cpu)
            digests[forward].add(_digest(result))
    iterations = sum(s.iterations for s in steppers)
    forwarded = sum(s.forwarded for s in steppers)
    runs = sum(s.forward_runs for s in steppers)
    off, on = min(times[False]), min(times[True])
    same = digests[False] == digests[True] and len(digests[True]) == 1
    print(f"default scenario, chunked prefill: {args.requests:,} requests on {config.replicas} replicas "
          f"({args.gpus} GPUs), {iterations:,} iterations; best thread CPU of {args.repeats} alternating runs")
    print(f"  fast-forward off {off:7.3f} s ({1e6 * off / iterations:5.1f} us/iteration)")
    print(f"  fast-forward on  {on:7.3f} s ({1e6 * on / iterations:5.1f} us/iteration): "
          f"{forwarded / iterations:.1%} of iterations in {runs:,} runs of {forwarded / max(runs, 1):.1f} on average")
    print(f"  off / on = {off / on:.1f}x; records and replica stats bit-identical: {same}")


if __name__ == "__main__":
    main()
