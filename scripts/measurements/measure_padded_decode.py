"""Does a decode step of mixed contexts cost what its padded key count says, or its sum of contexts?

the engine's PagedAttention gathers B x ceil(longest / block) x block keys for a decode batch (the rest
masked). This times, in one run and interleaved, three batches of B decoding sequences on the calibration
probe's forward (tripath/calibrate/probe.StepProbe, thread CPU time, one torch thread: the calibration's clock):

    mixed     the contexts given (one long, the rest short, or a spread)
    sum       B equal contexts with the same Σ as mixed (what the simulator charges on seed and published
              profiles)
    padded    B equal contexts of the mixed batch's longest in whole blocks (what it charges on measured
              profiles, tripath/profile/engine_rules.decode_block_tokens)

and prints mixed/sum and mixed/padded: near 1 for the rule that holds. Equal-context batches are what the
decode sweep fits, so the comparison needs no profile and is immune to how loaded the machine was when the
profile was calibrated (both sides are measured here, now). Medians of --repeats, shapes interleaved.

    .venv/bin/python scripts/measurements/measure_padded_decode.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tripath.calibrate.probe import StepProbe
from tripath.core.data_dirs import MODELS_DIR
from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.profile.engine_rules import REAL_ENGINE_BLOCK_TOKENS

BLOCK = REAL_ENGINE_BLOCK_TOKENS
# (label, contexts): attended tokens per sequence (cached + the new one), as the simulator counts them
SHAPES = [
    ("1 long + 3 short", [1024, 128, 128, 128]),
    ("1 long + 7 short", [1024, 96, 96, 96, 96, 96, 96, 96]),
    ("1 long + 15 short", [768] + [64] * 15),
    ("spread of 8", [90, 150, 210, 300, 380, 460, 600, 800]),
    ("spread of 12", [70, 100, 130, 170, 200, 240, 280, 330, 400, 470, 560, 700]),
    ("near-equal 8 (control)", [500, 505, 510, 490, 495, 500, 502, 498]),
]


def chunks_for(probe: StepProbe, contexts: list[int]) -> list[SequenceChunk]:
    return [SequenceChunk(c - 1, 1, table) for c, table in zip(contexts, probe._tables(contexts), strict=True)]


def timed(probe: StepProbe, chunks: list[SequenceChunk]) -> float:
    start = time.thread_time()
    probe.run(chunks)
    return (time.thread_time() - start) * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, model = load_checkpoint(MODELS_DIR / "tiny-target", device="cpu")
    probe = StepProbe(model, max_tokens=32 * 1024, max_sequences=64)
    cases = []
    for label, contexts in SHAPES:
        b, total = len(contexts), sum(contexts)
        padded = -(-max(contexts) // BLOCK) * BLOCK
        even = [total // b + (1 if i < total % b else 0) for i in range(b)]
        cases.append((label, b, total, b * padded, [chunks_for(probe, contexts), chunks_for(probe, even),
                                                      chunks_for(probe, [padded] * b)]))
    for _, _, _, _, variants in cases:  # warm-up
        for chunks in variants:
            probe.run(chunks)
    samples = {(i, v): [] for i in range(len(cases)) for v in range(3)}
    for _ in range(args.repeats):  # interleaved: load changes hit every variant alike
        for i, (_, _, _, _, variants) in enumerate(cases):
            for v, chunks in enumerate(variants):
                samples[(i, v)].append(timed(probe, chunks))
    print(f"decode forward, thread CPU ms (median of {args.repeats}, 1 torch thread, block {BLOCK})")
    print(f"{'shape':24s} {'B':>3s} {'sum S':>6s} {'padded S':>8s} {'mixed':>7s} {'sum':>7s} {'padded':>7s} "
          f"{'mixed/sum':>9s} {'mixed/padded':>12s}")
    for i, (label, b, total, padded, _) in enumerate(cases):
        mixed, summed, pad = (statistics.median(samples[(i, v)]) for v in range(3))
        print(f"{label:24s} {b:3d} {total:6d} {padded:8d} {mixed:7.2f} {summed:7.2f} {pad:7.2f} "
              f"{mixed / summed:9.3f} {mixed / pad:12.3f}")


if __name__ == "__main__":
    main()
