"""Draft vs target prompt-pass cost on the tiny pair: the ratio the simulator needs for the draft's prefill.

The profile's speculative.cost_ratio c is measured on decode steps (one token), where per-layer fixed
costs dominate on a CPU; a prompt pass is closer to compute-bound, where the ratio tends to the
FLOP ratio. This times one prefill of n tokens on each model exactly as the engine runs it
(fused projections, paged KV, batch 1) in thread CPU time (time.thread_time: the profile's clock,
robust to other jobs' share of the cores, not to their cache pressure), median of the repeats after
a warm-up, and prints the ratio per n. docs/simulator_paths.md (Speculative decoding) quotes it.

Two ratios: of the whole passes, and of their token-dependent work (each pass less a one-token pass,
(d(n) - d(1)) / (t(n) - t(1))), which is what the simulator multiplies: the draft's prompt pass rides in
a round's draft step, whose fixed cost K c already counts, and the target side is the profile's
prefill_ms(n, 0) - prefill_ms(0, 0). The calibration's speculative sweep measures the latter on the eval
prompts (speculative.draft_prefill_ratio, tripath/calibrate/sweeps/speculative.py); this script checks it per
prompt length.

    .venv/bin/python scripts/measurements/measure_draft_prefill.py [--repeats 15] [--tokens 64 160 400 800]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tripath.engine.kv.paged import KVCacheManager, KVTensors
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.model.fusion import fuse_projections
from tripath.engine.model.model import LlamaModel
from tripath.engine.speculative.proposers import PagedChunk, paged_forward

WARMUP = 3


def prefill_s(model: LlamaModel, tokens: int, repeats: int) -> float:
    """Median thread-CPU seconds of one prompt pass of ``tokens`` tokens into an empty paged cache."""
    param = next(model.parameters())
    blocks, block = -(-tokens // 16) + 1, 16
    prompt = [(7 * i) % (model.config.vocab_size - 8) + 1 for i in range(tokens)]  # deterministic ids
    times = []
    for _ in range(WARMUP + repeats):
        manager = KVCacheManager(blocks, block)
        kv = KVTensors.allocate(model.config, blocks, block, param.dtype, param.device)
        with torch.inference_mode():
            start = time.thread_time()
            paged_forward(model, kv, manager, [PagedChunk(0, 0, prompt, 1)])
            times.append(time.thread_time() - start)
    return statistics.median(times[WARMUP:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 160, 400, 800])
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the engine is served and calibrated
    target = fuse_projections(load_checkpoint("data/models/tiny-target")[1].eval())
    draft = fuse_projections(load_checkpoint("data/models/tiny-draft")[1].eval())
    t1, d1 = prefill_s(target, 1, args.repeats), prefill_s(draft, 1, args.repeats)
    print(f"one-token pass: target {1e3 * t1:.2f} ms, draft {1e3 * d1:.2f} ms")
    print("| prompt tokens | target ms | draft ms | draft / target | token-dependent: (d - d1) / (t - t1) |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.tokens:
        t, d = prefill_s(target, n, args.repeats), prefill_s(draft, n, args.repeats)
        print(f"| {n} | {1e3 * t:.2f} | {1e3 * d:.2f} | {d / t:.3f} | {(d - d1) / (t - t1):.3f} |")


if __name__ == "__main__":
    main()
