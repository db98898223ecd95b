"""The per-iteration loop's speed against an earlier commit's, measured in one run, records compared.

    .venv/bin/python benchmarks/bench_stepper.py [--against REV] [--requests 10000] [--repeats 3]

Extracts REV's tripath/ package (``git archive``, read-only on the repository; REV must have the same
simulator API, RunCosts) into a temp folder next to a link to data/, then times the same cases in fresh
subprocesses, alternating old and new ``--repeats`` times: the old side imports REV's simulator (PYTHONPATH
first on sys.path), the new side this working tree's. Each case draws the same requests (fixed rate, same
seed) and both sides print a SHA-256 of their records (floats as hex), so "identical" means bit for bit. Times
are the worker thread's CPU time (time.thread_time: other jobs on the shared cores disturb it less than wall
time), the best of the repeats; the ratio is old / new.

Cases: ``paths`` (speculative K 4 + tiered + int8 on cpu-tiny, Azure conversation lengths, Poisson
2 req/s, about 0.75 of its saturation) and ``continuous`` (the seed profile's baseline physics through
the loop, quickstart at 0.8 x saturation: A8's 11 us per iteration case, docs/batching.md).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_AGAINST = "829b5ff"  # the first commit whose loop takes the profile converted once (RunCosts)
PATHS = {"speculative": {"k": 4}, "tiered": {"chunk_tokens": 256}, "compression": {"mode": "int8"}}


def _records_digest(records: tuple) -> str:
    import dataclasses

    digest = hashlib.sha256()
    for r in records:
        digest.update(repr(tuple(v.hex() if isinstance(v, float) else v for v in dataclasses.astuple(r))).encode())
    return digest.hexdigest()[:16]


def worker(case: str, requests: int) -> dict:
    """Run one case in this process (old or new simulator, whichever is first on sys.path)."""
    import tomllib

    import numpy as np

    from tripath.core.data_dirs import SCENARIOS_DIR
    from tripath.profile.profile import resolve_profile
    from tripath.simulator.costs import IterationCost
    from tripath.simulator.loop.cluster import simulate_requests
    from tripath.simulator.runner import arrival_rate, cluster_config
    from tripath.simulator.scenario.scenario import scenario_from_dict
    from tripath.simulator.scenario.workload import generate_requests

    with open(SCENARIOS_DIR / "quickstart.toml", "rb") as fh:
        data = tomllib.load(fh)
    data["workload"]["requests"] = requests
    if case == "paths":
        data.update(profile="cpu-tiny", strategy=PATHS)
        data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 2.0}
    else:
        data["workload"]["arrival"] = {"kind": "poisson", "load_fraction": 0.8}
    scenario = scenario_from_dict(data)
    profile = resolve_profile(data["profile"])
    config, _ = cluster_config(scenario, profile)
    rate, _, _ = arrival_rate(scenario, profile, config)
    specs = generate_requests(scenario.workload, np.random.default_rng(0), rate)
    if case == "paths":
        from tripath.simulator.loop.stepper_setup import stepper_setup
        from tripath.simulator.paths.run_costs import RunCosts

        setup = stepper_setup(scenario, RunCosts.for_scenario(scenario, profile), config.replicas,
                              np.random.SeedSequence(0))
    else:
        from tripath.simulator.loop.batching import Continuous
        from tripath.simulator.loop.stepper import StepperSetup
        from tripath.simulator.step_model import BaselineStep

        r = config.replica
        setup = StepperSetup(lambda i: BaselineStep(IterationCost.from_profile(profile), r.kv_bytes_per_token,
                                                    r.kv_capacity_bytes),
                             lambda i: Continuous(r.max_batch_size, r.max_batched_tokens))
    gc.collect()
    gc.disable()
    wall, cpu = time.perf_counter(), time.thread_time()
    result = simulate_requests(specs, config, IterationCost.from_profile(profile), setup=setup)
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    gc.enable()
    import tripath.simulator as simulator
    from tripath.core.data_dirs import PROFILES_DIR

    inputs = hashlib.sha256((PROFILES_DIR / f"{data['profile']}.json").read_bytes()).hexdigest()[:16]
    return {"cpu_s": cpu, "wall_s": wall, "events": result.events, "iterations": result.iterations,
            "digest": _records_digest(result.records), "simulator": str(Path(simulator.__file__).parent),
            "profile_sha": inputs}


def _extract(rev: str, into: Path) -> None:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "tripath"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "data").symlink_to(REPO / "data")  # tripath/core/data_dirs.py finds data/ next to the package


def _run(case: str, requests: int, pythonpath: str | None) -> dict:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    else:
        env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, __file__, "--worker", case, "--requests", str(requests)], check=True,
                         capture_output=True, text=True, env=env, cwd=REPO).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default=DEFAULT_AGAINST, help="the commit to compare with")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=["paths", "continuous"], choices=["paths", "continuous"])
    parser.add_argument("--worker", choices=["paths", "continuous"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.requests)))
        return
    with tempfile.TemporaryDirectory() as folder:
        _extract(args.against, Path(folder))
        print(f"old: {args.against} (git archive), new: this working tree; {args.requests:,} requests per case, "
              f"best thread CPU of {args.repeats} alternating runs")
        for case in args.cases:
            old, new = [], []
            for _ in range(args.repeats):
                old.append(_run(case, args.requests, folder))
                new.append(_run(case, args.requests, None))
            assert all(o["simulator"].startswith(folder) for o in old), "the old side imported the new simulator"
            o_cpu, n_cpu = min(o["cpu_s"] for o in old), min(n["cpu_s"] for n in new)
            its = new[0]["iterations"]
            same = {o["digest"] for o in old} == {n["digest"] for n in new} and len({n["digest"] for n in new}) == 1
            if len({r["profile_sha"] for r in old + new}) > 1:
                print(f"  {case}: the profile file changed during the run (another job rewrote it): rerun")
            if not same:
                print(f"  {case}: old digests {[o['digest'] for o in old]}, new {[n['digest'] for n in new]}")
            print(f"  {case:<10} {its:,} iterations: old {o_cpu:7.2f} s CPU ({1e6 * o_cpu / its:6.1f} us/iteration), "
                  f"new {n_cpu:7.2f} s CPU ({1e6 * n_cpu / its:6.1f} us/iteration), old / new = {o_cpu / n_cpu:.2f}x; "
                  f"records bit-identical: {same}")


if __name__ == "__main__":
    main()
