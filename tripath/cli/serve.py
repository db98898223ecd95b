"""``tripath serve``: replay a scenario's workload through the real engine and write the measured records.

The command (its flags: tripath/cli/serve_parser.py), the engine the scenario describes with the flags on top
(tripath/fidelity/engine_settings.py, as the validation runner builds it) and the measured summary; the replay
is tripath/engine/workload_replay.py, the CSV writers tripath/engine/serving.py. The scenario is read here, so
the engine never imports the simulator.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from tripath.core.errors import InputError
from tripath.core.records import COMPLETED, REJECTED, RequestRecord
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.serving import write_serve_outputs
from tripath.engine.workload_replay import PromptSource, prefix_hit_tokens, serve
from tripath.fidelity.engine_settings import EngineOverrides, engine_settings

GIB = 2**30

if TYPE_CHECKING:
    from tripath.engine.model.model import LlamaModel
    from tripath.simulator.scenario.prefix_workload import RequestPrefixes
    from tripath.simulator.scenario.scenario import Scenario


def resolve_rate(arrival_rate: float | None, override: float | None, source: str | None) -> float | None:
    """The Poisson/gamma rate to replay at: --rate wins, then the scenario's rate_per_s."""
    rate = override if override is not None else arrival_rate
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise InputError(source, "workload.arrival.rate_per_s", f"must be > 0, got {rate}")
    return rate


def run(args: argparse.Namespace) -> int:
    """Serve the scenario's requests on the engine it describes (engine_settings, the flags on top)."""
    from tripath.engine.model.checkpoint import load_checkpoint
    from tripath.engine.model.config import PRESETS
    from tripath.engine.model.model import LlamaModel
    from tripath.fidelity.engine_side import KeyedPrompts
    from tripath.simulator.scenario.scenario import load_scenario
    from tripath.simulator.scenario.workload import generate_requests, generate_with_prefixes

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    _check_outputs(args.out, args.steps_out)
    if args.threads:  # on a shared CPU, fewer threads avoid OpenMP spin-waits that dominate small ops
        torch.set_num_threads(args.threads)
    scenario = load_scenario(args.scenario)
    if args.checkpoint:
        _, model = load_checkpoint(args.checkpoint, device=args.device)
    else:
        model = LlamaModel(PRESETS[args.preset], torch.Generator().manual_seed(args.seed)).to(args.device)
    rate = resolve_rate(scenario.workload.arrival.rate_per_s, args.rate, scenario.source_path)
    # a closed loop is refused by generate_requests below: the engine replays arrival times fixed beforehand
    if rate is None and scenario.workload.arrival.kind not in ("trace", "closed"):
        raise InputError(
            scenario.source_path, "workload.arrival.load_fraction", "pass --rate to replay on the engine"
        )
    cfg = serve_config(args, scenario, model)
    prefix_on = cfg.prefix_caching
    rng = np.random.default_rng(args.seed)
    prefix_on = scenario.strategy.prefix_cache is not None if args.prefix_caching is None else args.prefix_caching
    prefixes = None
    if prefix_on:  # the same requests (the keys draw from a later child of rng) and their prompts' block keys
        spec = scenario.strategy.prefix_cache
        page = cfg.tiered.chunk_tokens if cfg.tiered is not None else cfg.block_size
        requests, prefixes = generate_with_prefixes(scenario.workload, rng, rate,
                                                    spec.block_tokens if spec is not None else page)
        requests = requests[: args.requests]
    else:
        requests = generate_requests(scenario.workload, rng, rate)[: args.requests]
    check_kv_memory(cfg, model, args.device)
    with Engine(model, cfg, torch.Generator(device=args.device).manual_seed(args.seed)) as engine:
        prompts = PromptSource(np.random.default_rng(args.seed + 1), model.config.vocab_size)
        if prefixes is not None and prefixes.reusable:
            prompts = KeyedPrompts(prefixes.keys, prefixes.block_tokens, requests, prompts, engine.check_request)
        result = serve(engine, requests, prompts)
        prefix = None if prefixes is None else _prefix_summary(engine, result.records, prefixes)
    write_serve_outputs(result.records, args.out, result.steps, args.steps_out)
    done = sum(r.status == COMPLETED for r in result.records)
    rej = sum(r.status == REJECTED for r in result.records)
    if args.json:
        summary = _measured_summary(result.records, len(result.steps), args, result.prompt_source)
        if prefix is not None:
            summary["prefix_cache"] = prefix
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    print(
        f"{done} completed, {rej} rejected, {len(result.steps)} steps (measured, prompts: "
        f"{result.prompt_source}) -> {args.out}"
    )
    if prefix is not None:
        print(f"prefix cache: {prefix['hit_tokens']:,} of {prefix['prompt_tokens']:,} prompt tokens taken from the "
              f"cache ({100.0 * prefix['hit_rate']:.1f} %, measured)" if prefix["hit_rate"] is not None else
              "prefix cache: no prompt tokens served")
        if prefix.get("note"):
            print(f"  {prefix['note']}")
    return 0


def _check_outputs(out: str, steps_out: str | None) -> None:
    """Refuse output paths that cannot be written before the model loads and the replay runs (minutes), not
    after it: a folder, a link or an unwritable place, and one file given for both outputs."""
    from pathlib import Path

    from tripath.core.atomic import check_file_target

    check_file_target(out, "--out")
    if steps_out is not None:
        check_file_target(steps_out, "--steps-out")
        if Path(steps_out).resolve() == Path(out).resolve():
            raise InputError(steps_out, "--steps-out", "is the --out file too; give the step records a file of "
                             "their own")


def check_kv_memory(cfg: EngineConfig, model: LlamaModel, device: str) -> None:
    """Refuse a KV pool the device cannot hold before the engine allocates it (a product of user-given counts:
    --num-blocks x --block-size tokens, or the tiers' --device-pages + --host-pages pages of one layer's
    --chunk-tokens tokens): a CUDA device's own memory, else MEMORY_FRACTION of this machine's."""
    from tripath.core.limits import check_memory

    per_token = model.config.kv_bytes_per_token(next(model.parameters()).element_size())
    if cfg.tiered is None:
        nbytes, field = cfg.kv_capacity_tokens * per_token, "--num-blocks x --block-size"
    else:
        pages = cfg.tiered.device_pages + cfg.tiered.host_pages
        nbytes = pages * cfg.tiered.chunk_tokens * per_token // model.config.num_layers
        field = "--device-pages + --host-pages"
    if torch.device(device).type == "cuda":
        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
        if nbytes > total:
            raise InputError(None, field, f"the KV pool needs about {nbytes >> 20:,} MiB, more than the "
                                          f"{total >> 20:,} MiB of {device}; use fewer blocks or pages")
        return
    check_memory(nbytes, None, field, "the KV pool's blocks", "use fewer blocks or pages")


def _prefix_summary(engine: Engine, records: list[RequestRecord], prefixes: RequestPrefixes) -> dict[str, object]:
    """Prompt tokens the engine's prefix cache served over the prompt tokens of the completed requests."""
    hit, prompt = prefix_hit_tokens(engine, records) or (0, 0)
    out: dict[str, object] = {"hit_tokens": hit, "prompt_tokens": prompt,
                              "hit_rate": hit / prompt if prompt else None, "blocks": prefixes.source}
    if not prefixes.reusable:
        out["note"] = (f"{prefixes.note}; the prompts are the workload's own, reused only where they happen "
                       "to share blocks")
    return out


def serve_config(args: argparse.Namespace, scenario: Scenario, model: LlamaModel) -> EngineConfig:
    """The engine the scenario describes (tripath.fidelity.engine_settings, the same function the validation
    runner uses), with serve's flags on top: the device pool is --num-blocks x --block-size tokens (its tiered
    pages too, unless --device-pages), the host tier as many pages as the device pool (it is preallocated: the
    scenario's host_capacity_gib describes the simulated machine), the SSD tier the scenario's ssd_capacity_gib
    (the engine's own bytes per token) at most SSD_PAGES_CAP x the device pool; explicit page flags win.
    """
    spec = scenario.strategy.tiered
    ssd_tokens = None
    if spec is not None and spec.ssd_capacity_gib is not None:
        per_token = model.config.kv_bytes_per_token(next(model.parameters()).element_size())
        ssd_tokens = int(spec.ssd_capacity_gib * GIB) // per_token
    overrides = EngineOverrides(
        block_size=args.block_size, tiered=args.tiered, chunk_tokens=args.chunk_tokens,
        device_pages=args.device_pages, host_pages=args.host_pages, ssd_pages=args.ssd_pages, ssd_dir=args.ssd_dir,
        sink_tokens=args.sink_tokens, window_tokens=args.window_tokens, prefix_caching=args.prefix_caching)
    try:
        return engine_settings(scenario, args.num_blocks * args.block_size, model.config.num_layers,
                               ssd_tokens=ssd_tokens, overrides=overrides)
    except ValueError as exc:
        field = ("--tiered" if args.tiered or spec is not None else
                 "strategy.compression" if scenario.strategy.compression is not None else "--prefix-caching")
        raise InputError(scenario.source_path, field, str(exc)) from None


def _measured_summary(records: list[RequestRecord], steps: int, args: argparse.Namespace,
                      prompt_source: str) -> dict[str, object]:
    """The same percentiles the simulator reports, over records measured on this engine (ms; NaN -> null)."""
    from tripath.core import metrics

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
