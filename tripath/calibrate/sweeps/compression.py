"""Compression sweep: per KV-compression mode, bytes per token, decode-step time, quality and acceptance.

Each mode of ``MEASURED_MODES`` (tripath/engine/kv/modes.py) and full precision ("fp", the
reference) decodes the same eval prompts greedily at batch 1 through the mode's attention cache
(``make_cache``), one token per step after a full-precision-schedule prefill.  Measured per mode:

- ``comp_bytes``: KV bytes per token of context at the end of each prompt: for the quantized modes the
  resident tensor storage of tripath/engine/kv/compressed_store.py (codes, fp16 scales and zero points,
  heavy-hitter rows, full-precision staged blocks), for "window" and "fp" ``cache_bytes_per_token``;
- ``comp_step``: the CPU time of each decode step (thread CPU time, or wall time on a multi-thread
  run / GPU), ms; the quantized modes attend through the compressed store (dequantizing one chunk of
  blocks at a time, tripath/engine/kv/compressed_attention.py), the others through their caches;
- ``comp_agree``: COUNTS: median_ms = min_ms = max_ms = positions where the mode's greedy argmax
  equals full precision's, reps = positions compared, teacher-forced on full precision's own
  greedy text (tripath.engine.kv.quality.teacher_forced_logits);
- ``comp_prefill``: prefill of a PREFILL_LENGTHS-token prompt (x2 = its length) in one forward,
  for fp through the engine's paged pool (PagedAttention over KVTensors) and for the quantized modes
  through the compressed store (every token quantized into it), thread CPU time, median of
  PREFILL_REPS, ms; fitted per quantized mode as prefill_overhead_ratio (median over lengths of
  the mode's time / fp's);
  ``comp_prefill_ref`` (x1 = the stored mode's index): full precision's prefill timed alternately with
  the mode's at each length, the reference of its ratio (older sample logs: the fp pass's rows);
- ``comp_accept`` (only with a draft): COUNTS of greedy speculative acceptance at K with the target
  reading compressed KV (tripath.engine.kv.quality.greedy_acceptance): median_ms = accepted,
  reps = accepted + rejections.

Rows: x1 = the mode's index in ``kv_compression.MODES``, x2 = 0.  A mode is measured whole or skipped
(resume).  The decode overhead of the quantized modes is that of on-the-fly dequantization in PyTorch
ops against the full-precision dense cache, not of a fused low-bit GPU kernel.

Then, for the modes served through the compressed store (STORED_MODES), the decode step as the Engine
serves it, against the paged pool, over a grid of (batch, context): tripath/calibrate/sweeps/compression_decode.py
(rows ``comp_decode_<mode>``), fitted into each mode's ``decode_extra``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

from tripath.calibrate.samples import Sample, SampleLog
from tripath.calibrate.sweeps.compression_decode import decode_extra, measure_decode_grid
from tripath.engine.kv.compressed_attention import CompressedAttention
from tripath.engine.kv.compressed_store import STORE_MODES, CompressedKVStore, StoreConfig
from tripath.engine.kv.modes import MODES, KVCompression, cache_bytes_per_token, make_cache
from tripath.engine.kv.paged import KVTensors
from tripath.engine.kv.paged_attention import PagedAttention, SequenceChunk
from tripath.engine.kv.quality import greedy_acceptance, greedy_with_cache, teacher_forced_logits
from tripath.engine.model.model import LlamaModel
from tripath.profile.profile import Coefficient, CompressionMode

MEASURED_MODES = ("int8", "int4", "mixed-int4", "window")
STORED_MODES = tuple(m for m in MEASURED_MODES if m in STORE_MODES)  # served through the compressed store
COMP_SWEEPS = ("comp_bytes", "comp_step", "comp_agree", "comp_accept")  # comp_prefill: only fp and stored modes
NEW_TOKENS = 32
# prompt tokens of the prefill timing (the tiny target holds 2048). The ratio is not linear in length: the
# store's chunked attention (256-key chunks) and the per-block sealing make it rise from ~1.3 at 128 tokens
# to ~2 by 256 (docs/simulator_paths.md has the measured ratios), so a sparse grid misprices served prompts
# (median ~200 tokens): they need the dense grid.
PREFILL_LENGTHS = (64, 128, 192, 256, 384, 512, 768, 1024)
PREFILL_REPS = 3
REF_SWEEP = "comp_prefill_ref"  # fp prefill timed alternately with a stored mode's (x1 = the mode's index)


class _StoreSequence:
    """One sequence over a CompressedKVStore, called like a cache: each call is one engine step."""

    def __init__(self, model: LlamaModel, mode: KVCompression, tokens: int) -> None:
        param = next(model.parameters())
        config = StoreConfig(mode.mode, value_group=mode.value_group, sink_tokens=mode.sink_tokens,
                             recent_tokens=mode.recent_tokens, heavy_fraction=mode.heavy_fraction)
        self.table = list(range(-(-tokens // config.block_size)))
        self.store = CompressedKVStore(model.config, len(self.table), config, param.dtype, param.device)
        self.group, self.length = model.config.kv_group_size, 0

    def forward(self, model: LlamaModel, ids: torch.Tensor) -> torch.Tensor:
        att = CompressedAttention(self.store, [SequenceChunk(self.length, ids.shape[1], self.table)], self.group)
        self.length += ids.shape[1]
        return model(ids, att.positions, att)

    def bytes_per_token(self) -> float:
        return self.store.resident_bytes()["kv"] / self.length


@torch.inference_mode()
def _decode(model: LlamaModel, prompt: list[int], new_tokens: int, mode: KVCompression,
            clock: Callable[[], float]) -> tuple[list[float], float]:
    """Greedy decode through the mode's cache: (seconds per decode step, stored bytes per token)."""
    if _stored(mode):
        seq = _StoreSequence(model, mode, len(prompt) + new_tokens)
        logits = seq.forward(model, torch.tensor([prompt]))[0, -1]
        seconds = []
        for _ in range(new_tokens):
            start = clock()
            logits = seq.forward(model, torch.tensor([[int(logits.argmax())]]))[0, -1]
            seconds.append(clock() - start)
        return seconds, seq.bytes_per_token()
    cache = make_cache(mode, model.config.num_layers)
    logits = model(torch.tensor([prompt]), attention=cache)[0, -1]
    seconds = []
    for i in range(new_tokens):
        pos = torch.tensor([[len(prompt) + i]])
        start = clock()
        logits = model(torch.tensor([[int(logits.argmax())]]), pos, cache)[0, -1]
        seconds.append(clock() - start)
    return seconds, cache_bytes_per_token(cache)


@torch.inference_mode()
def _prefill_ms(model: LlamaModel, ids: list[int], mode: KVCompression, clock: Callable[[], float]) -> float:
    """One prompt's prefill in one forward, ms: into the compressed store (quantized modes) or the paged pool."""
    if _stored(mode):
        seq = _StoreSequence(model, mode, len(ids))
        start = clock()
        seq.forward(model, torch.tensor([ids]))
        return (clock() - start) * 1e3
    param, bs = next(model.parameters()), StoreConfig(mode.mode).block_size
    table = list(range(-(-len(ids) // bs)))
    kv = KVTensors.allocate(model.config, len(table), bs, param.dtype, param.device)
    start = clock()
    att = PagedAttention(kv, [SequenceChunk(0, len(ids), table)], model.config.kv_group_size)
    model(torch.tensor([ids]), att.positions, att)
    return (clock() - start) * 1e3


def _stored(mode: KVCompression) -> bool:
    return mode.mode in STORE_MODES and mode.bits is not None


def _prefill_rows(model: LlamaModel, prompt: list[int], mode: KVCompression, index: int,
                  clock: Callable[[], float]) -> list[Sample]:
    """comp_prefill rows of one mode: each PREFILL_LENGTHS prompt (the eval prompt repeated) PREFILL_REPS times.
    A stored mode's prompts alternate with full precision's (REF_SWEEP rows, x1 = the mode's index), so the
    ratio is taken between times measured seconds apart, not minutes (the fp pass) on a drifting machine."""
    rows, layers = [], model.config.num_layers
    reference = _stored(mode)
    fp = KVCompression("fp")
    for length in prefill_lengths(model):
        ids = (prompt * (length // len(prompt) + 1))[:length]
        ms, ref = [], []
        for _ in range(PREFILL_REPS):
            if reference:
                ref.append(_prefill_ms(model, ids, fp, clock))
            ms.append(_prefill_ms(model, ids, mode, clock))
        rows.append(Sample.of("comp_prefill", layers, index, length, ms))
        if reference:
            rows.append(Sample.of(REF_SWEEP, layers, index, length, ref))
    return rows


def prefill_lengths(model: LlamaModel) -> tuple[int, ...]:
    """PREFILL_LENGTHS the model's positions hold (a smaller test model times the shorter ones only)."""
    return tuple(n for n in PREFILL_LENGTHS if n <= model.config.max_position_embeddings)


def _keys(index: int, layers: int, with_draft: bool, lengths: tuple[int, ...]) -> list[tuple[str, int, int, int]]:
    names = COMP_SWEEPS if with_draft else COMP_SWEEPS[:3]
    prefill = ("comp_prefill",) if index == MODES.index("fp") else ("comp_prefill", REF_SWEEP)
    return [(name, layers, index, 0) for name in names] + [(p, layers, index, n) for n in lengths for p in prefill]


def measure_compression(target: LlamaModel, draft: LlamaModel | None, prompts: list[list[int]], k: int,
                        log: SampleLog, clock: Callable[[], float], new_tokens: int = NEW_TOKENS) -> int:
    """Measure fp and every mode of MEASURED_MODES not yet on disk; returns modes measured."""
    layers = target.config.num_layers
    fp = KVCompression("fp")
    _decode(target, prompts[0], 4, fp, clock)  # warm-up: RoPE tables, allocator
    references = [greedy_with_cache(target, p, new_tokens, fp) for p in prompts]
    measured = 0
    for name in ("fp", *MEASURED_MODES):
        index = MODES.index(name)
        # values are grouped per token over channels: a head narrower than the default group takes one group
        mode = KVCompression(name, value_group=math.gcd(KVCompression().value_group, int(target.config.head_dim)))
        prefill = name == "fp" or _stored(mode)
        lengths = prefill_lengths(target) if prefill else ()
        if all(key in log.done for key in _keys(index, layers, draft is not None, lengths)):
            continue
        step_s: list[float] = []
        nbytes: list[float] = []
        agree = positions = accepted = trials = 0
        for prompt, reference in zip(prompts, references, strict=True):
            seconds, per_token = _decode(target, prompt, new_tokens, mode, clock)
            step_s += seconds
            nbytes.append(per_token)
            fp_logits, _ = teacher_forced_logits(target, prompt, reference, fp)
            logits, _ = teacher_forced_logits(target, prompt, reference, mode)
            agree += int((fp_logits.argmax(-1) == logits.argmax(-1)).sum())
            positions += len(reference)
            if draft is not None:
                a, _, rejections, _ = greedy_acceptance(target, draft, prompt, new_tokens, mode, k)
                accepted, trials = accepted + a, trials + a + rejections
        ms = [s * 1e3 for s in step_s]
        rows = [Sample.of("comp_bytes", layers, index, 0, nbytes),
                Sample.of("comp_step", layers, index, 0, ms),
                Sample.constant("comp_agree", layers, index, 0, agree, positions)]
        if draft is not None:
            rows.append(Sample.constant("comp_accept", layers, index, 0, accepted, trials))
        if prefill:
            rows += _prefill_rows(target, prompts[0], mode, index, clock)
        for row in rows:
            if row.key not in log.done:
                log.append(row)
        measured += 1
    # per (batch, context): the decode step through the Engine's store vs its paged pool (tripath/profile/dequant.py)
    measured += measure_decode_grid(target, STORED_MODES, log, clock)
    return measured


def compression_section(samples: list[Sample], k: int | None, what: str) -> dict[str, CompressionMode]:
    """The profile's ``compression`` section: each measured mode relative to the fp rows."""
    by_key = {(s.sweep, s.x1): s for s in samples if s.sweep in COMP_SWEEPS}
    prefill_ms = {(s.x1, s.x2): s.median_ms for s in samples if s.sweep == "comp_prefill"}
    fp = MODES.index("fp")
    references = {(s.x1, s.x2): s.median_ms for s in samples if s.sweep == REF_SWEEP}
    if ("comp_bytes", fp) not in by_key:
        return {}
    fp_bytes, fp_step = by_key[("comp_bytes", fp)].median_ms, by_key[("comp_step", fp)].median_ms
    fp_accept = by_key.get(("comp_accept", fp))
    out: dict[str, CompressionMode] = {}
    for name in MEASURED_MODES:
        index = MODES.index(name)
        if ("comp_bytes", index) not in by_key:
            continue
        agree = by_key[("comp_agree", index)]
        step = by_key[("comp_step", index)]
        accept = by_key.get(("comp_accept", index))
        if k is not None and accept is not None and fp_accept is not None and accept.reps and fp_accept.reps:
            drop = fp_accept.median_ms / fp_accept.reps - accept.median_ms / accept.reps
            drop_note = (f"greedy acceptance a at K={k} (accepted / (accepted + rejections)) with full-precision "
                         f"KV minus with {name} KV, target compressed, draft full precision")
        else:
            drop, drop_note = 0.0, "not measured: no draft given to the calibration (--draft); 0 by convention"
        out[name] = CompressionMode(
            Coefficient(by_key[("comp_bytes", index)].median_ms / fp_bytes, "ratio", "measured",
                        "median over prompts of the KV bytes per token held (quantized modes: resident storage of "
                        "the compressed store: codes, fp16 scales and zero points, full-precision tokens) / the "
                        "same with full precision"),
            Coefficient(step.median_ms / fp_step, "ratio", "measured",
                        f"median decode-step time with {name} / with full precision over {step.reps} steps; "
                        "quantized modes dequantize a chunk of blocks at a time in PyTorch ops (no fused kernel)"),
            Coefficient(1.0 - agree.median_ms / agree.reps if agree.reps else 0.0, "1 - top-1 agreement",
                        "measured", f"share of {agree.reps} teacher-forced positions (full precision's greedy "
                        "text) where the argmax differs from full precision"),
            Coefficient(drop, "acceptance", "measured" if k is not None and accept is not None else "derived",
                        drop_note),
            prefill_overhead_ratio=prefill_ratio(_with_reference(prefill_ms, references, fp, index), fp, index, name),
            prefill_overhead_points=prefill_points(_with_reference(prefill_ms, references, fp, index), fp, index),
            decode_extra=decode_extra(samples, name, what) if name in STORED_MODES else None,
            note=f"Measured by the calibration's compression sweep (tripath/calibrate/sweeps/compression.py), "
                 f"tripath.engine.kv.modes defaults, batch 1, {what}.")
    return out


def prefill_ratio(prefill_ms: dict[tuple[int, int], float], fp: int, index: int, name: str) -> Coefficient | None:
    """prefill_overhead_ratio r = median over the prompt lengths both fp (f) and the mode (m) were timed at
    of m / f (as decode_overhead_ratio is a median ratio). The ratio grows with length (the store's attention
    dequantizes the whole prefix), so a least-squares fit would follow the longest prompt alone; the median
    is the middle length's. None when no lengths (older sample logs, or a mode not written through the
    compressed store): the simulator leaves prefill as is."""
    lengths = sorted(n for (i, n) in prefill_ms if i == index and (fp, n) in prefill_ms)
    if not lengths:
        return None
    f = [prefill_ms[(fp, n)] for n in lengths]
    m = [prefill_ms[(index, n)] for n in lengths]
    ratio = statistics.median(b / a for a, b in zip(f, m, strict=True))
    return Coefficient(ratio, "ratio", "measured",
                       f"prefill time of one prompt of {', '.join(map(str, lengths))} tokens written into the "
                       f"{name} compressed store / into the paged pool (full precision): median over the lengths "
                       "of the ratio of medians; quantization in PyTorch ops (no fused kernel)")


def _with_reference(prefill_ms: dict[tuple[int, int], float], references: dict[tuple[int, int], float], fp: int,
                    index: int) -> dict[tuple[int, int], float]:
    """The comp_prefill times with fp's replaced, per length, by the fp prefill timed alternately with this mode
    (REF_SWEEP rows) where the samples have them (older sample logs: the fp pass's rows)."""
    out = dict(prefill_ms)
    out.update({(fp, n): ms for (i, n), ms in references.items() if i == index})
    return out


def prefill_points(prefill_ms: dict[tuple[int, int], float], fp: int, index: int) -> tuple[tuple[int, float], ...]:
    """(prompt tokens, mode / fp prefill time) at each length both were timed at, by increasing length."""
    lengths = sorted(n for (i, n) in prefill_ms if i == index and (fp, n) in prefill_ms)
    return tuple((n, prefill_ms[(index, n)] / prefill_ms[(fp, n)]) for n in lengths)


def thread_clock() -> float:
    return time.thread_time()
