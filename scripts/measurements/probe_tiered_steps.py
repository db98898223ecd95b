"""What the tiered Engine does per decode step: pages moved per link, main-thread stall, and step time against
the paged Engine. The evidence behind tripath/simulator/paths/tiered_engine_rule.py (docs/tiered_kv.md, "What the
engine does per step").

    .venv/bin/python scripts/measurements/probe_tiered_steps.py [--model data/models/tiny-target] [--json]

Part 1: one request (880 prompt + 200 output tokens) on a device pool of 4 pages of 256 tokens per layer, with
host pools of 24, 6 and 0 pages, fetch-ahead on and off: pages per link per step past 1,024 tokens (where the
sequence outgrows the pool), the cache's stall per step before and after. Part 2: a tiered Engine holding every
page and a paged Engine serving the same requests, decode steps interleaved (same contention), the serving
thread's CPU time per step. Times are on a shared CPU: medians, noisy; the page counts are exact.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.tier_config import TierConfig

LINKS = ("device_host", "host_device", "host_ssd", "ssd_host")


def _serve(engine: Engine, prompts: list[list[int]], new_tokens: int) -> list[tuple[object, float]]:
    for ids in prompts:
        engine.add_request(ids, new_tokens)
    rows = []
    while engine.has_unfinished:
        start = time.thread_time()
        record = engine.step()
        rows.append((record, time.thread_time() - start))
    engine.close()
    return rows


def outgrowing(model: LlamaModel, host_pages: int, prefetch: bool) -> dict[str, object]:
    layers = model.config.num_layers
    tiers = TierConfig(256, 4 * layers, host_pages, 384, prefetch=prefetch)
    engine = Engine(model, EngineConfig(4, 2048, 16, 3072 // 16, tiered=tiers), torch.Generator().manual_seed(0))
    ids = torch.randint(0, model.config.vocab_size, (880,), generator=torch.Generator().manual_seed(1)).tolist()
    rows = [r for r, _ in _serve(engine, [ids], 200) if r.decode_seqs]
    page = 2 * 256 * model.config.num_kv_heads * int(model.config.head_dim) * 4
    over = [r for r in rows if r.total_context > 1024]
    fits = [r for r in rows if r.total_context <= 1024]
    return {"host_pages": host_pages, "prefetch": prefetch, "steps_over": len(over),
            "steps_with_moves_before": sum(1 for r in fits if r.paging_bytes_host_device),
            **{f"pages_{k}_per_step": statistics.mean(getattr(r, f"paging_bytes_{k}") for r in over) / page
               for k in LINKS},
            "stall_ms_fits": statistics.median(r.paging_stall_s for r in fits) * 1e3,
            "stall_ms_over": statistics.median(r.paging_stall_s for r in over) * 1e3}


def side_by_side(model: LlamaModel, batch: int) -> dict[str, object]:
    layers = model.config.num_layers
    prompts = [torch.randint(0, model.config.vocab_size, (300 + 100 * i,),
                             generator=torch.Generator().manual_seed(i)).tolist() for i in range(batch)]
    engines = []
    for tiered in (True, False):
        extra = {"tiered": TierConfig(256, 64 * layers, 0, 0)} if tiered else {}
        engine = Engine(model, EngineConfig(8, 4096, 16, 8192 // 16, **extra), torch.Generator().manual_seed(0))
        for ids in prompts:
            engine.add_request(ids, 300)
        engines.append(engine)
    times: tuple[list[float], list[float]] = ([], [])
    stall = []
    while engines[0].has_unfinished:
        records = []
        for engine, out in zip(engines, times, strict=True):
            start = time.thread_time()
            records.append(engine.step())
            out.append(time.thread_time() - start)
        if records[0].prefill_seqs:
            times[0].pop(), times[1].pop()
        else:
            stall.append(records[0].paging_stall_s)
    for engine in engines:
        engine.close()
    diff = [t - p for t, p in zip(*times, strict=True)]
    return {"batch": batch, "steps": len(diff), "tiered_ms": statistics.median(times[0]) * 1e3,
            "paged_ms": statistics.median(times[1]) * 1e3, "paired_diff_ms": statistics.median(diff) * 1e3,
            "stall_ms": statistics.median(stall) * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/tiny-target")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = load_checkpoint(args.model)[1]
    out = {"outgrowing": [outgrowing(model, host, prefetch) for host in (24, 6, 0) for prefetch in (True, False)],
           "side_by_side": [side_by_side(model, batch) for batch in (1, 4)]}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for row in out["outgrowing"] + out["side_by_side"]:
        print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
