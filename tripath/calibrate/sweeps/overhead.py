"""Step-overhead sweep: what a served ``Engine.step()`` costs beyond the model forward (overhead_v1).

The prefill and decode sweeps time the forward alone (``StepProbe.run``: build the step's
PagedAttention, run the model, pick the next tokens). A served step does more around it, once per
iteration: the scheduler picks the sequences and allocates blocks, the packed token ids and the block
tables are built from the sequences, the sampler runs, tokens are appended, finished sequences
retire, and the StepRecord is booked. Vidur prices the same thing as per-iteration "CPU overhead"
(schedule, prepare inputs, sampler, process outputs) as a function of batch size.

Each point serves real steps through the probe's own ``Engine`` (the same model, KV pool and
transforms) in steady state and, rep by rep, times the whole ``Engine.step()`` and the forward alone
over the very same chunks (the sequences' real block tables), on the job's clock; the point's
overhead is the median of the paired differences (step - forward). Two kinds of points:

- decode: B sequences of ``context`` tokens each decode one token (x1 = B sequences, x2 = B new tokens),
  for every batch of the preset's decode grid;
- prefill: one fresh request of T prompt tokens is prefilled (and retires: max_new_tokens = 1)
  (x1 = 1, x2 = T), for a few chunk sizes of the preset's prefill grid, so the new-token term is
  separated from the per-sequence one.

Rows: ``overhead`` (the paired differences: median, min, max), ``overhead_step`` and
``overhead_forward`` (the two sides, for inspection). The fit is overhead_v1:
ms = o0 + o_seq * sequences + o_tok * new_tokens (tripath/profile/formulas.py).

Switched on by ``tripath calibrate --step-overhead`` (``CalibrationJob.step_overhead``); docs/fidelity.md
gives the figures measured on the tiny target.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy.optimize import lsq_linear

from tripath.calibrate.fit import FOLDS, FitRefused, FitResult, sig6
from tripath.calibrate.presets import Preset
from tripath.calibrate.probe import StepProbe
from tripath.calibrate.samples import Sample, SampleLog
from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.sequence import Sequence
from tripath.profile.profile import Coefficient, CostModel, FitQuality

SWEEP = "overhead"
PREFILL_MAX = 512
# paired repetitions per point = this x the preset's reps: the overhead is a small difference of two times
# (tenths of a ms beside steps of several ms), so it needs more pairs than a time does; decode steps are cheap
REPS_FACTOR = 3
ROWS = (SWEEP, "overhead_step", "overhead_forward")
FORMULA = "overhead_v1"
INPUTS = ("sequences", "new_tokens")
UNITS = {"o0": "ms", "o_seq": "ms/sequence", "o_tok": "ms/token"}
NOTES = {"o0": "fixed host work of one served step outside the forward (schedule, record, sync)",
         "o_seq": "per scheduled sequence (block table, sampler row, token append, bookkeeping)",
         "o_tok": "per new token (packing token ids, slot mapping)"}
DESCRIBE = ("host work of one served Engine.step() beyond the model forward, per iteration: sequences "
            "scheduled and new tokens in the step")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def decode_context(preset: Preset, max_len: int) -> int:
    """Tokens each decoding sequence holds: the preset's second decode context (a typical served length),
    leaving room for the point's steps within the model's positions."""
    contexts = sorted(preset.decode_context)
    context = contexts[min(1, len(contexts) - 1)]
    room = max_len - (preset.timer.warmup + REPS_FACTOR * preset.timer.reps + 2)
    return max(1, min(context, room))


def overhead_points(preset: Preset, max_len: int) -> list[tuple[int, int]]:
    """(sequences, new_tokens): every decode batch of the preset as (B, B), then (1, T) for the smallest,
    the middle and the largest prefill chunk of the preset that fits the model."""
    decodes = [(b, b) for b in sorted(set(preset.decode_batch))]
    # prefills up to PREFILL_MAX tokens: the overhead is a difference of two times, and a long prefill's own
    # run-to-run spread (about 1 % of its forward) would swamp it
    sizes = sorted({t for t in preset.prefill_new if t < max_len and t <= PREFILL_MAX}) or [min(preset.prefill_new)]
    picks = sorted({sizes[0], sizes[len(sizes) // 2], sizes[-1]}) if sizes else []
    # a 1-token prefill has the decode point (1, 1)'s key: it is measured once, as a decode
    return decodes + [(1, t) for t in picks if (1, t) not in decodes]


def is_decode(point: tuple[int, int], preset: Preset) -> bool:
    """Whether ``overhead_points`` made this point from the decode grid (else it is a prefill point)."""
    sequences, new_tokens = point
    return sequences == new_tokens and sequences in preset.decode_batch


def _prompt(tokens: int, vocab: int, salt: int) -> list[int]:
    # token ids do not change the cost; a fixed pattern keeps runs identical
    return [(salt + i) % vocab for i in range(tokens)]


def _timed(fn: Callable[[], object], clock: Callable[[], float], device: torch.device) -> float:
    """ms of one call on ``clock``, with the device idle before and after (CUDA: synchronized)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = clock()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (clock() - t0) * 1e3


def _pair(probe: StepProbe, chunks: list[SequenceChunk], rep: int, clock: Callable[[], float],
          device: torch.device) -> tuple[float, float]:
    """(step ms, forward ms) of one rep; the order alternates so neither side always runs on warm caches."""
    engine = probe.engine
    if rep % 2 == 0:
        forward = _timed(lambda: probe.run(chunks), clock, device)
        step = _timed(engine.step, clock, device)
    else:
        step = _timed(engine.step, clock, device)
        forward = _timed(lambda: probe.run(chunks), clock, device)
    return step, forward


def _drain(probe: StepProbe, ids: list[int]) -> None:
    engine = probe.engine
    while engine.has_unfinished:
        engine.step()
    for rid in ids:
        engine.release(rid)


def _decode_chunks(probe: StepProbe, seqs: list[Sequence]) -> list[SequenceChunk]:
    """The next step's chunks: one new token after what each sequence has computed, in its own blocks. The
    scheduler adds a block only when it schedules the step, so a sequence whose blocks are full gets a spare
    one from the top of the pool (a free block: whatever the forward writes there is never read)."""
    engine, spare = probe.engine, probe.num_blocks
    chunks = []
    for seq in seqs:
        table = list(engine.kv_manager.block_table(seq.request_id))
        while len(table) * engine.config.block_size < seq.num_computed + 1:
            spare -= 1
            table.append(spare)
        chunks.append(SequenceChunk(seq.num_computed, 1, table))
    return chunks


def _decode_point(probe: StepProbe, batch: int, context: int, reps: int, warmup: int,
                  clock: Callable[[], float], device: torch.device) -> list[tuple[float, float]]:
    engine = probe.engine
    steps = warmup + reps
    need = batch * _ceil_div(context + steps + 2, engine.config.block_size)
    free = probe.num_blocks - engine.kv_manager.blocks_used
    if need > free:
        raise ValueError(f"overhead point ({batch}, {batch}) needs {need} KV blocks, the probe's pool has {free}")
    ids = [engine.add_request(_prompt(context, probe.vocab, i), steps + 2) for i in range(batch)]
    while any(not engine.sequences[rid].output_ids for rid in ids):  # prefill (maybe chunked) to steady decode
        engine.step()
    pairs = []
    for rep in range(steps):
        chunks = _decode_chunks(probe, [engine.sequences[rid] for rid in ids])
        pair = _pair(probe, chunks, rep, clock, device)
        if rep >= warmup:
            pairs.append(pair)
    _drain(probe, ids)
    return pairs


def _prefill_point(probe: StepProbe, tokens: int, reps: int, warmup: int, clock: Callable[[], float],
                   device: torch.device) -> list[tuple[float, float]]:
    engine = probe.engine
    pairs = []
    for rep in range(warmup + reps):
        rid = engine.add_request(_prompt(tokens, probe.vocab, rep), 1)  # prefilled, first token, retired
        # the forward over a fresh run of blocks of the same shape (attention cost depends on shapes only)
        chunks = probe.chunks_prefill(tokens, 0)
        pair = _pair(probe, chunks, rep, clock, device)
        _drain(probe, [rid])
        if rep >= warmup:
            pairs.append(pair)
    return pairs


def missing(preset: Preset, max_len: int, layers: int, log: SampleLog) -> list[tuple[int, int]]:
    """The overhead points not yet on disk for this layer count."""
    return [p for p in overhead_points(preset, max_len) if (SWEEP, layers, *p) not in log.done]


def measure_overhead(probe: StepProbe, preset: Preset, max_len: int, layers: int, log: SampleLog,
                     clock: Callable[[], float], device: torch.device,
                     after_point: Callable[[], None] | None = None) -> int:
    """Serve each missing point through ``probe.engine`` and append its three rows; returns points measured."""
    timer = preset.timer
    reps = REPS_FACTOR * timer.reps
    context = decode_context(preset, max_len)
    measured = 0
    for sequences, new_tokens in missing(preset, max_len, layers, log):
        if is_decode((sequences, new_tokens), preset):
            pairs = _decode_point(probe, sequences, context, reps, timer.warmup, clock, device)
        else:
            pairs = _prefill_point(probe, new_tokens, reps, timer.warmup, clock, device)
        diffs = [s - f for s, f in pairs]
        for name, values in ((SWEEP, diffs), ("overhead_step", [s for s, _ in pairs]),
                             ("overhead_forward", [f for _, f in pairs])):
            log.append(Sample.of(name, layers, sequences, new_tokens, values))
        measured += 1
        if after_point is not None:
            after_point()
    return measured


def overhead_rows(samples: list[Sample]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sequences, new_tokens, overhead ms, whole step ms) per point: the median paired difference and the
    median step. One layer count, the deepest timed: the forward is subtracted, so what is left is host
    work that does not scale with depth."""
    rows = [s for s in samples if s.sweep == SWEEP]
    if not rows:
        return np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)
    deepest = max(s.layers for s in rows)
    rows = sorted((s for s in rows if s.layers == deepest), key=lambda s: (s.x1, s.x2))
    steps = {(s.x1, s.x2): s.median_ms for s in samples if s.sweep == "overhead_step" and s.layers == deepest}
    return (np.array([s.x1 for s in rows], dtype=float), np.array([s.x2 for s in rows], dtype=float),
            np.array([s.median_ms for s in rows], dtype=float),
            np.array([steps[(s.x1, s.x2)] for s in rows], dtype=float))


def _solve(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares on ABSOLUTE residuals with every coefficient >= 0: the overhead is a small difference
    of two times and may be ~0 (or a little below, by noise) at some points, where relative residuals
    would blow up."""
    scale = np.linalg.norm(design, axis=0)
    scale[scale == 0] = 1.0
    return lsq_linear(design / scale, y, bounds=(0.0, np.inf), method="bvls").x / scale


def fit_overhead(samples: list[Sample], *, data: str, folds: int = FOLDS) -> FitResult | None:
    """overhead_v1 fitted to the overhead rows (None when there are none). Errors are reported relative
    to the whole served step at each point (what the step's prediction is off by), not to the overhead."""
    seqs, toks, ms, step_ms = overhead_rows(samples)
    if len(ms) == 0:
        return None
    n_coef = len(UNITS)
    if len(ms) < n_coef:
        raise FitRefused(f"{FORMULA}: {len(ms)} points cannot determine {n_coef} coefficients")
    design = np.column_stack([np.ones_like(seqs), seqs, toks])  # [n, 3]: o0, o_seq, o_tok
    coef = np.array([sig6(c) for c in _solve(design, ms)])
    predicted = design @ coef
    err = np.abs(predicted - ms) / step_ms
    holdout = None
    k = min(folds, len(ms))
    if k >= 2 and len(ms) - len(ms) // k >= 2 * n_coef:
        held = np.empty_like(ms)
        fold = np.arange(len(ms)) % k
        for i in range(k):
            train, test = fold != i, fold == i
            held[test] = design[test] @ _solve(design[train], ms[train])
        holdout = sig6(float(np.mean(np.abs(held - ms) / step_ms)))
    method = ("least squares on absolute residuals, coefficients >= 0; errors relative to the whole served "
              "step's time; holdout: " + (f"{k}-fold cross-validation" if holdout is not None else "too few points"))
    quality = FitQuality(len(ms), sig6(float(err.mean())), sig6(float(err.max())), holdout, method, data)
    coefficients = dict(zip(UNITS, (float(c) for c in coef), strict=True))
    return FitResult(FORMULA, coefficients, quality, predicted)


def overhead_cost(samples: list[Sample], *, data: str, note: str) -> tuple[CostModel, FitResult] | None:
    """The profile's costs.step_overhead from the samples (None when the sweep did not run)."""
    result = fit_overhead(samples, data=data)
    if result is None:
        return None
    seqs, toks, _, _ = overhead_rows(samples)
    coefficients = {name: Coefficient(value, UNITS[name], "fitted", NOTES[name])
                    for name, value in result.coefficients.items()}
    domain = {"sequences": (float(seqs.min()), float(seqs.max())), "new_tokens": (float(toks.min()), float(toks.max()))}
    model = CostModel(FORMULA, coefficients, INPUTS, domain, result.quality, f"{DESCRIBE}. {note}".strip())
    return model, result
