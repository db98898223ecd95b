"""Prefix-hit sweep: what an Engine step that prefills T new tokens over C tokens taken from its prefix cache costs,
against the same prompt prefilled whole, and against what the profile's prefill_v1 charges for both.

A prefix hit is priced by no new coefficient: its suffix is a prefill chunk of T tokens after C cached ones, which
prefill_v1 (c0 + c_tok T + c_attn T (C + (T + 1) / 2)) already prices, as it does a continued chunk of chunked
prefill. This sweep measures that claim on the serving path itself: an Engine with prefix caching on serves a
request whose first C tokens are cached (the step's StepRecord.chunk_shapes must read ((C, T),)), interleaved with
a request of C + T fresh tokens ((0, C + T)), one step each (max_new_tokens 1, so the request ends in its step).
Loading prefix pages from host or SSD moves the same pages the paging sweep's links time (paging.py): no
separate link cost either.

Rows: sweep ``prefix_hit`` (x1 = T, x2 = C) and ``prefix_miss`` (x1 = C + T, x2 = 0), layers 0 (the whole model),
median, min and max step ms over the repetitions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from tripath.calibrate.samples import Sample
from tripath.calibrate.timer import CLOCKS, TimerConfig
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.model import LlamaModel
from tripath.profile.cost_model import CostModel

HIT, MISS = "prefix_hit", "prefix_miss"
POINTS = ((32, 256), (128, 256), (32, 768), (128, 768))  # (new T, cached C), C whole blocks
BLOCK_SIZE = 16


@dataclass(frozen=True)
class PrefixHitCheck:
    """One point: the measured hit and whole-prompt steps and prefill_v1's price of each, in ms."""

    new_tokens: int
    cached_tokens: int
    hit_ms: float
    miss_ms: float
    hit_predicted_ms: float
    miss_predicted_ms: float

    @property
    def saved_ms(self) -> float:
        return self.miss_ms - self.hit_ms

    @property
    def saved_predicted_ms(self) -> float:
        return self.miss_predicted_ms - self.hit_predicted_ms


def measure_prefix_hits(model: LlamaModel, timer: TimerConfig, points: tuple[tuple[int, int], ...] = POINTS,
                        clock: str = "thread", seed: int = 0) -> list[Sample]:
    """Interleaved hit and whole-prompt steps per (T, C) point on a prefix-caching Engine; one Sample each.

    ``clock`` as tripath.calibrate.timer (CPU only; on CUDA the step synchronises and wall time is read).
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock: must be one of {CLOCKS}, got {clock!r}")
    device = next(model.parameters()).device
    now = time.thread_time if clock == "thread" and device.type != "cuda" else time.perf_counter
    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    out: list[Sample] = []
    for new, cached in points:
        if cached % BLOCK_SIZE or new < 1 or cached < BLOCK_SIZE:
            raise ValueError(f"points: need T >= 1 and C a positive multiple of {BLOCK_SIZE}, got ({new}, {cached})")
        total = new + cached
        config = EngineConfig(max_batch_size=1, max_batched_tokens=total, block_size=BLOCK_SIZE,
                              num_blocks=2 * -(-total // BLOCK_SIZE) + 2, prefix_caching=True)
        engine = Engine(model, config)

        def fresh(n: int) -> list[int]:
            return torch.randint(0, vocab, (n,), generator=gen).tolist()

        prefix = fresh(cached)
        engine.generate([prefix + fresh(1)], 1)  # caches the prefix's C / BLOCK_SIZE blocks
        times: dict[str, list[float]] = {HIT: [], MISS: []}
        for rep in range(timer.warmup + timer.reps):
            for name, prompt, shape in ((HIT, prefix + fresh(new), (cached, new)), (MISS, fresh(total), (0, total))):
                engine.add_request(prompt, 1)
                t0 = now()
                record = engine.step()
                ms = (now() - t0) * 1e3
                if record.chunk_shapes != (shape,) or engine.has_unfinished:
                    raise RuntimeError(f"{name} step at (T={new}, C={cached}) ran {record.chunk_shapes}, not {shape}")
                engine.release(record.finished[0])
                if rep >= timer.warmup:
                    times[name].append(ms)
        for name, x1, x2 in ((HIT, new, cached), (MISS, total, 0)):
            ms = times[name]
            out.append(Sample.of(name, 0, x1, x2, ms))
    return out


def prefix_checks(samples: list[Sample], prefill: CostModel, overhead: CostModel | None = None,
                  ) -> list[PrefixHitCheck]:
    """Each hit row with its whole-prompt row and the profile's price of both: prefill_v1 (new_tokens,
    context_tokens), plus the served step's host overhead (overhead_v1, one sequence) when given."""
    if prefill.formula != "prefill_v1":
        raise ValueError(f"prefill: must be a prefill_v1 cost model, got {prefill.formula!r}")

    def step_ms(new: int, context: int) -> float:
        ms = prefill.evaluate(new_tokens=float(new), context_tokens=float(context))
        return ms + (overhead.evaluate(sequences=1.0, new_tokens=float(new)) if overhead is not None else 0.0)

    miss = {s.x1: s.median_ms for s in samples if s.sweep == MISS}
    checks = []
    for s in samples:
        if s.sweep != HIT or s.x1 + s.x2 not in miss:
            continue
        checks.append(PrefixHitCheck(s.x1, s.x2, s.median_ms, miss[s.x1 + s.x2], step_ms(s.x1, s.x2),
                                     step_ms(s.x1 + s.x2, 0)))
    return checks
