"""Sequence-parallel sweep: prefill at P (2, 4, ...) against P = 1 and the merge overhead, per prompt length.

Per degree P, P gloo ranks are spawned once (``tripath.engine.seqpar.dist.spawn``); per length and repetition,
rank 0 runs the plain model forward (P = 1) while the others wait, then all run
``SequenceParallel.prefill`` (zigzag shards, K/V all-gather, log-sum-exp merge). The model has the
target's shape with seeded random weights (speed does not depend on the values).

Clock: a rank's thread CPU time plus the wall time it waited inside collectives
(``PhaseTimes.comm_wait_s``), i.e. the wall clock less the time the thread was off a core while
computing; the profile takes the minimum over the repetitions. A rank blocked in a collective waits
for its peer, the socket and a core: real time that a thread-CPU clock cannot see, so it is counted.
Outside the collectives the thread CPU time is what the work costs on a core of its own, the clock of
the profile's other costs; plain wall time would also count other jobs' load (docs/sequence_parallel.md,
"Choice of clock"). The P = 1 prefill is its thread CPU time.
tripath/fidelity/seqpar_serving.py's CPU-time replay uses the same clock.

Rows in the calibration's samples CSV, layers 0, x1 = prompt length, x2 = P (1 or 2), ms, each a
median / min / max over the repetitions:
``seqpar_prefill`` (P > 1: the slowest rank of each repetition; the P = 1 row is measured in the
first degree's run and reused) and ``seqpar_merge`` (P > 1 only: time in the merge, the slowest rank).
After each P > 1 prefill the ranks decode ``DECODE_STEPS`` tokens at that context (one query per
layer: each rank attends its shard, the (out, lse) partials are all-gathered and merged):
``seqpar_decode`` (ms of one decode step, thread CPU + wait, slowest rank, mean over steps: the
check on what the simulator composes from the split decode, the decode merge and decode_comm),
``seqpar_decode_merge`` (ms in the merge per decode step, the engine's merge timer, slowest rank,
median over steps) and ``seqpar_decode_comm`` (wall ms inside the collectives per decode step,
the engine's comm timer, mean of the ranks: the rank that computes faster waits longer, and the
simulator prices the mean rank's compute; MEAN over the steps, and the profile fits the MEDIAN over
the repetitions, not the minimum: a request's TPOT is the mean of its steps, and the waits vary
between repetitions on an idle machine too (which core each rank and gloo thread wakes on), so the
luckiest repetition is not what a served request sees (the measured spread and its effect on
seqpar-2's TPOT: docs/seqpar_wall_time.md).
The decode merge combines P partials of one query per layer, not T = C queries as a prefill's does,
so it gets its own fit (the profile's ``decode_merge``) instead of reusing the prefill merge;
``decode_comm`` is fitted likewise.

The speedup of a row is P = 1's prefill over P's prefill LESS its merge (minimum over the
repetitions, merge median): the simulator adds merge_ms on top of work / speedup, so a speedup
that still contained the merge would charge it twice.

A degree above the machine's CPU count would time ranks that share cores: it is skipped with a
printed reason unless ``max_ranks`` allows it, and a section measured so says it is oversubscribed.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from tripath.calibrate.fit import fit_formula
from tripath.calibrate.samples import Sample, SampleLog
from tripath.engine.model.config import ModelConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.seqpar.dist import DistConfig, spawn
from tripath.engine.seqpar.parallel import SeqParConfig, SequenceParallel
from tripath.profile.profile import Coefficient, CostModel, SpRow
from tripath.profile.profile import SequenceParallel as SpSection

DEGREE = 2  # the default degree
LENGTHS = (512, 1024, 2048)
DECODE_STEPS = 32  # decode steps timed after each P > 1 prefill (collective times are heavy-tailed)


def _plain_s(model: LlamaModel, prompt: list[int]) -> float:
    """Thread CPU seconds of one plain (P = 1) prefill (no collectives: nothing to wait for)."""
    ids = torch.tensor([prompt])  # [1, L]
    start = time.thread_time()
    with torch.inference_mode():
        model(ids, logits_index=torch.tensor([len(prompt) - 1]))
    return time.thread_time() - start


def _sp_s(model: LlamaModel, prompt: list[int], steps: int = 0) -> tuple[float, float, float, float, float]:
    """(prefill s, prefill merge s, mean decode-step s, median decode-step merge s, mean decode-step comm s) on
    this rank: prefill and step = thread CPU + wait in collectives; merge and comm on the engine's wall timers."""
    sp = SequenceParallel(model, SeqParConfig("zigzag"))
    times = sp.times
    dist.barrier()
    start = time.thread_time()
    token = sp.prefill(prompt)
    prefill_s, prefill_merge_s = time.thread_time() - start + times.comm_wait_s, times.merge_s
    step_s, merge_s, comm_s = [], [], []
    for _ in range(steps):
        merged, talked, waited, start = times.merge_s, times.comm_s, times.comm_wait_s, time.thread_time()
        token = sp.decode(token)
        step_s.append(time.thread_time() - start + times.comm_wait_s - waited)
        merge_s.append(times.merge_s - merged)
        comm_s.append(times.comm_s - talked)
    if not steps:
        return prefill_s, prefill_merge_s, 0.0, 0.0, 0.0
    # step and comm: the mean (a request's TPOT averages its steps, and the waits are heavy-tailed)
    return (prefill_s, prefill_merge_s, statistics.fmean(step_s), statistics.median(merge_s),
            statistics.fmean(comm_s))


def seqpar_worker(rank: int, device: torch.device, config: ModelConfig, lengths: tuple[int, ...],
                  reps: int) -> list[tuple[int, int, float, float, float, float, float]]:
    """This rank's (length, P, prefill_s, merge_s, decode_s, decode_merge_s, decode_comm_s) per repetition (clocks:
    see the module doc), P = the world size; P = 1 rows (prefill only, decode zeros) on rank 0 only."""
    degree = dist.get_world_size()
    model = LlamaModel(config, torch.Generator().manual_seed(0)).eval()
    gen = torch.Generator().manual_seed(1)
    warm = torch.randint(0, config.vocab_size, (64,), generator=gen).tolist()
    _sp_s(model, warm, 2)  # warm-up: first calls allocate and load kernels
    if rank == 0:
        _plain_s(model, warm)
    rows = []
    for length in lengths:
        prompt = torch.randint(0, config.vocab_size, (length,), generator=gen).tolist()
        for _ in range(reps):
            dist.barrier()
            if rank == 0:
                rows.append((length, 1, _plain_s(model, prompt), 0.0, 0.0, 0.0, 0.0))
            # decode only within the model's positions (a prompt at the limit is timed for prefill alone)
            steps = min(DECODE_STEPS, config.max_position_embeddings - length)
            rows.append((length, degree, *_sp_s(model, prompt, steps)))
    dist.barrier()
    return rows


def _sweeps(length: int, config: ModelConfig) -> tuple[str, ...]:
    """The rows a P > 1 run at this length writes: no decode rows when the prompt fills the positions."""
    decodes = (("seqpar_decode", "seqpar_decode_merge", "seqpar_decode_comm")
               if length < config.max_position_embeddings else ())
    return ("seqpar_prefill", "seqpar_merge", *decodes)


def _sample(sweep: str, length: int, degree: int, seconds: list[float]) -> Sample:
    ms = [s * 1e3 for s in seconds]
    return Sample.of(sweep, 0, length, degree, ms)


def measure_seqpar(config: ModelConfig, reps: int, log: SampleLog, lengths: tuple[int, ...] = LENGTHS,
                   deadline_s: float = 600.0, degrees: tuple[int, ...] = (DEGREE,),
                   max_ranks: int | None = None) -> int:
    """Measure the (degree, length) pairs not yet on disk (lengths that fit the model's context); returns the
    pairs measured. Degrees above ``max_ranks`` (default: the CPU count) are skipped with a printed reason."""
    limit = max_ranks if max_ranks is not None else (os.cpu_count() or 1)
    measured = 0
    for degree in degrees:
        todo = tuple(n for n in lengths if n <= config.max_position_embeddings
                     and any((sweep, 0, n, degree) not in log.done for sweep in _sweeps(n, config)))
        if not todo:
            continue
        if degree > limit:
            print(f"calibrate: sequence-parallel P = {degree} skipped: {degree} ranks on {limit} CPUs would share "
                  "cores, so their timings would not mean P devices", file=sys.stderr)
            continue
        per_rank = spawn(seqpar_worker, DistConfig(world_size=degree, threads_per_rank=1), config, todo, reps,
                         deadline_s=deadline_s)
        for length in todo:
            plain = [row[2] for row in per_rank[0] if row[:2] == (length, 1)]
            # per repetition, the slowest rank sets the pace (each column's max over the ranks)
            ranks = [[row[2:] for row in rows if row[:2] == (length, degree)] for rows in per_rank]
            slowest = [tuple(max(col) for col in zip(*rep, strict=True)) for rep in zip(*ranks, strict=True)]
            # communication: the mean of the ranks (the faster rank waits for the slower one)
            talk = [statistics.fmean(col[4] for col in rep) for rep in zip(*ranks, strict=True)]
            series = {("seqpar_prefill", 1): plain, ("seqpar_prefill", degree): [s[0] for s in slowest],
                      ("seqpar_merge", degree): [s[1] for s in slowest],
                      ("seqpar_decode", degree): [s[2] for s in slowest],
                      ("seqpar_decode_merge", degree): [s[3] for s in slowest],
                      ("seqpar_decode_comm", degree): talk}
            for (sweep, p), seconds in series.items():
                if sweep in _sweeps(length, config) and (sweep, 0, length, p) not in log.done:
                    log.append(_sample(sweep, length, p, seconds))
            measured += 1
    return measured


def seqpar_section(samples: list[Sample], what: str, cpus: int | None = None) -> dict[int, SpSection]:
    """The profile's sequence_parallel[P] per measured P: a row per length (speedup, merge ms), merge, decode
    merge and decode communication fitted. ``cpus``: the CPU count of the machine that measured (default this
    one's), for the note."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    degrees = sorted({s.x2 for s in samples if s.sweep == "seqpar_merge"})
    return {p: section for p in degrees if (section := _degree_section(samples, p, what, cpus)) is not None}


def speedup(one: Sample, many: Sample, merge: Sample) -> float:
    """P = 1 prefill over P's prefill less its merge, each the minimum over its repetitions (other processes only
    add time); the merge (median) is priced apart, on top of work / speedup."""
    work = many.min_ms - merge.median_ms
    return one.min_ms / (work if work > 0 else many.min_ms)


def _degree_section(samples: list[Sample], degree: int, what: str, cpus: int) -> SpSection | None:
    by_key = {s.key: s for s in samples if s.sweep.startswith("seqpar_")}
    lengths = sorted(s.x1 for s in samples if s.sweep == "seqpar_merge" and s.x2 == degree)
    rows = []
    for n in lengths:
        one, many = by_key.get(("seqpar_prefill", 0, n, 1)), by_key.get(("seqpar_prefill", 0, n, degree))
        if one is None or many is None:
            continue
        merge_row = by_key[("seqpar_merge", 0, n, degree)]
        rows.append(SpRow(n, speedup(one, many, merge_row), merge_row.median_ms))
    if not rows:
        return None
    merge = None
    if len(rows) >= 2 and all(r.merge_ms > 0 for r in rows):
        x = np.array([r.context_tokens for r in rows], dtype=float)
        y = np.array([r.merge_ms for r in rows], dtype=float)
        result = fit_formula("sp_merge_v1", {"context_tokens": x}, y, data=f"seqpar_merge rows (median_ms): {what}")
        coefficients = {"m0": Coefficient(result.coefficients["m0"], "ms", "fitted", "fixed merge cost per prefill"),
                        "m_ctx": Coefficient(result.coefficients["m_ctx"], "ms/token", "fitted",
                                             "merge cost per prompt token")}
        merge = CostModel("sp_merge_v1", coefficients, ("context_tokens",),
                          {"context_tokens": (float(x.min()), float(x.max()))}, result.quality,
                          f"log-sum-exp merge of the P = {degree} prefill, slowest rank")
    decode_merge = _decode_model(by_key, "seqpar_decode_merge", "median_ms", degree, what, "merge",
                                 f"log-sum-exp merge of one P = {degree} decode step (one query per layer), "
                                 "slowest rank")
    decode_comm = _decode_model(by_key, "seqpar_decode_comm", "median_ms", degree, what, "communication",
                                f"wall time in the collectives of one P = {degree} decode step (all-gather of (out, "
                                "lse) per layer, token broadcast), mean of the ranks")
    shared = (f" OVERSUBSCRIBED: {degree} ranks on {cpus} CPUs shared cores; their wall times include waiting "
              "for a core." if degree > cpus else "")
    note = (f"Measured: P = {degree} vs P = 1 prefill of the whole model; clock: each rank's thread CPU time plus "
            f"the wall time it waited inside collectives (for its peer, the transport: time a CPU clock cannot "
            f"see), slowest rank, minimum over the repetitions; speedup = P = 1 / (P = {degree} less its merge), "
            f"merge median ms, the engine's merge timer (wall clock). {what}.{shared}")
    if decode_merge is not None:
        note += (f" decode_merge: the merge of one decode step (P partials of one query per layer), median of "
                 f"{DECODE_STEPS} steps after each prefill, the engine's merge timer (wall clock).")
    if decode_comm is not None:
        note += (f" decode_comm: wall time inside the collectives of one decode step, the engine's comm timer, mean "
                 f"of the ranks, mean of {DECODE_STEPS} steps, median over the repetitions (a request's TPOT is the "
                 f"mean of its steps; the waits vary between repetitions on an idle machine too).")
    return SpSection(degree, tuple(rows), merge, "measured", note, decode_merge, decode_comm)


def _decode_model(by_key: dict[tuple[str, int, int, int], Sample], sweep: str, statistic: str, degree: int,
                  what: str, part: str, note: str) -> CostModel | None:
    """sp_merge_v1 (m0 + m_ctx x context) fitted to one per-decode-step sweep's rows (None with fewer than two)."""
    found = sorted((key[2], getattr(s, statistic)) for key, s in by_key.items() if key[0] == sweep and key[3] == degree)
    if len(found) < 2:
        return None
    x = np.array([n for n, _ in found], dtype=float)
    y = np.array([ms for _, ms in found], dtype=float)
    result = fit_formula("sp_merge_v1", {"context_tokens": x}, y, data=f"{sweep} rows ({statistic}): {what}")
    coefficients = {"m0": Coefficient(result.coefficients["m0"], "ms", "fitted", f"fixed {part} cost per decode step"),
                    "m_ctx": Coefficient(result.coefficients["m_ctx"], "ms/token", "fitted",
                                         f"{part} cost per context token of the decoding sequence")}
    return CostModel("sp_merge_v1", coefficients, ("context_tokens",),
                     {"context_tokens": (float(x.min()), float(x.max()))}, result.quality, note)
