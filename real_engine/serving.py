"""Serving loop: replay a scenario's timed workload through the real engine in wall-clock time.

The same [workload] section the simulator reads becomes RequestSpecs (simulator.workload);
each request is handed to the engine once its arrival time has passed, and every request
ends as a RequestRecord with the simulator's fields, so one workload runs through both and
their records compare directly.  Times are seconds from the start of the replay (measured).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from real_engine.engine import Engine, EngineConfig, StepRecord
from real_engine.tiers import TierConfig
from simulator.errors import InputError
from simulator.paths import MODELS_DIR
from simulator.records import COMPLETED, REJECTED, RequestRecord, rejected_record
from simulator.request import RequestSpec

EVAL_PROMPTS = MODELS_DIR / "eval_prompts.jsonl"


class PromptSource:
    """Prompt ids for a task and length: held-out task prompts (bytes) if shipped, else seeded random ids."""

    def __init__(self, rng: np.random.Generator, vocab_size: int, path: Path | None = EVAL_PROMPTS) -> None:
        self.rng = rng
        self.vocab = min(vocab_size, 256)  # byte-level ids; random ids stay in the byte range too
        self.by_task: dict[str, list[list[int]]] = {}
        if path is not None and path.is_file():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    task, prompt = row["task"], row["prompt"]
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise InputError(
                        str(path), f"line {number}", f"needs a JSON object with task and prompt: {exc}"
                    ) from exc
                ids = list(str(prompt).encode("utf-8"))  # byte-level tokenizer: token id = byte value
                if ids:
                    self.by_task.setdefault(str(task), []).append(ids)

    @property
    def source(self) -> str:
        return "eval_prompts" if self.by_task else "random"

    def prompt(self, task: str, length: int) -> list[int]:
        pool = self.by_task.get(task) or [p for ps in self.by_task.values() for p in ps]
        if not pool:
            return self.rng.integers(0, self.vocab, size=length).tolist()
        ids = pool[int(self.rng.integers(len(pool)))]
        repeats = -(-length // len(ids))  # cut or repeat the text to exactly `length` tokens
        return (ids * repeats)[:length]


@dataclass(frozen=True)
class ServeResult:
    records: list[RequestRecord]  # in request order
    steps: list[StepRecord]
    prompt_source: str


def serve(
    engine: Engine,
    requests: list[RequestSpec],
    prompts: PromptSource,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    warmup: bool = True,
) -> ServeResult:
    """Replay requests at their arrival times; generate exactly output_tokens each (greedy, EOS ignored).

    With ``warmup`` one short request runs before the clock starts, so one-time costs (RoPE
    tables, allocator growth, kernel selection) do not land on the first measured request.
    """
    if warmup:
        engine.generate([[0] * 8], 2)
    pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.request_id)))
    specs = {r.request_id: r for r in requests}
    times: dict[int, dict[str, float]] = {r.request_id: {} for r in requests}
    rejected: dict[int, str] = {}
    failed: dict[int, str] = {}  # ended by a tier fault mid-flight (tiered KV); recorded as rejected with the reason
    steps: list[StepRecord] = []
    t0 = clock()
    while pending or engine.has_unfinished:
        now = clock() - t0
        while pending and pending[0].arrival_s <= now:
            spec = pending.popleft()
            reason = engine.check_request(spec.prompt_tokens, spec.output_tokens)
            if reason is not None:
                rejected[spec.request_id] = reason
                continue
            ids = prompts.prompt(spec.task, spec.prompt_tokens)
            engine.add_request(ids, spec.output_tokens, request_id=spec.request_id)
        if not engine.has_unfinished:
            if pending:  # idle until the next arrival
                sleep(max(0.0, pending[0].arrival_s - (clock() - t0)))
            continue
        start = clock() - t0
        rec = engine.step()  # returns after device sync: tokens exist when `end` is read
        end = clock() - t0
        steps.append(rec)
        for rid in rec.admitted:
            times[rid]["admitted_s"] = start
        for rid in rec.first_tokens:
            times[rid]["first_token_s"] = end
        for rid in rec.finished:
            times[rid]["finish_s"] = end
            engine.release(rid)
        for rid in getattr(rec, "failed", ()):
            failed[rid] = f"tier fault: {engine.errors.get(rid, 'unknown')}"
            engine.release(rid)
    records = []
    for rid in sorted(specs):
        s = specs[rid]
        if rid in rejected or rid in failed:
            reason = rejected.get(rid) or failed[rid]
            records.append(rejected_record(rid, s.task, s.arrival_s, s.prompt_tokens, s.output_tokens, reason))
            continue
        t = times[rid]
        records.append(
            RequestRecord(
                rid,
                s.task,
                s.arrival_s,
                s.prompt_tokens,
                s.output_tokens,
                0,
                t["admitted_s"],
                t["first_token_s"],
                t["finish_s"],
                COMPLETED,
                "",
            )
        )
    return ServeResult(records, steps, prompts.source)


def _atomic_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_records_csv(records: list[RequestRecord], path: str | os.PathLike) -> None:
    names = [f.name for f in fields(RequestRecord)]
    _atomic_csv(Path(path), names, [[getattr(r, n) for n in names] for r in records])


def write_steps_csv(steps: list[StepRecord], path: str | os.PathLike) -> None:
    if steps:
        names = list(steps[0].to_dict())
        _atomic_csv(Path(path), names, [[s.to_dict()[n] for n in names] for s in steps])


def resolve_rate(arrival_rate: float | None, override: float | None, source: str | None) -> float | None:
    """The Poisson/gamma rate to replay at: --rate wins, then the scenario's rate_per_s."""
    rate = override if override is not None else arrival_rate
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise InputError(source, "workload.arrival.rate_per_s", f"must be > 0, got {rate}")
    return rate


def main(argv: list[str] | None = None) -> int:
    from real_engine.checkpoint import load_checkpoint
    from real_engine.config import PRESETS
    from real_engine.model import LlamaModel
    from simulator.scenario import load_scenario
    from simulator.workload import generate_requests

    p = argparse.ArgumentParser(
        prog="tripath serve",
        description="Replay a scenario's workload through the real engine (measured).",
    )
    p.add_argument("scenario")
    p.add_argument("--checkpoint", help="HF-layout checkpoint folder; default: a random-weight preset")
    p.add_argument("--preset", default="tiny-target", choices=sorted(PRESETS))
    p.add_argument(
        "--rate", type=float, help="arrivals per second (needed when the scenario uses load_fraction)"
    )
    p.add_argument("--requests", type=int, help="replay only the first N requests")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--num-blocks", type=int, default=1024)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--out", default="engine_records.csv")
    p.add_argument("--steps-out", help="also write per-step timing records (CSV)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", action="store_true", help="print the measured latency percentiles as one JSON object")
    _add_tier_arguments(p)
    args = p.parse_args(argv)
    if args.threads:  # on a shared CPU, fewer threads avoid OpenMP spin-waits that dominate small ops
        torch.set_num_threads(args.threads)
    scenario = load_scenario(args.scenario)
    if args.checkpoint:
        _, model = load_checkpoint(args.checkpoint, device=args.device)
    else:
        model = LlamaModel(PRESETS[args.preset], torch.Generator().manual_seed(args.seed)).to(args.device)
    rate = resolve_rate(scenario.workload.arrival.rate_per_s, args.rate, scenario.source_path)
    if rate is None and scenario.workload.arrival.kind != "trace":
        raise InputError(
            scenario.source_path, "workload.arrival.load_fraction", "pass --rate to replay on the engine"
        )
    rng = np.random.default_rng(args.seed)
    requests = generate_requests(scenario.workload, rng, rate)[: args.requests]
    cfg = EngineConfig(
        scenario.batching.max_batch_size,
        scenario.batching.max_batched_tokens,
        args.block_size,
        args.num_blocks,
        tiered=tier_config(args, scenario, model.config.num_layers),
    )
    with Engine(model, cfg, torch.Generator(device=args.device).manual_seed(args.seed)) as engine:
        result = serve(
            engine, requests, PromptSource(np.random.default_rng(args.seed + 1), model.config.vocab_size)
        )
    write_records_csv(result.records, args.out)
    if args.steps_out:
        write_steps_csv(result.steps, args.steps_out)
    done = sum(r.status == COMPLETED for r in result.records)
    rej = sum(r.status == REJECTED for r in result.records)
    if args.json:
        print(json.dumps(_measured_summary(result.records, len(result.steps), args, result.prompt_source),
                         indent=2, sort_keys=True))
        return 0
    print(
        f"{done} completed, {rej} rejected, {len(result.steps)} steps (measured, prompts: "
        f"{result.prompt_source}) -> {args.out}"
    )
    return 0


def _add_tier_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tiered KV (on with --tiered or a [strategy.tiered] table in the scenario)")
    g.add_argument("--tiered", action="store_true", help="KV in device / host / SSD tiers (tiered_store.py)")
    g.add_argument("--chunk-tokens", type=int, help="tokens per page (default: [strategy.tiered] chunk_tokens, or 256)")
    g.add_argument("--device-pages", type=int, help="device pool in pages (default: --num-blocks x --block-size)")
    g.add_argument("--host-pages", type=int, help="host tier in pages (default: as many as the device pool)")
    g.add_argument("--ssd-pages", type=int, help="SSD tier in pages (default: 8x the device pool)")
    g.add_argument("--ssd-dir", help="parent of the SSD tier's temp directory (default: the system temp dir)")
    g.add_argument("--sink-tokens", type=int, default=4, help="attention sinks kept on the device")
    g.add_argument("--window-tokens", type=int, default=256, help="recent window kept on the device")


def tier_config(args: argparse.Namespace, scenario: object, num_layers: int) -> TierConfig | None:
    """The TierConfig the flags and the scenario's [strategy.tiered] ask for, or None (tiering off).

    Capacities are pages (chunk_tokens tokens of one layer's K and V).  Only chunk_tokens comes from the
    scenario: its host/SSD GiB describe the simulated hardware, and this engine preallocates its tiers,
    so they are sized by the flags here.
    """
    spec = getattr(getattr(scenario, "strategy", None), "tiered", None)
    if not args.tiered and spec is None:
        return None
    chunk = args.chunk_tokens or (spec.chunk_tokens if spec is not None else 256)
    try:
        if chunk < 1:
            raise ValueError(f"TierConfig.chunk_tokens: must be an integer >= 1, got {chunk}")
        device = args.device_pages or max(1, args.num_blocks * args.block_size // chunk) * num_layers
        host = device if args.host_pages is None else args.host_pages
        ssd = 8 * device if args.ssd_pages is None else args.ssd_pages
        return TierConfig(chunk, device, host, ssd, args.ssd_dir, sink_tokens=args.sink_tokens,
                          window_tokens=args.window_tokens)
    except ValueError as exc:
        raise InputError(None, "--tiered", str(exc)) from exc


def _measured_summary(records: list[RequestRecord], steps: int, args: argparse.Namespace,
                      prompt_source: str) -> dict[str, object]:
    """The same percentiles the simulator reports, over records measured on this engine (ms; NaN -> null)."""
    from simulator import metrics

    latency = {m: {lvl: (v * 1000.0 if math.isfinite(v) else None) for lvl, v in levels.items()}
               for m, levels in metrics.latency_percentiles(records).items()}
    return {
        "numbers_from": f"measured on the real engine ({args.device}, torch {torch.__version__}) at "
                        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
        "checkpoint": args.checkpoint or f"random weights, preset {args.preset}",
        "prompts": prompt_source,
        "scenario": args.scenario,
        "seed": args.seed,
        "counts": metrics.counts(records),
        "steps": steps,
        "latency_ms": latency,
        "records": str(args.out),
    }


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except InputError as exc:  # bad user input: one line, exit 2, nothing written
        print(f"error: {exc}", file=__import__("sys").stderr)
        raise SystemExit(2) from None
