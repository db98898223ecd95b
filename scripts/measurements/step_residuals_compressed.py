"""Per-step residuals of the compressed-KV engine: each served iteration's time against the simulator's price.

Serves a validation scenario's requests (tripath/fidelity/sim_side.py::requests_for, the engine the scenario
describes: tripath/fidelity/engine_side.py::engine_config) on the CPU-time clock (tripath.fidelity.engine_side.CpuClock:
arrivals replayed, idle gaps skipped), records every step's shape (per sequence: cached tokens, new
tokens) and its thread CPU time and wall time, and prices the same iteration with the simulator's step
model on the profile (tripath/simulator/paths/step.py: compression physics included). Steps are grouped by kind:

    decode      every sequence decodes one token
    fresh       prompt chunks with no cached context (plus decodes, if any)
    continued   at least one chunk continues a prompt (cached context > 0: chunked prefill)

Prints, per kind (and decode steps per batch size), steps, measured thread ms, simulated ms and
sim / measured (< 1: the simulator is optimistic). --plain serves the same scenario without
compression (the reference the compressed residuals are read against). Measurements on a shared
machine: thread CPU time is the primary clock; wall time is printed beside it.

    .venv/bin/python scripts/measurements/step_residuals_compressed.py --profile data/profiles/cpu-tiny.json \
        --scenario data/scenarios/validation/kv-int8.toml --requests 120 [--plain] [--csv /tmp/x.csv]
"""

from __future__ import annotations

import argparse
import csv
import time
import tomllib
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from tripath.core.atomic import AtomicFile
from tripath.engine.engine import Engine
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.workload_replay import PromptSource, serve
from tripath.fidelity.engine_side import CpuClock, engine_config
from tripath.fidelity.sim_side import requests_for
from tripath.profile.profile import load_profile
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import build_step_model
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.step_model import Decode, PrefillChunk


def instrument(engine: Engine) -> list[dict[str, Any]]:
    """Record each step's shape (from the scheduler's plan) and thread/wall time (around Engine.step)."""
    rows: list[dict[str, Any]] = []
    schedule, step = engine.scheduler.schedule, engine.step

    def schedule_recorded() -> Any:
        plan = schedule()
        rows.append({"shape": [(ch.seq.num_computed, ch.num_new, bool(ch.seq.is_decode)) for ch in plan.chunks]})
        return plan

    def step_timed() -> Any:
        t0, w0 = time.thread_time(), time.perf_counter()
        rec = step()
        rows[-1]["cpu_ms"] = (time.thread_time() - t0) * 1e3
        rows[-1]["wall_ms"] = (time.perf_counter() - w0) * 1e3
        return rec

    engine.scheduler.schedule = schedule_recorded  # type: ignore[method-assign]
    engine.step = step_timed  # type: ignore[method-assign]
    return rows


def kind(shape: list[tuple[int, int, bool]]) -> str:
    if all(dec for _, _, dec in shape):
        return "decode"
    return "continued" if any(c > 0 and not dec for c, _, dec in shape) else "fresh"


def price(model: Any, shape: list[tuple[int, int, bool]]) -> float:
    """The simulator's ms for one iteration of this shape."""
    prefills = [PrefillChunk(i, 0, n, c, True) for i, (c, n, dec) in enumerate(shape) if not dec]
    decodes = [Decode(i, 0, c, 1) for i, (c, n, dec) in enumerate(shape) if dec]
    return model.step(prefills, decodes, 0).seconds * 1e3


def report(model: Any, rows: list[dict[str, Any]], path: str) -> list[list[Any]]:
    """Print sim / measured per kind of step on one profile; returns the per-step CSV rows."""
    groups: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    out = []
    for r in rows:
        sim = price(model, r["shape"])
        k = kind(r["shape"])
        groups[k].append((r["cpu_ms"], r["wall_ms"], sim))
        b = len(r["shape"])
        size = "1" if b == 1 else "2-4" if b <= 4 else "5-8" if b <= 8 else "9+"
        if k == "decode":
            groups[f"decode B={size}"].append((r["cpu_ms"], r["wall_ms"], sim))
        else:
            tokens = sum(n for _, n, d in r["shape"] if not d)
            span = "<=128" if tokens <= 128 else "<=256" if tokens <= 256 else "<=512" if tokens <= 512 else ">512"
            groups[f"{k} T{span}"].append((r["cpu_ms"], r["wall_ms"], sim))
        longest = max(c + n for c, n, _ in r["shape"])
        out.append([k, b, sum(n for _, n, d in r["shape"] if not d), sum(c for c, _, d in r["shape"] if not d),
                    longest, f"{r['cpu_ms']:.3f}", f"{r['wall_ms']:.3f}", f"{sim:.3f}"])
    print(f"profile {path}")
    print(f"{'kind':<16}{'steps':>7}{'cpu ms':>10}{'wall ms':>10}{'sim ms':>10}{'sim/cpu':>9}{'sim/wall':>9}")
    for k in sorted(groups):
        a = np.array(groups[k])
        c, w, s = a.sum(0)
        print(f"{k:<16}{len(a):>7}{c / len(a):>10.3f}{w / len(a):>10.3f}{s / len(a):>10.3f}{s / c:>9.3f}{s / w:>9.3f}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", default="data/profiles/cpu-tiny.json")
    p.add_argument("--scenario", default="data/scenarios/validation/kv-int8.toml")
    p.add_argument("--target", default="data/models/tiny-target")
    p.add_argument("--requests", type=int, default=0, help="first N requests only (0: all)")
    p.add_argument("--plain", action="store_true", help="serve without compression (the reference)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", default=None, help="write per-step rows here")
    p.add_argument("--also", action="append", default=[], help="price the same steps on this profile too")
    args = p.parse_args()
    torch.set_num_threads(1)
    with open(args.scenario, "rb") as fh:
        data = tomllib.load(fh)
    if args.plain:
        data.get("strategy", {}).pop("compression", None)
    profile = load_profile(args.profile)
    requests, kv_tokens = requests_for(data, args.scenario, profile, args.seed)
    if args.requests:
        requests = requests[: args.requests]
    _, target = load_checkpoint(args.target, device="cpu")
    engine = Engine(target, engine_config(data, kv_tokens, target.config.num_layers),
                    torch.Generator().manual_seed(args.seed))
    rows = instrument(engine)
    cpu = CpuClock()
    serve(engine, requests, PromptSource(np.random.default_rng(args.seed + 1), target.config.vocab_size),
          clock=cpu, sleep=cpu.sleep)
    rows = [r for r in rows if "cpu_ms" in r][1:]  # the warm-up request's steps are few; drop the first
    scenario = scenario_from_dict(data, args.scenario)
    print(f"{'compressed' if not args.plain else 'plain'} engine, {len(requests)} requests, {len(rows)} steps")
    for path in [args.profile, *args.also]:
        prof = profile if path == args.profile else load_profile(path)
        model = build_step_model(RunCosts.for_scenario(scenario, prof), np.random.default_rng(0))
        out = report(model, rows, path)
    if args.csv:
        with AtomicFile(args.csv) as fh:
            wr = csv.writer(fh)
            wr.writerow(["kind", "batch", "prefill_tokens", "prefill_cached", "longest", "cpu_ms", "wall_ms",
                         "sim_ms"])
            wr.writerows(out)


if __name__ == "__main__":
    main()
