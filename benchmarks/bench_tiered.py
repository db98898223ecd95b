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

    .venv/bin/python benchmarks/bench_tiered.py [--contexts 2048 8192] [--steps 4] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

import torch

from real_engine.config import PRESETS
from real_engine.paging_meter import LINKS, measure_paging

GOAL = 0.70


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
    if args.json:
        print(json.dumps(rows, indent=1))
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
