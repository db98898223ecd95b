"""How much a whole Engine.step costs beyond the forward pass the profile was calibrated on.

tripath/calibrate/probe.py times one engine forward (paged attention, fused projections) without the
scheduler, the input packing and the sampler; the serving loop runs Engine.step, which has them.
This script times, in the same run, decode-only and prefill-only Engine.steps and the
calibration's own probe forward (tripath.calibrate.probe.StepProbe) of the same shape, on the tiny target
in this thread's CPU time (time.thread_time, one torch thread: the calibration's clock), and
prints both against the profile's prediction. probe / profile shows how much this machine's state
(other jobs sharing caches and cores) inflates even CPU time right now; step / probe is the cost
of the engine's scheduler, input packing and sampler, which the profile does not contain.

    .venv/bin/python scripts/measurements/measure_step_overhead.py [--profile cpu-tiny] [--repeats 15] \
        [--kv-compression int8]

With --kv-compression MODE the Engine keeps its KV in that mode (EngineConfig.kv_compression) and
the profile's prediction is multiplied by the mode's decode_overhead_ratio, as the simulator does;
the probe stays full precision (it is the calibration's forward).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tripath.calibrate.probe import StepProbe
from tripath.core.data_dirs import MODELS_DIR
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.profile.profile import resolve_profile


def decode_step_ms(engine: Engine, batch: int, context: int, repeats: int) -> float:
    """Median CPU ms of decode steps with ``batch`` sequences each holding about ``context`` tokens."""
    ids = [engine.add_request([65] * context, repeats + 2) for _ in range(batch)]
    engine.step()  # the prefill of every prompt (one step: the token budget holds them)
    samples = []
    for _ in range(repeats):
        start = time.thread_time()
        engine.step()
        samples.append((time.thread_time() - start) * 1000.0)
    while engine.has_unfinished:
        engine.step()
    for i in ids:
        engine.release(i)
    return statistics.median(samples)


def prefill_step_ms(engine: Engine, tokens: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        rid = engine.add_request([65] * tokens, 1)
        start = time.thread_time()
        engine.step()
        samples.append((time.thread_time() - start) * 1000.0)
        engine.release(rid)
    return statistics.median(samples)


def probe_ms(probe: StepProbe, batch: int, new: int, context: int, repeats: int) -> float:
    """Median CPU ms of the calibration's forward: ``batch`` decodes over ``context`` tokens, or one prefill."""
    chunks = probe.chunks_decode(batch, context) if new == 1 else probe.chunks_prefill(new, context)
    probe.run(chunks)  # warm-up
    samples = []
    for _ in range(repeats):
        start = time.thread_time()
        probe.run(chunks)
        samples.append((time.thread_time() - start) * 1000.0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu-tiny")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--kv-compression", help="Engine KV mode (EngineConfig.kv_compression), e.g. int8")
    args = parser.parse_args()
    torch.set_num_threads(1)
    profile = resolve_profile(args.profile)
    _, model = load_checkpoint(MODELS_DIR / "tiny-target", device="cpu")
    config = EngineConfig(64, 16384, 16, 2048, kv_compression=args.kv_compression)
    engine = Engine(model, config, torch.Generator().manual_seed(0))
    overhead = 1.0
    if args.kv_compression:
        overhead = profile.compression[args.kv_compression].decode_overhead_ratio.value
    engine.generate([[0] * 8], 4)  # warm-up
    _, probe_model = load_checkpoint(MODELS_DIR / "tiny-target", device="cpu")
    probe = StepProbe(probe_model, max_tokens=16 * 1024, max_sequences=64)
    print(f"CPU ms (median of {args.repeats}, 1 thread): Engine.step (KV {args.kv_compression or 'full precision'}), "
          f"the calibration probe's forward, and profile {args.profile} ({profile.source}) x {overhead:.3f}")
    print("kind     batch  tokens/seq  step_ms  probe_ms  profile_ms  probe/profile  step/probe")
    rows = [("decode", b, c) for b, c in ((1, 256), (4, 256), (8, 256), (16, 256), (8, 64), (8, 768))]
    rows += [("prefill", 1, t) for t in (64, 256, 768)]
    for kind, batch, tokens in rows:
        if kind == "decode":
            step = decode_step_ms(engine, batch, tokens, args.repeats)
            # the engine's decode sequences hold tokens + 1 (prompt and the first token) when attending
            fwd = probe_ms(probe, batch, 1, batch * (tokens + 1), args.repeats)
            predicted = profile.decode_ms(batch, batch * (tokens + 1)) * overhead
        else:
            step = prefill_step_ms(engine, tokens, args.repeats)
            fwd = probe_ms(probe, 1, tokens, 0, args.repeats)
            predicted = profile.prefill_ms(tokens, 0)
        print(f"{kind:7s}  {batch:5d}  {tokens:10d}  {step:7.2f}  {fwd:8.2f}  {predicted:10.2f}  "
              f"{fwd / predicted:13.2f}  {step / fwd:10.2f}")


if __name__ == "__main__":
    main()
