"""Sequence-parallel sweep: prefill at P = 2 against P = 1 and the merge overhead, per prompt length.

Two gloo ranks are spawned once (``real_engine.dist.spawn``); per length and repetition, rank 0
runs the plain model forward (P = 1) while rank 1 waits, then both run
``SequenceParallel.prefill`` (zigzag shards, K/V all-gather, log-sum-exp merge). The model has the
target's shape with seeded random weights (speed does not depend on the values).

Clock: CPU seconds of each process (``time.process_time``, gloo's threads included). On a CPU
shared with other jobs, wall time mostly measures their load; CPU time is what the prefill costs
on a core of its own, the same choice as the calibration's thread clock. It leaves out time spent
waiting for the peer, so the speedup is an upper bound for an idle machine (the note says so).

Rows in the calibration's samples CSV, layers 0, x1 = prompt length, x2 = P (1 or 2), ms:
``seqpar_prefill`` (P = 2: the slower rank of each repetition) and ``seqpar_merge`` (P = 2 only:
time in the merge, the slower rank).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

from calibrate.fit import fit_formula
from calibrate.samples import Sample, SampleLog
from real_engine.config import ModelConfig
from real_engine.dist import DistConfig, spawn
from real_engine.model import LlamaModel
from real_engine.seqpar import SeqParConfig, SequenceParallel
from simulator.profile import Coefficient, CostModel, SpRow
from simulator.profile import SequenceParallel as SpSection

DEGREE = 2
LENGTHS = (512, 1024, 2048)


def _plain_cpu_s(model: LlamaModel, prompt: list[int]) -> float:
    ids = torch.tensor([prompt])  # [1, L]
    start = time.process_time()
    with torch.inference_mode():
        model(ids, logits_index=torch.tensor([len(prompt) - 1]))
    return time.process_time() - start


def _sp_cpu_s(model: LlamaModel, prompt: list[int]) -> tuple[float, float]:
    sp = SequenceParallel(model, SeqParConfig("zigzag"))
    dist.barrier()
    start = time.process_time()
    sp.prefill(prompt)
    return time.process_time() - start, sp.times.merge_s


def seqpar_worker(rank: int, device: torch.device, config: ModelConfig, lengths: tuple[int, ...],
                  reps: int) -> list[tuple[int, int, float, float]]:
    """This rank's (length, P, cpu_s, merge_s) per repetition; P = 1 rows on rank 0 only."""
    model = LlamaModel(config, torch.Generator().manual_seed(0)).eval()
    gen = torch.Generator().manual_seed(1)
    warm = torch.randint(0, config.vocab_size, (64,), generator=gen).tolist()
    _sp_cpu_s(model, warm)  # warm-up: first calls allocate and load kernels
    if rank == 0:
        _plain_cpu_s(model, warm)
    rows = []
    for length in lengths:
        prompt = torch.randint(0, config.vocab_size, (length,), generator=gen).tolist()
        for _ in range(reps):
            dist.barrier()
            if rank == 0:
                rows.append((length, 1, _plain_cpu_s(model, prompt), 0.0))
            rows.append((length, DEGREE, *_sp_cpu_s(model, prompt)))
    dist.barrier()
    return rows


def _sample(sweep: str, length: int, degree: int, seconds: list[float]) -> Sample:
    ms = [s * 1e3 for s in seconds]
    return Sample(sweep, 0, length, degree, statistics.median(ms), min(ms), max(ms), len(ms))


def measure_seqpar(config: ModelConfig, reps: int, log: SampleLog, lengths: tuple[int, ...] = LENGTHS,
                   deadline_s: float = 600.0) -> int:
    """Measure the lengths not yet on disk (those that fit the model's context); returns lengths measured."""
    todo = tuple(n for n in lengths if n <= config.max_position_embeddings
                 and ("seqpar_merge", 0, n, DEGREE) not in log.done)
    if not todo:
        return 0
    per_rank = spawn(seqpar_worker, DistConfig(world_size=DEGREE, threads_per_rank=1), config, todo, reps,
                     deadline_s=deadline_s)
    for length in todo:
        plain = [cpu for n, p, cpu, _ in per_rank[0] if (n, p) == (length, 1)]
        # per repetition, the slower rank sets the pace
        ranks = [[(cpu, merge) for n, p, cpu, merge in rows if (n, p) == (length, DEGREE)] for rows in per_rank]
        slowest = [max(pair) for pair in zip(*ranks, strict=True)]
        for sweep, seconds in (("seqpar_prefill", plain), ("seqpar_prefill", [s[0] for s in slowest])):
            degree = 1 if seconds is plain else DEGREE
            if (sweep, 0, length, degree) not in log.done:
                log.append(_sample(sweep, length, degree, seconds))
        merges = [max(m for _, m in rep) for rep in zip(*ranks, strict=True)]
        log.append(_sample("seqpar_merge", length, DEGREE, merges))
    return len(todo)


def seqpar_section(samples: list[Sample], what: str) -> dict[int, SpSection]:
    """The profile's sequence_parallel[2]: a row per length (median speedup, merge ms), merge fitted."""
    by_key = {s.key: s for s in samples if s.sweep.startswith("seqpar_")}
    lengths = sorted(s.x1 for s in samples if s.sweep == "seqpar_merge")
    rows = []
    for n in lengths:
        one, two = by_key.get(("seqpar_prefill", 0, n, 1)), by_key.get(("seqpar_prefill", 0, n, DEGREE))
        if one is None or two is None:
            continue
        rows.append(SpRow(n, one.median_ms / two.median_ms, by_key[("seqpar_merge", 0, n, DEGREE)].median_ms))
    if not rows:
        return {}
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
                          "log-sum-exp merge of the P = 2 prefill, slower rank")
    note = (f"Measured: P = 2 vs P = 1 prefill of the whole model, CPU seconds per process (gloo threads "
            f"included; waiting for the peer is not counted, so an upper bound for idle cores), median of the "
            f"repetitions; merge ms likewise. {what}")
    return {DEGREE: SpSection(DEGREE, tuple(rows), merge, "measured", note)}
