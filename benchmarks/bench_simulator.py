"""Simulator speed: 10,000 and 100,000 requests with Azure LLM 2023 conversation lengths.

Workload: Poisson arrivals at a fraction of the replica's saturation (tripath/simulator/capacity.py),
prompt and output lengths bootstrapped from the shipped Azure conversation trace (measured,
19,366 requests), continuous batching on the seed profile (seed-llama2-70b-a100, 1 GPU).
Runs the fast path and the one-event-per-iteration reference on the same requests, checks that
their records are bit-identical, and prints wall time, simulated requests/s, events/s, peak
Python memory (tracemalloc, a separate pass, since tracing slows the run) and the speed ratio.

    .venv/bin/python benchmarks/bench_simulator.py [--sizes 10000 100000] [--load 0.8] [--no-reference]
        [--stepper] [--stream 1000000] [--paths 100000]

--stepper adds the general per-iteration loop (tripath/simulator/loop/stepper.py: one event per iteration)
on the same requests, continuous (records checked bit-identical to the fast path) and chunked,
against SimPy's bare rate (a process yielding env.timeout(1)) measured in the same run; times
are wall and this thread's CPU time (time.thread_time: less disturbed by other processes).

--paths N runs N requests with speculative decoding (K 4), the tiered KV cache (device, host,
SSD) and int8 KV compression on, on the calibrated CPU profile (cpu-tiny: the shipped profile
that measured all three paths), Azure conversation lengths, Poisson arrivals at --load x the
path-aware saturation estimate (tripath/simulator/paths/capacity.py), through the per-iteration loop.
It reports wall and thread CPU time, events/s and the ratio to SimPy's bare rate measured in the
same run, and checks that a second run with the same seed gives the same records bit for bit.

--stream N runs N baseline requests through tripath/simulator/loop/streaming.py (workload as arrays, records
written to a CSV as requests finish, ledger of requests in flight) and reports time, events/s
and the growth of the process's peak RSS during the run (getrusage), which stays flat in N.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time
import tracemalloc

import numpy as np

from tripath.core.records import RunResult
from tripath.core.request import RequestSpec
from tripath.profile.profile import resolve_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
from tripath.simulator.runner import arrival_rate, cluster_config
from tripath.simulator.scenario.scenario import load_scenario
from tripath.simulator.scenario.workload import generate_requests


def timed(requests: list[RequestSpec], config: ClusterConfig, profile: object, fast: bool,
          repeats: int) -> tuple[float, RunResult]:
    """Best wall time of ``repeats`` runs (garbage collector paused while timing, as timeit does)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        start = time.perf_counter()
        result = simulate_requests(requests, config, IterationCost.from_profile(profile), fast=fast)
        best = min(best, time.perf_counter() - start)
        gc.enable()
    assert result is not None
    return best, result


def peak_memory_mib(requests: list[RequestSpec], config: ClusterConfig, profile: object, fast: bool) -> float:
    gc.collect()
    tracemalloc.start()
    simulate_requests(requests, config, IterationCost.from_profile(profile), fast=fast)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def simpy_bare_rate(n: int = 1_000_000) -> tuple[float, float]:
    """(events/s wall, events/s thread CPU) of a bare SimPy process yielding env.timeout(1) n times."""
    import simpy

    env = simpy.Environment()

    def ticker() -> object:
        for _ in range(n):
            yield env.timeout(1)

    env.process(ticker())
    gc.collect()
    wall, cpu = time.perf_counter(), time.thread_time()
    env.run()
    return n / (time.perf_counter() - wall), n / (time.thread_time() - cpu)


def stepper_run(requests: list[RequestSpec], config: ClusterConfig, profile: object,
                policy: str) -> tuple[float, float, RunResult]:
    """(wall s, thread CPU s, result) of the per-iteration loop with this policy and the baseline physics."""
    from tripath.simulator.loop.batching import Chunked, Continuous
    from tripath.simulator.loop.stepper import StepperSetup
    from tripath.simulator.step_model import BaselineStep

    replica = config.replica

    def policy_for(i: int) -> object:
        if policy == "chunked":
            return Chunked(replica.max_batch_size, replica.max_batched_tokens)
        return Continuous(replica.max_batch_size, replica.max_batched_tokens)

    setup = StepperSetup(lambda i: BaselineStep(IterationCost.from_profile(profile), replica.kv_bytes_per_token,
                                                replica.kv_capacity_bytes), policy_for)
    gc.collect()
    gc.disable()
    wall, cpu = time.perf_counter(), time.thread_time()
    result = simulate_requests(requests, config, IterationCost.from_profile(profile), setup=setup)
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    gc.enable()
    return wall, cpu, result


def streamed(n: int, load: float, seed: int) -> None:
    """N baseline requests streamed to a temp CSV: time, events/s, peak RSS growth, requests held at once."""
    import resource
    import tempfile
    from pathlib import Path

    from tripath.simulator.loop.streaming import RequestArrays, stream_requests
    from tripath.simulator.scenario.workload import generate_arrays

    profile = resolve_profile("seed-llama2-70b-a100")
    base = load_scenario("quickstart")
    arrival = dataclasses.replace(base.workload.arrival, rate_per_s=None, load_fraction=load)
    scenario = dataclasses.replace(base, workload=dataclasses.replace(base.workload, arrival=arrival, requests=n))
    config, _ = cluster_config(scenario, profile)
    rate, _, _ = arrival_rate(scenario, profile, config)
    arrays = RequestArrays(*generate_arrays(scenario.workload, np.random.default_rng(seed), rate))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "records.csv"
        gc.collect()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        wall, cpu = time.perf_counter(), time.thread_time()
        result = stream_requests(arrays, config, IterationCost.from_profile(profile), path)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
        size = path.stat().st_size / 2**20
    print(f"\nstreamed baseline, {n:,} requests (Azure conversation lengths, {load} x saturation, seed profile):")
    print(f"  {wall:8.1f} s wall {cpu:8.1f} s CPU  {n / cpu:10,.0f} requests/s CPU  {result.events / cpu:10,.0f} "
          f"events/s CPU  ({result.events:,} events, {result.iterations:,} iterations)")
    arrays_mib = arrays.arrival_s.nbytes * 4 / 2**20
    print(f"  records.csv {size:,.0f} MiB; peak RSS grew {growth:,.1f} MiB during the run; at most "
          f"{result.peak_in_flight:,} requests held at once; workload arrays {arrays_mib:.0f} MiB")


PATHS = {"speculative": {"k": 4}, "tiered": {"chunk_tokens": 256}, "compression": {"mode": "int8"}}


def paths_run(n: int, load: float, seed: int, bare_cpu: float) -> None:
    """N requests with speculative + tiered + compression through the per-iteration loop, timed."""
    import tomllib

    from tripath.core.data_dirs import SCENARIOS_DIR
    from tripath.simulator.loop.stepper_setup import stepper_setup
    from tripath.simulator.paths.run_costs import RunCosts
    from tripath.simulator.scenario.scenario import scenario_from_dict

    with open(SCENARIOS_DIR / "quickstart.toml", "rb") as fh:
        data = tomllib.load(fh)
    data.update(profile="cpu-tiny", strategy=PATHS)
    data["workload"].update(requests=n, arrival={"kind": "poisson", "load_fraction": load})
    scenario = scenario_from_dict(data)
    profile = resolve_profile("cpu-tiny")
    config, _ = cluster_config(scenario, profile)
    rate, _, sat = arrival_rate(scenario, profile, config)
    assert rate is not None and sat is not None
    requests = generate_requests(scenario.workload, np.random.default_rng(seed), rate)
    results, times = [], []
    for _ in range(2):  # the second run checks determinism (same seed, same records)
        setup = stepper_setup(scenario, RunCosts.for_scenario(scenario, profile), config.replicas,
                              np.random.SeedSequence(seed))
        gc.collect()
        gc.disable()
        wall, cpu = time.perf_counter(), time.thread_time()
        results.append(simulate_requests(requests, config, IterationCost.from_profile(profile), setup=setup))
        times.append((time.perf_counter() - wall, time.thread_time() - cpu))
        gc.enable()
    result = results[0]
    wall, cpu = min(t[0] for t in times), min(t[1] for t in times)
    done = [r for r in result.records if r.completed]
    rounds = sum(r.draft_rounds for r in done)
    accepted = sum(r.accepted_tokens for r in done)
    tokens = sum(r.output_tokens for r in done)
    print(f"\npaths: {n:,} requests with {PATHS} on {profile.key_str()} (source {profile.source}), "
          f"Poisson at {load} x path-aware saturation ({sat.requests_per_s:.3f}/s, batch {sat.batch})")
    print(f"  {wall:8.2f} s wall {cpu:8.2f} s CPU (best of 2)  {n / cpu:10,.0f} requests/s CPU  "
          f"{result.events / cpu:10,.0f} events/s CPU  ({result.events:,} events, {result.iterations:,} iterations, "
          f"{1e6 * cpu / max(result.iterations, 1):.1f} us CPU per iteration, "
          f"{tokens / max(result.iterations, 1):.1f} output tokens per iteration)")
    if bare_cpu:
        print(f"  = {result.events / cpu / bare_cpu:.3f} x SimPy's bare event rate (CPU, this run)")
    stall = float(np.mean([r.paging_s for r in done]))
    print(f"  {len(done):,} completed, {len(result.records) - len(done):,} rejected; accepted draft tokens per "
          f"round {accepted / max(rounds, 1):.3f}; paging stall per request {stall:.4g} s; "
          f"second run bit-identical: {bits(results[1]) == bits(result)}")


def bits(result: RunResult) -> list[tuple]:
    """Records as tuples with floats in hex: equal only if bit-identical (NaN included)."""
    return [tuple(v.hex() if isinstance(v, float) else v for v in dataclasses.astuple(r))
            for r in result.records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000], help="baseline sizes (none: skip)")
    parser.add_argument("--load", type=float, default=0.8, help="fraction of the saturation estimate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-reference", action="store_true", help="time the fast path only")
    parser.add_argument("--stepper", action="store_true",
                        help="also time the per-iteration loop (continuous and chunked) against SimPy's bare rate")
    parser.add_argument("--stream", type=int, default=0, metavar="N",
                        help="also stream N baseline requests' records to disk (flat memory); e.g. 1000000")
    parser.add_argument("--paths", type=int, default=0, metavar="N",
                        help="also run N requests with speculative + tiered + compression on; e.g. 100000")
    args = parser.parse_args()
    if args.stream:
        streamed(args.stream, args.load, args.seed)
    bare_wall, bare_cpu = simpy_bare_rate() if args.stepper or args.paths else (0.0, 0.0)
    if args.stepper or args.paths:
        print(f"SimPy bare timeout rate (this run): {bare_wall:,.0f} events/s wall, {bare_cpu:,.0f} events/s CPU")
    if args.paths:
        paths_run(args.paths, args.load, args.seed, bare_cpu)

    profile = resolve_profile("seed-llama2-70b-a100")
    base = load_scenario("quickstart")  # Azure conversation lengths (empirical), 1 GPU, continuous batching
    arrival = dataclasses.replace(base.workload.arrival, rate_per_s=None, load_fraction=args.load)
    batching = base.batching
    print(f"profile {profile.key_str()} (source: {profile.source}); lengths: Azure LLM 2023 conversation "
          f"trace (measured); Poisson arrivals at {args.load} x saturation estimate; batching "
          f"max_batch_size={batching.max_batch_size}, max_batched_tokens={batching.max_batched_tokens}")
    for n in args.sizes:
        scenario = dataclasses.replace(base, workload=dataclasses.replace(base.workload, arrival=arrival,
                                                                          requests=n))
        config, _ = cluster_config(scenario, profile)
        rate, _, _ = arrival_rate(scenario, profile, config)
        start = time.perf_counter()
        requests = generate_requests(scenario.workload, np.random.default_rng(args.seed), rate)
        generate_s = time.perf_counter() - start
        fast_s, fast = timed(requests, config, profile, True, repeats=3 if n <= 20_000 else 1)
        print(f"\n{n:,} requests (rate {rate:.4f}/s, {fast.iterations:,} iterations, simulated "
              f"{max(r.finish_s for r in fast.records if r.status == 'completed'):,.0f} s; "
              f"workload generation {generate_s:.3f} s)")
        print(f"  fast      {fast_s:8.3f} s  {n / fast_s:12,.0f} requests/s  "
              f"{fast.events / fast_s:12,.0f} events/s  ({fast.events:,} events)  "
              f"peak {peak_memory_mib(requests, config, profile, True):6.1f} MiB")
        if args.stepper:
            for policy in ("continuous", "chunked"):
                wall, cpu, stepped = stepper_run(requests, config, profile, policy)
                same = f"; records bit-identical to fast: {bits(stepped) == bits(fast)}" * (policy == "continuous")
                print(f"  stepper {policy:<10} {wall:8.3f} s wall {cpu:8.3f} s CPU  "
                      f"{stepped.events / cpu:12,.0f} events/s CPU  ({stepped.events:,} events)  "
                      f"= {stepped.events / cpu / bare_cpu:.2f} x SimPy bare; "
                      f"{wall / fast_s:.0f}x the fast path's wall time"
                      f"{same}")
        if args.no_reference:
            continue
        ref_s, ref = timed(requests, config, profile, False, repeats=1)
        # tracemalloc slows the reference's millions of events several-fold: memory for small runs only
        peak = f"peak {peak_memory_mib(requests, config, profile, False):6.1f} MiB" if n <= 20_000 else ""
        print(f"  reference {ref_s:8.3f} s  {n / ref_s:12,.0f} requests/s  "
              f"{ref.events / ref_s:12,.0f} events/s  ({ref.events:,} events)  {peak}")
        same = bits(fast) == bits(ref)
        print(f"  reference / fast = {ref_s / fast_s:.1f}x; records bit-identical: {same}")
        if not same:
            raise SystemExit("fast path and reference differ")


if __name__ == "__main__":
    main()
