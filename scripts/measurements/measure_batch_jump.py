"""Decode cost by batch size at small batches, against the profile's decode_v1 price: the B = 1 -> 2 jump.

decode_v1 charges the linear layers d_seq per sequence (ms = d0 + d_seq B + d_ctx S). On CPU a
one-row matmul takes MKL's matrix-vector path and two or three rows take the general one, which costs
far more than one row's worth more (docs/fidelity.md, "decode_v2"), so served steps of 2-4 sequences, the
light scenarios' commonest, cost more than the line through the sweep's points gives and B = 1 less.
This times decode steps at every B in --batches and per-sequence contexts --contexts on the calibration
probe, the points interleaved in a random order (each timed run follows a different shape, and contention
drifts over all points alike), thread CPU time, and prints measured / priced per point; the spread of that
ratio over B at one context is the model-shape error (the overall level also carries the machine's
contention when it is shared).

    .venv/bin/python scripts/measurements/measure_batch_jump.py [--profile cpu-tiny] [--rounds 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="measure_batch_jump.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="cpu-tiny")
    p.add_argument("--batches", default="1,2,3,4,6,8,16", help="comma-separated batch sizes")
    p.add_argument("--contexts", default="64,256,512", help="comma-separated tokens per sequence (cached + 1)")
    p.add_argument("--rounds", type=int, default=15, help="timed runs per point (interleaved)")
    p.add_argument("--seed", type=int, default=0, help="seed of the interleaving order")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    import torch

    from tripath.calibrate.probe import StepProbe
    from tripath.core.data_dirs import MODELS_DIR
    from tripath.engine.model.checkpoint import load_checkpoint
    from tripath.profile.profile import resolve_profile
    from tripath.simulator.costs import IterationCost

    batches = [int(b) for b in args.batches.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    torch.set_num_threads(1)
    profile = resolve_profile(args.profile)
    cost = IterationCost.from_profile(profile)
    _, model = load_checkpoint(str(MODELS_DIR / "tiny-target"), device="cpu")
    probe = StepProbe(model, max(batches) * max(contexts), max_sequences=max(batches))
    points = [(b, c) for c in contexts for b in batches]
    chunks = {pt: probe.chunks_of(tuple((pt[1] - 1, 1) for _ in range(pt[0]))) for pt in points}
    for ch in chunks.values():
        probe.run(ch)
    times: dict[tuple[int, int], list[float]] = {pt: [] for pt in points}
    rng = np.random.default_rng(args.seed)
    for _ in range(args.rounds):
        for i in rng.permutation(len(points)):
            pt = points[i]
            t0 = time.thread_time()
            probe.run(chunks[pt])
            times[pt].append(time.thread_time() - t0)
    rows = []
    for b, c in points:
        keys = cost.keys(b, b * c, c)  # as the simulator prices it: padded to whole blocks
        priced_ms = float(cost.decode_s(b, np.array([keys]))[0]) * 1000.0 - cost.overhead_ms(b, b)  # forward only
        measured_ms = float(np.median(times[(b, c)])) * 1000.0
        rows.append({"batch": b, "context": c, "measured_ms": measured_ms, "priced_ms": priced_ms,
                     "ratio": measured_ms / priced_ms})
    if args.json:
        print(json.dumps({"profile": args.profile, "numbers_from": "thread CPU time on this machine now, median of "
                          f"{args.rounds} interleaved runs; priced from the profile's decode_v1", "points": rows},
                         indent=1))
        return 0
    print(f"measured (thread CPU, median of {args.rounds} interleaved runs, now) / priced (profile {args.profile}, "
          "decode_v1 at padded keys, forward only)")
    for c in contexts:
        sel = [r for r in rows if r["context"] == c]
        print(f"context {c:>5}: " + "  ".join(f"B{r['batch']} {r['measured_ms']:.2f}/{r['priced_ms']:.2f}="
                                              f"{r['ratio']:.2f}" for r in sel))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
