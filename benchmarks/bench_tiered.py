"""Tiered KV cache: paging ms per 2K tokens per link, achieved GB/s against plain transfers of the same bytes.

For each context length a random-weight `bench-small` model (fp32) decodes a few steps with a device
pool that holds only the pinned pages and one layer's context and a host tier that holds half of
the rest, so every unpinned page crosses device<->host and host<->SSD each step (synchronous
transfers: nothing else on the clock).  In the same run, one plain tensor copy and one plain file
write / read of the same bytes give this machine's reference bandwidth.  Goal: every
link at >= 70% of its plain figure.

Both sides are timed on two clocks (scripts/measurements/paging_meter.py): wall time, and the transferring
thread's CPU time.  On a CPU shared with other jobs the wall clock also counts waits for a core, so
each (context, repeat) gives a share of plain on each clock and the verdict uses the median share
over all of them; the CPU-time share is the steadier one on a shared machine.

A second table isolates what the SSD tier adds to reading the same page files: SSDTier.read (one
preadv of header + payload into a reused staging page, XXH3 check, bookkeeping) against a plain
open + readinto + close of each of the same files into the same buffer, no checksum, interleaved.

A third table runs the continuous-batching Engine on four sequences of different lengths decoding
together, once on the paged pool and once with tiering on (and with / without fetch-ahead): median
decode-step ms and, per step, the MiB moved per link and the main thread's paging stall.

    .venv/bin/python benchmarks/bench_tiered.py [--contexts 2048 8192] [--steps 4] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.config import PRESETS, ModelConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.ssd import SSDTier
from tripath.engine.tiered.tier_config import TierConfig, TransferStats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "measurements"))
from paging_meter import LINKS, measure_paging  # noqa: E402 - a measurement helper of the scripts, not the package

GOAL = 0.70


def page_read_overhead(page_shape: tuple[int, ...], pages: int, repeats: int,
                       ssd_dir: str | None) -> dict[str, float]:
    """Best-of-`repeats` GB/s of reading `pages` SSD page files through SSDTier.read and plainly, on both clocks."""
    ssd = SSDTier(TierConfig(ssd_pages=pages, ssd_dir=ssd_dir), page_shape, torch.float32, TransferStats())
    gen = torch.Generator().manual_seed(0)
    try:
        ids = [ssd.write(torch.randn(page_shape, generator=gen)) for _ in range(pages)]
        staging = torch.empty(page_shape)
        view = memoryview(staging.view(torch.uint8).numpy()).cast("B")
        paths = [str(ssd.path(i)) for i in ids]

        def tier() -> None:
            for i in ids:
                ssd.read(i, out=staging)

        def plain() -> None:
            for path in paths:
                fd = os.open(path, os.O_RDONLY)
                os.preadv(fd, [view], SSDTier.HEADER_BYTES)
                os.close(fd)

        best = {"tier": [float("inf")] * 2, "plain": [float("inf")] * 2}
        for _ in range(repeats):
            for name, fn in (("tier", tier), ("plain", plain)):  # interleaved: both see the same load
                wall, cpu = time.perf_counter(), time.thread_time()
                fn()
                took = (time.perf_counter() - wall, time.thread_time() - cpu)
                best[name] = [min(a, b) for a, b in zip(best[name], took, strict=True)]
        nbytes = pages * ssd.page_bytes
        return {f"{name}_{clock}_gb_per_s": nbytes / best[name][k] / 1e9 for name in best
                for k, clock in enumerate(("wall", "cpu"))}
    finally:
        ssd.close()


def batched_engine(shape: ModelConfig, lengths: list[int], chunk: int, steps: int,
                   repeats: int = 3) -> list[dict[str, object]]:
    """Median decode-step ms of the Engine over `lengths` decoding together: paged pool vs tiered.

    The configurations run in turns, `repeats` rounds, so load from other jobs falls on all of them alike."""
    model = LlamaModel(shape, torch.Generator().manual_seed(0)).eval()
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, shape.vocab_size, (n,), generator=gen).tolist() for n in lengths]
    layers = shape.num_layers
    chunks = [-(-(n + steps + 2) // chunk) for n in lengths]
    pinned = 3  # per layer and sequence: 1 sink chunk + the 256-token window over <= 2 chunks
    device = sum(min(c, pinned) for c in chunks) * layers + max(c - min(c, pinned) for c in chunks) + 1
    spill = sum(chunks) * layers - device
    configs: dict[str, TierConfig | None] = {"paged pool": None}
    for prefetch in (False, True):
        configs[f"tiered, prefetch {'on' if prefetch else 'off'}"] = TierConfig(
            chunk, device, max(spill // 2, 1), spill + layers, prefetch=prefetch)
    decodes: dict[str, list] = {name: [] for name in configs}
    for _ in range(repeats):
        for name, tiers in configs.items():
            cfg = EngineConfig(max_batch_size=len(lengths), max_batched_tokens=max(lengths), block_size=16,
                               num_blocks=sum(chunks) * chunk // 16 + 8, tiered=tiers)
            with Engine(model, cfg) as engine:
                for p in prompts:
                    engine.add_request(p, steps + 2)
                while engine.has_unfinished:
                    r = engine.step()
                    if r.decode_seqs == len(lengths) and not r.prefill_seqs:
                        decodes[name].append(r)
    rows = []
    for name, recs in decodes.items():
        def med(field: str, recs: list = recs) -> float:
            return statistics.median(getattr(r, field) for r in recs)

        rows.append({"engine": name, "decode_steps": len(recs), "step_ms": med("wall_s") * 1e3,
                     "d2h_mib": med("paging_bytes_device_host") / 2**20,
                     "h2d_mib": med("paging_bytes_host_device") / 2**20,
                     "h2s_mib": med("paging_bytes_host_ssd") / 2**20, "s2h_mib": med("paging_bytes_ssd_host") / 2**20,
                     "stall_ms": med("paging_stall_s") * 1e3, "device_pages": device})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contexts", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3, help="measurements per context (shares: median over all)")
    ap.add_argument("--chunk", type=int, default=256, help="tokens per page")
    ap.add_argument("--ssd-dir", default=None, help="directory for the SSD tier (default: the system temp dir)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = PRESETS["bench-small"]
    rows = []
    for ctx in args.contexts:
        for rep in range(args.repeats):
            step, links = measure_paging(shape, ctx, args.chunk, args.steps, prefetch=False, ssd_dir=args.ssd_dir,
                                         seed=rep)
            for p in links:
                rows.append({**dataclasses.asdict(p), "repeat": rep,
                             "share_of_plain": p.gb_per_s / p.plain_gb_per_s,
                             "cpu_share_of_plain": p.cpu_gb_per_s / p.plain_cpu_gb_per_s,
                             "step_ms_untiered": step.step_ms_untiered, "step_ms_tiered": step.step_ms_tiered})
    page_shape = (2, args.chunk, shape.num_kv_heads, int(shape.head_dim))
    overhead = page_read_overhead(page_shape, 96, 7, args.ssd_dir)
    lengths = [2048, 1536, 1024, 512]
    batched = batched_engine(shape, lengths, args.chunk, args.steps + 2)
    if args.json:
        print(json.dumps({"links": rows, "page_read": overhead, "batched_engine": batched}, indent=1))
        return 0
    kib = shape.kv_bytes_per_token(4) * 2048 / 2**20
    print(f"bench-small fp32: {kib:.0f} MiB of KV per 2K tokens; page = {args.chunk} tokens of one layer (measured; "
          "wall clock / thread CPU time)")
    print(f"{'context':>7} {'rep':>3} {'link':>13} {'pages':>6} {'ms/2K tok':>10} {'GB/s':>7} {'plain':>7} "
          f"{'share':>6} {'cpu GB/s':>9} {'plain':>7} {'share':>6}")
    for r in rows:
        print(f"{r['context']:>7} {r['repeat']:>3} {r['link']:>13} {r['pages']:>6} {r['ms_per_2k_tokens']:>10.3f} "
              f"{r['gb_per_s']:>7.2f} {r['plain_gb_per_s']:>7.2f} {r['share_of_plain']:>6.0%} "
              f"{r['cpu_gb_per_s']:>9.2f} {r['plain_cpu_gb_per_s']:>7.2f} {r['cpu_share_of_plain']:>6.0%}")
    for link in LINKS:
        sel = [r for r in rows if r["link"] == link]
        wall = statistics.median(r["share_of_plain"] for r in sel)
        cpu = statistics.median(r["cpu_share_of_plain"] for r in sel)
        low = min(r["cpu_share_of_plain"] for r in sel)
        verdict = "meets" if min(wall, cpu) >= GOAL else ("meets on CPU time" if cpu >= GOAL else "misses")
        print(f"{link:>13}: median share of plain {wall:.0%} (wall), {cpu:.0%} (CPU time; lowest {low:.0%}) over "
              f"{len(sel)} runs: {verdict} the {GOAL:.0%} goal")
    o = overhead
    print(f"96 page files of {page_shape} fp32, best of 7 interleaved: SSDTier.read {o['tier_wall_gb_per_s']:.2f} GB/s "
          f"wall / {o['tier_cpu_gb_per_s']:.2f} CPU; plain open+preadv+close {o['plain_wall_gb_per_s']:.2f} / "
          f"{o['plain_cpu_gb_per_s']:.2f}: {o['tier_wall_gb_per_s'] / o['plain_wall_gb_per_s']:.0%} (wall), "
          f"{o['tier_cpu_gb_per_s'] / o['plain_cpu_gb_per_s']:.0%} (CPU time) of the plain per-file read")
    print(f"continuous batching, {len(lengths)} sequences of {lengths} tokens decoding together, device pool "
          f"{batched[0]['device_pages']} pages (median per decode step over 3 interleaved rounds, wall clock):")
    print(f"{'engine':>22} {'steps':>5} {'step ms':>8} {'d->h MiB':>9} {'h->d MiB':>9} {'h->ssd MiB':>10} "
          f"{'ssd->h MiB':>10} {'stall ms':>9}")
    for b in batched:
        print(f"{b['engine']:>22} {b['decode_steps']:>5} {b['step_ms']:>8.2f} {b['d2h_mib']:>9.2f} "
              f"{b['h2d_mib']:>9.2f} {b['h2s_mib']:>10.2f} {b['s2h_mib']:>10.2f} {b['stall_ms']:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
