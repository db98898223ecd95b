"""The compressed decode step against the full-precision one over a (batch, context) grid, and its fit.

Why a grid: the compression sweep's decode_overhead_ratio is one number, measured at batch 1 over
one prompt, but a compressed store's decode step dequantizes every cached token it reads, so its
extra time grows with batch x context while the full-precision step barely does, and the batch-1
ratio under-prices served batches (docs/simulator_paths.md, KV compression).

What is timed, per mode of ``modes`` and for full precision ("fp"): one decode step of B sequences
of C tokens each (total context S = B x C) as ``Engine.step`` runs it: the Engine built for the mode
(projections fused as served; fp: the paged pool and PagedAttention, the decode sweep's reference;
a quantized mode: the Engine's CompressedKVStore and CompressedAttention), model forward over the B
new tokens, logits of every row, greedy argmax. The store starts as serving leaves it after a
prefill (every complete block sealed, the last one staged); then DECODE_WARMUP + DECODE_STEPS
consecutive steps run, each sequence growing one token per step, so over the DECODE_STEPS = one
block timed steps every sequence seals exactly one block (the sealing cost amortised as in serving),
and the context of the timed steps averages C. Token ids and cached values do not change the cost.
Median of the timed steps, on the job's clock (thread CPU time on a CPU).

Rows: sweep ``comp_decode_<mode>``, x1 = B, x2 = S (the decode sweep's convention). The fit
(tripath/profile/dequant.py): extra_ms = mode step - fp step, measured in the same run, as
q0 + q_seq B + q_ctx S + q_len S/B, non-negative least squares with residuals relative to the
compressed step (what the simulator prices).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy.optimize import nnls

from tripath.calibrate.samples import Sample, SampleLog
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.model.model import LlamaModel
from tripath.profile.cost_model import Coefficient, FitQuality
from tripath.profile.dequant import COEFFICIENTS, UNITS, DecodeDequant

# Served batches are mostly 2-8 sequences of 128-800 tokens, and the extra is not linear between grid
# points (B = 1 attends through a different path than B >= 2; the chunk loop steps every 256 tokens), so
# the grid covers the served shapes (a sparser one mispriced them: docs/simulator_paths.md, KV compression).
DECODE_BATCHES = (1, 2, 4, 8, 16)
DECODE_CONTEXTS = (128, 384, 640, 1024)  # tokens per sequence (the tiny target holds 2048)
DECODE_WARMUP = 2
DECODE_STEPS = 16  # = the engine's block size: each sequence seals one block over the timed steps
BLOCK = 16
PREFIX = "comp_decode_"
NOTES = {"q0": "per step", "q_seq": "per decoding sequence (store writes, block bookkeeping)",
         "q_ctx": "per cached token read and dequantized",
         "q_len": "per token of the longest sequence (chunk loop: fixed ops per chunk of blocks); S/B in the "
                  "simulator"}


def grid(model: LlamaModel, batches: tuple[int, ...] = DECODE_BATCHES,
         contexts: tuple[int, ...] = DECODE_CONTEXTS) -> list[tuple[int, int]]:
    """(batch, context per sequence) points whose timed steps fit in the model's positions."""
    room = model.config.max_position_embeddings - DECODE_STEPS
    return [(b, c) for b in batches for c in contexts if DECODE_WARMUP + 8 < c <= room]


def _engine(model: LlamaModel, mode: str, batch: int, context: int) -> tuple[Engine, list[list[int]]]:
    per = -(-(context + DECODE_STEPS) // BLOCK)
    config = EngineConfig(max_batch_size=batch, block_size=BLOCK, num_blocks=batch * per,
                          kv_compression=None if mode == "fp" else mode)
    return Engine(model, config), [list(range(i * per, (i + 1) * per)) for i in range(batch)]


@torch.inference_mode()
def step_times(model: LlamaModel, mode: str, batch: int, context: int, clock: Callable[[], float]) -> list[float]:
    """ms of each timed decode step of ``batch`` sequences around ``context`` tokens each (module docstring)."""
    engine, tables = _engine(model, mode, batch, context)
    start = context - DECODE_STEPS // 2 - DECODE_WARMUP  # cached tokens before the first step
    store = engine.backend.store if mode != "fp" else None  # the compressed back end's
    if store is not None:  # as a prefill leaves it: complete blocks sealed, the partial last block staged
        for table in tables:
            for index in range(-(-start // BLOCK)):
                store.open_block(table[index])
                if store.sealable(index, start):
                    store.seal(table[index])
    vocab, request_ids = engine.model.config.vocab_size, list(range(batch))
    ids = (torch.arange(batch, dtype=torch.int64) % vocab).unsqueeze(0)
    rows = torch.arange(batch, dtype=torch.int64)
    out = []
    for step in range(DECODE_WARMUP + DECODE_STEPS):
        chunks = [SequenceChunk(start + step, 1, table) for table in tables]
        t0 = clock()
        attention = engine.backend.attention(chunks, request_ids)
        engine.model(ids, attention.positions, attention, logits_index=rows)[0].argmax(-1).tolist()
        if step >= DECODE_WARMUP:
            out.append((clock() - t0) * 1e3)
    return out


def measure_decode_grid(model: LlamaModel, modes: tuple[str, ...], log: SampleLog, clock: Callable[[], float],
                        points: list[tuple[int, int]] | None = None) -> int:
    """fp and each of ``modes`` at every grid point not yet on disk; returns the points measured.
    fp and the modes of one point are timed back to back, so slow drift of the machine hits both."""
    layers, measured = model.config.num_layers, 0
    for batch, context in grid(model) if points is None else points:
        for mode in ("fp", *modes):
            key = (PREFIX + mode, layers, batch, batch * context)
            if key in log.done:
                continue
            ms = step_times(model, mode, batch, context, clock)
            log.append(Sample.of(key[0], layers, batch, batch * context, ms))
            measured += 1
    return measured


def _fit(x: np.ndarray, fp: np.ndarray, step: np.ndarray) -> np.ndarray:
    design = np.c_[np.ones_like(x[:, 0]), x[:, 0], x[:, 1], x[:, 1] / x[:, 0]]
    coef, _ = nnls(design / step[:, None], (step - fp) / step)
    return coef


def _predict(coef: np.ndarray, x: np.ndarray, fp: np.ndarray) -> np.ndarray:
    return fp + coef[0] + coef[1] * x[:, 0] + coef[2] * x[:, 1] + coef[3] * x[:, 1] / x[:, 0]


def decode_extra(samples: list[Sample], mode: str, what: str) -> DecodeDequant | None:
    """The mode's DecodeDequant from the comp_decode rows (None without at least 5 points on both sides)."""
    fp = {(s.x1, s.x2): s.median_ms for s in samples if s.sweep == PREFIX + "fp"}
    got = {(s.x1, s.x2): s.median_ms for s in samples if s.sweep == PREFIX + mode}
    keys = sorted(k for k in got if k in fp)
    if len(keys) < len(COEFFICIENTS) + 1:
        return None
    x = np.array(keys, dtype=float)
    f = np.array([fp[k] for k in keys])
    m = np.array([got[k] for k in keys])
    coef = _fit(x, f, m)
    ape = np.abs(_predict(coef, x, f) / m - 1)
    held = [abs(float(_predict(_fit(np.delete(x, i, 0), np.delete(f, i), np.delete(m, i)), x[i:i + 1],
                               f[i:i + 1])[0]) / m[i] - 1) for i in range(len(keys))]
    extra_ape = np.abs((_predict(coef, x, f) - f) / (m - f) - 1) if np.all(m > f) else None
    fit = FitQuality(len(keys), float(ape.mean()), float(ape.max()), float(np.mean(held)),
                     "non-negative least squares of (mode step - fp step), residuals relative to the mode step; "
                     "holdout: leave-one-out", f"comp_decode rows of the samples CSV: {what}")
    extra_note = "" if extra_ape is None else f"; the extra alone: worst error {extra_ape.max():.1%}"
    return DecodeDequant(
        {n: Coefficient(float(c), UNITS[n], "fitted", NOTES[n]) for n, c in zip(COEFFICIENTS, coef, strict=True)},
        tuple((int(b), int(s), float(a), float(c)) for (b, s), a, c in zip(keys, f, m, strict=True)),
        fit,
        f"decode step with {mode} KV (the Engine's compressed store) minus with the paged pool, timed back to back "
        f"at batch {sorted({k[0] for k in keys})} x context per sequence "
        f"{sorted({k[1] // k[0] for k in keys})}, median of {DECODE_STEPS} consecutive steps (each sequence "
        f"seals one block); step fit worst error {ape.max():.1%}{extra_note}; {what}")
