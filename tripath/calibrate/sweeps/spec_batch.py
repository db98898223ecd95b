"""Speculative rounds at batch B > 1: what each extra sequence adds to a round, beyond a decode step's share.

The speculative sweep measures c and v(K) at batch 1; a round at batch B priced as (K c + v(K)) x
decode_ms(B, S), the batch-1 ratio times the batch's plain decode step, leaves out the per-sequence work a
the engine round does beyond a plain decode step: K draft tokens per sequence through the draft, K + 1
verify rows per sequence through the target, and the per-sequence bookkeeping of proposing, verifying and
rolling back (the served TPOT error grows with the batch: docs/speculative.md, "Rounds at batch B > 1").
So this sweep times, at the profile's K, full rounds of B sequences (every one proposing, none
prefilling) and plain decode steps of the same B sequences, B in BATCHES, and ``round_per_sequence`` fits

    round(B) = round(1) x decode(B) / decode(1) + (B - 1) x w x decode(1)

by least squares through the origin: w is the extra per additional sequence in batch-1 target decode
steps, 0 where the batch-1 ratio already scales. Prompts: the task's eval prompts, cut or repeated to
PROMPT_TOKENS (a fixed context, so B is the only thing that changes).

Rows (samples CSV; x1 = B, x2 = K): ``spec_batch_round`` the round's median ms, ``spec_batch_decode``
the plain decode step's median ms, both by the job's clock (thread CPU time on a CPU job).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tripath.calibrate.samples import Sample, SampleLog

BATCH_SWEEPS = ("spec_batch_round", "spec_batch_decode")
BATCHES = (1, 2, 4, 8)
PROMPT_TOKENS = 160
NEW_TOKENS = 40  # ~10 full rounds at K = 4 and a = 0.75; the first round (the draft's prompt pass) is left out
ENGINE_BLOCKS, BLOCK_SIZE = 1024, 16  # room for 8 sequences of 160 + 40 tokens, target and draft


def round_per_sequence(rounds: dict[int, float], decodes: dict[int, float]) -> float | None:
    """w (see the module docstring) from median round and decode ms per batch; None without B = 1 and a B > 1.

    Clipped at 0: a round never costs less per extra sequence than the batch-1 ratio times the decode step.
    """
    if 1 not in rounds or 1 not in decodes or decodes[1] <= 0:
        return None
    pairs = [(b, rounds[b], decodes[b]) for b in sorted(rounds) if b > 1 and b in decodes]
    if not pairs:
        return None
    r1, d1 = rounds[1], decodes[1]
    xs = [(b - 1) * d1 for b, _, _ in pairs]
    ys = [r - r1 * d / d1 for _, r, d in pairs]
    w = sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return max(0.0, w)


def _clock(thread: bool) -> Callable[[], float]:
    return time.thread_time if thread else time.perf_counter


def _steps(engine: Any, prompts: list[list[int]], new: int, thread: bool,
           speculative: bool) -> list[float]:
    """Seconds of each full step of len(prompts) sequences: every sequence decoding (proposing, for rounds)."""
    clock, batch, out = _clock(thread), len(prompts), []
    for ids in prompts:
        engine.add_request(ids, new)
    rounds_seen = 0
    while engine.has_unfinished:
        start = clock()
        rec = engine.step()
        seconds = clock() - start
        full = rec.prefill_seqs == 0 and rec.decode_seqs == batch
        if full and speculative:
            full = rec.num_drafts == batch
            rounds_seen += full
            full = full and rounds_seen > 1  # the first round feeds the draft the prompts: a prefill, priced apart
        if full:
            out.append(seconds)
        for rid in rec.finished:
            engine.release(rid)
    return out


def batch_rows(target: Any, draft: Any, prompts: list[list[int]], k: int, layers: int,
               thread: bool, batches: tuple[int, ...] = BATCHES) -> list[Sample]:
    """The two rows per B: rounds and plain decode steps, interleaved per B so contention hits both alike."""
    import torch  # the engine only where it is measured: the fit below stays importable without torch

    from tripath.core.speculative import FixedK
    from tripath.engine.engine import Engine
    from tripath.engine.engine_config import EngineConfig
    from tripath.engine.speculative.decoding import SpeculativeDecoding
    from tripath.engine.speculative.proposers import DraftModelProposer

    engine = EngineConfig(num_blocks=ENGINE_BLOCKS, block_size=BLOCK_SIZE)
    cut = [(p * -(-PROMPT_TOKENS // len(p)))[:PROMPT_TOKENS] for p in prompts if p]
    rows = []
    for b in batches:
        group = [cut[i % len(cut)] for i in range(b)]
        proposer = DraftModelProposer(draft, ENGINE_BLOCKS, BLOCK_SIZE, torch.Generator().manual_seed(1))
        spec = Engine(target, engine, torch.Generator().manual_seed(0), SpeculativeDecoding(proposer, FixedK(k)))
        plain = Engine(target, engine, torch.Generator().manual_seed(0))
        spec.generate([[0] * 8], 4)  # warm-up: one-time costs off the timed steps
        plain.generate([[0] * 8], 2)
        rounds = _steps(spec, group, NEW_TOKENS, thread, True)
        decodes = _steps(plain, group, NEW_TOKENS // 2, thread, False)
        if not rounds or not decodes:
            continue
        for name, seconds in zip(BATCH_SWEEPS, (rounds, decodes), strict=True):
            ms = [s * 1e3 for s in seconds]
            rows.append(Sample.of(name, layers, b, k, ms))
    return rows


def measure_batch(target: Any, draft: Any, prompts: list[list[int]], k: int, log: SampleLog,
                  thread: bool) -> int:
    """Append the batch rows not yet on disk (all or nothing per run); returns the rows written."""
    layers = target.config.num_layers
    keys = [(name, layers, b, k) for b in BATCHES for name in BATCH_SWEEPS]
    if all(key in log.done for key in keys):
        return 0
    written = 0
    for row in batch_rows(target, draft, prompts, k, layers, thread):
        if row.key not in log.done:
            log.append(row)
            written += 1
    return written


def batch_medians(samples: list[Sample], k: int) -> tuple[dict[int, float], dict[int, float]]:
    """({B: round ms}, {B: decode ms}) at K from the samples (the first layer count found)."""
    rows = [s for s in samples if s.sweep in BATCH_SWEEPS and s.x2 == k]
    if not rows:
        return {}, {}
    lay = min(s.layers for s in rows)
    rounds = {s.x1: s.median_ms for s in rows if s.sweep == BATCH_SWEEPS[0] and s.layers == lay}
    decodes = {s.x1: s.median_ms for s in rows if s.sweep == BATCH_SWEEPS[1] and s.layers == lay}
    return rounds, decodes
