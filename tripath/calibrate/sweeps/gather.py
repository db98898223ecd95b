"""Gather sweep: what the tiered Engine's decode step costs over the paged Engine's, all pages on the device.

Every step, for every scheduled sequence and every layer, ``TieredBatchAttention`` (tripath/engine/
tiered/batch_attention.py) allocates a zeroed buffer, appends the new K/V to the sequence's pages
(``TieredKVCache.append``), copies every page of the layer into the buffer (``gather_into``, a Python
loop over chunks with LRU bookkeeping) and starts the next layer's fetch-ahead, even when every page
is on the device. The paged Engine reads the same context with one ``index_copy_`` and one
``gather_blocks``. The profile's decode costs were measured on the paged Engine, so what tiering adds
to a step is the difference, which this sweep times on the two Engines side by side: the same
requests, decode steps interleaved (one tiered step, one paged step: the same contention), the
serving thread's CPU time. Whole steps, because append + gather_into alone miss much of the difference
(the per-sequence loop, mask and fetch-ahead calls are the rest: docs/tiered_kv.md). No tier transfer
happens in it: the device pool holds every page (transfers are the ``paging`` rows).

Rows in the samples CSV: sweeps ``tier_step_c{C}`` (tiered, pages of C tokens), ``tier_step_paged_c{C}``
and ``tier_step_diff_c{C}`` (the paired differences, step by step); layers 0; x1 = reads per step
(batch x layers); x2 = bytes of one layer's prompt per sequence (tokens x bytes per token and layer).
``gather_link`` fits paging_v1 to the median difference / reads against x2, per page size: setup_ms is
the extra of one (sequence, layer) read, the bandwidth its per-byte part. The profile carries it as
``paging.gather``; tripath/simulator/paths/tiered.py charges it per sequence and layer read.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from tripath.calibrate.fit import fit_formula
from tripath.calibrate.samples import Sample, SampleLog
from tripath.calibrate.timer import TimerConfig
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.tier_config import TierConfig
from tripath.profile.profile import Coefficient, CostModel, PagingLink

TIERED, PAGED, DIFF = "tier_step", "tier_step_paged", "tier_step_diff"
GATHER = "gather"  # the profile's paging key (not a link between tiers: the tiered attention's read)
POINTS = ((1, 256), (1, 1024), (2, 512), (4, 256), (4, 1024))  # (batch, prompt tokens per sequence)
REPS_FACTOR = 8  # a difference of tenths of a ms between steps ten times longer: 8x the preset's repetitions
BLOCK_SIZE = 16  # the paged Engine's default block (tripath serve)


def sweep_names(chunk_tokens: int) -> tuple[str, str, str]:
    """The (tiered, paged, difference) sweeps of pages of ``chunk_tokens`` tokens."""
    return f"{TIERED}_c{chunk_tokens}", f"{PAGED}_c{chunk_tokens}", f"{DIFF}_c{chunk_tokens}"


def measure_gather(model: LlamaModel, timer: TimerConfig, log: SampleLog, chunk_tokens: int,
                   points: tuple[tuple[int, int], ...] = POINTS, more_chunks: tuple[int, ...] = ()) -> int:
    """Time interleaved decode steps of a tiered (all pages resident) and a paged Engine per page size
    (``chunk_tokens`` and ``more_chunks``: the tiered read loops over chunks); returns the rows written."""
    return sum(_measure_chunk(model, timer, log, chunk, points) for chunk in dict.fromkeys((chunk_tokens,
                                                                                             *more_chunks)))


def _measure_chunk(model: LlamaModel, timer: TimerConfig, log: SampleLog, chunk_tokens: int,
                   points: tuple[tuple[int, int], ...]) -> int:
    names = sweep_names(chunk_tokens)
    config = model.config
    layers = config.num_layers
    dtype = next(model.parameters()).dtype
    per_layer_token = 2 * config.num_kv_heads * int(config.head_dim) * torch.empty((), dtype=dtype).element_size()
    steps = timer.warmup + timer.reps * REPS_FACTOR
    measured = 0
    for batch, prompt in points:
        prompt = min(prompt, config.max_position_embeddings - steps - 2)
        if prompt < 1:
            continue
        x1, x2 = batch * layers, prompt * per_layer_token
        if all((sweep, 0, x1, x2) in log.done for sweep in names):
            continue
        tiered_ms, paged_ms = (ms[timer.warmup:] for ms in _interleaved(model, batch, prompt, steps, chunk_tokens))
        diff_ms = [t - p for t, p in zip(tiered_ms, paged_ms, strict=True)]
        for sweep, ms in zip(names, (tiered_ms, paged_ms, diff_ms), strict=True):
            log.append(Sample.of(sweep, 0, x1, x2, ms))
            measured += 1
    return measured


def _engine(model: LlamaModel, batch: int, prompt: int, steps: int, chunk: int, tiered: bool) -> Engine:
    tokens = batch * (prompt + steps + 1)
    # every page resident, plus one chunk per layer: the store keeps one page spare (TieredStore.capacity_chunks)
    pages = (batch * (-(-(prompt + steps + 1) // chunk)) + 1) * model.config.num_layers
    extra = {"tiered": TierConfig(chunk, device_pages=pages, host_pages=0, ssd_pages=0)} if tiered else {}
    engine = Engine(model, EngineConfig(batch, batch * prompt, BLOCK_SIZE, -(-tokens // BLOCK_SIZE) + batch,
                                        **extra), torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    for _ in range(batch):
        engine.add_request(torch.randint(0, model.config.vocab_size, (prompt,), generator=gen).tolist(), steps + 1)
    return engine


def _interleaved(model: LlamaModel, batch: int, prompt: int, steps: int, chunk: int) -> tuple[list[float], list[float]]:
    """(tiered ms, paged ms) of each decode step, the two Engines stepped alternately."""
    engines = [_engine(model, batch, prompt, steps, chunk, tiered) for tiered in (True, False)]
    out: tuple[list[float], list[float]] = ([], [])
    try:
        for engine in engines:  # the prompts' prefill (one step at batch x prompt tokens), untimed
            first: set[int] = set()
            while len(first) < batch:
                first.update(engine.step().first_tokens)
        with torch.inference_mode():
            for _ in range(steps):
                for engine, times in zip(engines, out, strict=True):
                    if not engine.has_unfinished:
                        continue
                    start = time.thread_time()
                    engine.step()
                    times.append((time.thread_time() - start) * 1e3)
    finally:
        for engine in engines:
            engine.close()
    return out


def gather_link(samples: list[Sample], kv_bytes_per_token: int, what: str, main_chunk: int) -> PagingLink | None:
    """paging.gather: ``cost`` fitted at ``main_chunk`` tokens per page, ``by_chunk_tokens`` per page size
    measured (when more than one); None without a fit at the main size (``_fit``)."""
    sizes = sorted({int(s.sweep.rsplit("_c", 1)[1]) for s in samples if s.sweep.startswith(DIFF + "_c")})
    fits = {chunk: _fit(samples, chunk, what) for chunk in sizes}
    main = fits.get(main_chunk)
    if main is None:
        return None
    per_chunk = {chunk: m for chunk, m in fits.items() if m is not None} if len(sizes) > 1 else {}
    per_2k = main.evaluate(bytes=2048 * kv_bytes_per_token) - main.evaluate(bytes=0.0)
    return PagingLink(main, per_2k, per_chunk)


def _fit(samples: list[Sample], chunk: int, what: str) -> CostModel | None:
    """paging_v1 fitted to the median paired (tiered − paged) step difference per (sequence, layer) read,
    against one layer's context bytes; None with fewer than two points whose difference is positive (a
    tiering that adds nothing is not fitted). The median of paired differences, not a difference of
    medians or minima: each pair ran back to back, so contention cancels within a pair."""
    diff = sweep_names(chunk)[2]
    points = [(s.x2, s.median_ms / s.x1) for s in sorted(samples, key=lambda s: (s.x1, s.x2)) if s.sweep == diff]
    points = [(b, ms) for b, ms in points if ms > 0]  # at or below zero: noise, left out rather than clipped
    if len(points) < 2:
        return None
    x = np.array([b for b, _ in points], dtype=float)
    y = np.array([ms for _, ms in points], dtype=float)
    data = (f"{len(points)} (batch, context) points, pages of {chunk} tokens: median of paired tiered − paged "
            f"decode steps per (sequence, layer) read, interleaved steps, serving thread's CPU time; {what}")
    result = fit_formula("paging_v1", {"bytes": x}, y, data=data)
    coefficients = {
        "setup_ms": Coefficient(result.coefficients["setup_ms"], "ms", "fitted",
                                "extra of one (sequence, layer) read: buffer, chunk loop, fetch-ahead call"),
        "bandwidth_gbps": Coefficient(result.coefficients["bandwidth_gbps"], "GB/s", "fitted",
                                      "inverse slope: extra per byte of the layer's context read"),
    }
    return CostModel("paging_v1", coefficients, ("bytes",), {"bytes": (float(x.min()), float(x.max()))},
                     result.quality, "the tiered Engine's decode step over the paged Engine's, all pages on the "
                     f"device, per (sequence, layer) read; pages of {chunk} tokens. {what}")
