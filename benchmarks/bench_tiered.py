"""Tiered KV cache: paging ms per 2K tokens per link, achieved GB/s against plain transfers of the same bytes.

For each context length a random-weight `bench-small` model (fp32) decodes a few steps with a device
pool that holds only the pinned pages and one layer's context and a host tier that holds half of
the rest, so every unpinned page crosses device<->host and host<->SSD each step (synchronous
transfers: nothing else on the clock).  In the same run, one plain tensor copy and one plain file
write / read of the same bytes give this machine's reference bandwidth.  Goal (issue 5): every
link at >= 70% of its plain figure.

Both sides are timed on two clocks (real_engine/paging_meter.py): wall time, and the transferring
thread's CPU time.  On a CPU shared with other jobs the wall clock also counts waits for a core, so
each (context, repeat) gives a share of plain on each clock and the verdict uses the median share
over all of them; the CPU-time share is the steadier one on a shared machine.

A second table isolates what the SSD tier adds to reading the same page files: SSDTier.read (one
preadv of header + payload into a reused staging page, XXH3 check, bookkeeping) against a plain
open + readinto + close of each of the same files into the same buffer, no checksum, interleaved.

    .venv/bin/python benchmarks/bench_tiered.py [--contexts 2048 8192] [--steps 4] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import torch

from real_engine.config import PRESETS
from real_engine.paging_meter import LINKS, measure_paging
from real_engine.tiers import SSDTier, TierConfig, TransferStats

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
    if args.json:
        print(json.dumps({"links": rows, "page_read": overhead}, indent=1))
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
