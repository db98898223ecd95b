"""Per-step residuals of the plain engine: which served iterations the profile underprices, and by how much.

Serves a validation scenario's requests (the list tripath.fidelity.sim_side.requests_for draws, the engine
tripath.fidelity.engine_side.build_engine builds) on the real Engine with one torch thread, and for every step
records its shape (StepRecord.chunk_shapes: cached and new tokens per sequence), its thread CPU time
and wall time, and the price the simulator gives that same iteration on the profile (BaselineStep.step,
the simulator's own pricing code, called with the step's decodes and prefill chunks). Then, per step
kind (decode-only by batch band, prefill-only, mixed prefill + decode): median and mean of
measured / priced on both clocks, the summed ratio, and the kind's share of the busy time.

Numbers: measured on this machine now (thread_time and perf_counter around Engine.step); priced from
the profile named (its fitted coefficients). Run on a shared machine the wall clock carries contention;
the thread clock does not (the profile was calibrated with it).

    .venv/bin/python scripts/measurements/step_residuals.py baseline-light --requests 60 [--json] [--steps-csv F]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tripath.core.atomic import AtomicFile
from tripath.core.errors import InputError
from tripath.simulator.costs import IterationCost
from tripath.simulator.step_model import BaselineStep, DecodeBatch, PrefillChunk

BANDS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 32), (33, 1 << 30))


@dataclass(frozen=True)
class StepRow:
    """One served step: its shape, both clocks, and the simulator's price."""

    kind: str  # decode B=lo-hi / prefill / mixed
    decodes: int
    prefill_chunks: int
    new_tokens: int
    longest: int  # the batch's longest decode context (cached + 1), 0 without decodes
    thread_s: float
    wall_s: float
    priced_s: float
    overhead_s: float  # of priced_s: the profile's step_overhead part
    # --replay: the same shape's forward on the calibration probe (thread s); nan when not replayed
    probe_seq_s: float = float("nan")  # its first run after the previous step's shape (serving-like order)
    probe_rep_s: float = float("nan")  # as the sweeps time it: after warm-up, the median of repeats of one shape


def kind_of(decodes: int, prefills: int) -> str:
    if prefills and decodes:
        return "mixed"
    if prefills:
        return "prefill"
    lo, hi = next(b for b in BANDS if b[0] <= decodes <= b[1])
    return f"decode B={lo}" if lo == hi else f"decode B={lo}-{hi}"


def split_shape(shapes: tuple[tuple[int, int], ...]) -> tuple[list[int], list[tuple[int, int]]]:
    """(decode contexts, prefill chunks (new, cached)). One-token chunks are the engine's decodes (its
    attention batches them); a decode attends to its cached tokens + the new one, the simulator's context
    (prompt + tokens emitted so far)."""
    contexts = [cached + 1 for cached, new in shapes if new == 1]
    chunks = [(new, cached) for cached, new in shapes if new != 1]
    return contexts, chunks


def price(model: BaselineStep, shapes: tuple[tuple[int, int], ...]) -> tuple[float, float]:
    """(seconds, of which step overhead) the simulator charges for this iteration (BaselineStep.step)."""
    contexts, chunks = split_shape(shapes)
    n = len(contexts)
    batch = DecodeBatch(list(range(n)), [0] * n, contexts, [1] * n, sum(contexts))
    prefills = [PrefillChunk(n + i, 0, new, cached, True) for i, (new, cached) in enumerate(chunks)]
    seconds = model.step(prefills, batch, sum(contexts) + sum(new + c for new, c in chunks)).seconds
    overhead = model.cost.overhead_ms(n + len(chunks), n + sum(new for new, _ in chunks)) / 1000.0
    return seconds, overhead


def row_for(model: BaselineStep, shapes: tuple[tuple[int, int], ...], thread_s: float, wall_s: float) -> StepRow:
    contexts, chunks = split_shape(shapes)
    priced, overhead = price(model, shapes)
    return StepRow(kind_of(len(contexts), len(chunks)), len(contexts), len(chunks),
                   len(contexts) + sum(new for new, _ in chunks), max(contexts, default=0),
                   thread_s, wall_s, priced, overhead)


def summarize(rows: list[StepRow]) -> dict[str, dict[str, float]]:
    """Per kind: steps, median / mean / summed measured-over-priced on both clocks, share of busy wall time."""
    busy = sum(r.wall_s for r in rows) or 1.0
    out: dict[str, dict[str, float]] = {}
    order = [kind_of(b[0], 0) for b in BANDS] + ["prefill", "mixed"]
    for kind in order:
        sel = [r for r in rows if r.kind == kind]
        if not sel:
            continue
        thr = np.array([r.thread_s / r.priced_s for r in sel])
        wal = np.array([r.wall_s / r.priced_s for r in sel])
        priced = sum(r.priced_s for r in sel)
        out[kind] = {"steps": len(sel), "thread_median": float(np.median(thr)), "thread_mean": float(thr.mean()),
                     "thread_sum_ratio": sum(r.thread_s for r in sel) / priced,
                     "wall_median": float(np.median(wal)), "wall_mean": float(wal.mean()),
                     "wall_sum_ratio": sum(r.wall_s for r in sel) / priced,
                     "busy_share": sum(r.wall_s for r in sel) / busy,
                     "mean_priced_ms": priced / len(sel) * 1000.0}
        if not np.isnan(sel[0].probe_rep_s):  # forward only: the served step minus the priced overhead
            fwd = sum(r.thread_s - r.overhead_s for r in sel)
            out[kind].update(probe_rep_over_priced=sum(r.probe_rep_s for r in sel) / (priced - sum(
                r.overhead_s for r in sel)), probe_seq_over_rep=sum(r.probe_seq_s for r in sel) / sum(
                r.probe_rep_s for r in sel), served_fwd_over_probe_seq=fwd / sum(r.probe_seq_s for r in sel))
    priced = sum(r.priced_s for r in rows)
    out["all"] = {"steps": len(rows), "thread_sum_ratio": sum(r.thread_s for r in rows) / priced,
                  "wall_sum_ratio": sum(r.wall_s for r in rows) / priced, "busy_share": 1.0,
                  "core_share": sum(r.thread_s for r in rows) / busy}
    return out


def serve_steps(data: dict[str, Any], source: str, profile: Any, target: Any, seed: int,
                requests: int | None) -> tuple[list[tuple[Any, float, float]], float]:
    """Serve the scenario on the plain engine: ((StepRecord, thread s, wall s) per timed step, thread s of
    the serving loop outside Engine.step: arrivals, prompts, booking; the simulator has no such cost)."""
    from tripath.engine.batching_policy import Windowed
    from tripath.engine.workload_replay import PromptSource, serve
    from tripath.fidelity.engine_side import build_engine
    from tripath.fidelity.sim_side import requests_for

    if data.get("strategy"):
        raise InputError(source, "strategy", "step residuals price the plain engine only (BaselineStep)")
    specs, kv_tokens = requests_for(data, source, profile, seed)
    specs = specs[:requests] if requests else specs
    engine, _ = build_engine(data, target, None, kv_tokens, seed, 4)
    inner = engine.step
    timed: list[tuple[Any, float, float]] = []

    def step() -> Any:  # both clocks around the whole step, as the validation's busy time sees it
        c0, w0 = time.thread_time(), time.perf_counter()
        rec = inner()
        timed.append((rec, time.thread_time() - c0, time.perf_counter() - w0))
        return rec

    engine.step = step  # type: ignore[method-assign]  # instance attribute: this engine only
    prompts = PromptSource(np.random.default_rng(seed + 1), target.config.vocab_size)
    batching = data.get("batching", {})
    policy = batching.get("policy", "continuous")
    c0 = time.thread_time()
    if policy in ("static", "dynamic"):
        result = serve(engine, specs, prompts, batching=Windowed(int(batching.get("max_batch_size", 256)),
                                                                 float(batching.get("max_wait_ms", 0.0)) / 1000.0,
                                                                 policy == "dynamic"))
    else:
        result = serve(engine, specs, prompts)
    loop_s = time.thread_time() - c0 - sum(t[1] for t in timed)
    kept = {id(s) for s in result.steps}  # the warm-up request's steps are not part of the replay
    return [t for t in timed if id(t[0]) in kept], loop_s


def replay(target: Any, shapes: list[tuple[tuple[int, int], ...]], repeats: int) -> tuple[list[float], list[float]]:
    """Thread seconds of each shape's forward on tripath.calibrate.probe.StepProbe: (its first run right after the
    previous step's shape, the median of ``repeats`` runs after one more warm-up, as the sweeps time a point).
    The two are taken alternately, step by step, so the machine's state over the minutes is shared."""
    from tripath.calibrate.probe import StepProbe

    tokens = max(sum(c + n for c, n in sh) for sh in shapes)
    probe = StepProbe(target, tokens, max_sequences=max(len(sh) for sh in shapes))

    def timed(ch: Any) -> float:
        c0 = time.thread_time()
        probe.run(ch)
        return time.thread_time() - c0

    probe.run(probe.chunks_of(shapes[0]))
    first, repeated = [], []
    for sh in shapes:
        ch = probe.chunks_of(sh)
        first.append(timed(ch))  # the previous shape ran last: as in serving, where every step differs
        probe.run(ch)
        repeated.append(float(np.median([timed(ch) for _ in range(repeats)])))
    return first, repeated


def write_csv(rows: list[StepRow], path: str) -> None:
    with AtomicFile(path) as fh:
        w = csv.writer(fh)
        w.writerow(list(StepRow.__dataclass_fields__))
        for r in rows:
            w.writerow(list(r.__dict__.values()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="step_residuals.py", description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", help="validation scenario name (data/scenarios/validation/NAME.toml) or a TOML path")
    p.add_argument("--profile", default="cpu-tiny", help="profile name or path (default cpu-tiny)")
    p.add_argument("--requests", type=int, default=None, help="serve only the first N requests")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps-csv", default=None, help="write one row per step here")
    p.add_argument("--replay", type=int, default=0, metavar="R",
                   help="also time each step's shape on the calibration probe: its first run after the previous "
                        "step's shape, and the median of R repeats after a warm-up (the sweeps' way); 0: off")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    import torch

    from tripath.core.data_dirs import MODELS_DIR, SCENARIOS_DIR
    from tripath.engine.model.checkpoint import load_checkpoint
    from tripath.profile.profile import resolve_profile

    path = Path(args.scenario)
    if not path.suffix:
        path = SCENARIOS_DIR / "validation" / f"{args.scenario}.toml"
    try:
        if not path.is_file():
            raise InputError(str(path), None, "scenario file not found")
        data = tomllib.loads(path.read_text())
        profile = resolve_profile(args.profile)
        torch.set_num_threads(1)  # as the profile was measured and the validation serves
        _, target = load_checkpoint(str(MODELS_DIR / "tiny-target"), device="cpu")
        timed, loop_s = serve_steps(data, str(path), profile, target, args.seed, args.requests)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    model = BaselineStep(IterationCost.from_profile(profile), int(profile.model.kv_bytes_per_token), 1 << 40)
    rows = [row_for(model, rec.chunk_shapes, c, w) for rec, c, w in timed]
    if args.replay > 0:
        in_order, repeated = replay(target, [rec.chunk_shapes for rec, _, _ in timed], args.replay)
        rows = [dataclasses.replace(r, probe_seq_s=a, probe_rep_s=b) for r, a, b in zip(rows, in_order, repeated,
                                                                                         strict=True)]
    if args.steps_csv:
        write_csv(rows, args.steps_csv)
    summary = {"scenario": data.get("name", path.stem), "profile": args.profile, "steps": len(rows),
               "numbers_from": "measured now on this machine (thread_time / perf_counter around Engine.step, 1 "
                               "torch thread) over priced by tripath.simulator.step_model.BaselineStep on the profile",
               "kinds": summarize(rows), "loop_thread_s": loop_s,
               "loop_over_steps_thread": loop_s / max(sum(r.thread_s for r in rows), 1e-12)}
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"{summary['scenario']}: {len(rows)} steps on profile {args.profile} ({summary['numbers_from']})")
    print(f"{'kind':<14}{'steps':>6}{'thr med':>9}{'thr mean':>9}{'thr sum':>9}{'wall med':>9}{'wall mean':>10}"
          f"{'wall sum':>9}{'busy':>7}{'price ms':>9}")
    for kind, s in summary["kinds"].items():
        if kind == "all":
            continue
        print(f"{kind:<14}{s['steps']:>6}{s['thread_median']:>9.3f}{s['thread_mean']:>9.3f}{s['thread_sum_ratio']:>9.3f}"
              f"{s['wall_median']:>9.3f}{s['wall_mean']:>10.3f}{s['wall_sum_ratio']:>9.3f}{s['busy_share']:>7.1%}"
              f"{s['mean_priced_ms']:>9.2f}")
    if args.replay > 0:
        print("forward only (thread): probe repeated / priced | probe first run after the previous shape / "
              "repeated | served minus priced overhead / probe first run")
        for kind, s in summary["kinds"].items():
            if "probe_rep_over_priced" in s:
                print(f"{kind:<14}{s['probe_rep_over_priced']:>9.3f}{s['probe_seq_over_rep']:>9.3f}"
                      f"{s['served_fwd_over_probe_seq']:>9.3f}")
    a = summary["kinds"]["all"]
    print(f"all: thread/priced {a['thread_sum_ratio']:.3f}, wall/priced {a['wall_sum_ratio']:.3f}, "
          f"core share {a['core_share']:.3f}; serving loop outside the steps: {loop_s:.3f} thread s "
          f"({summary['loop_over_steps_thread']:.1%} of the steps')")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
