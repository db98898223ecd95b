"""Sequence parallelism served in real time: P gloo ranks (real_engine.seqpar), one request at a time, FCFS.

real_engine.seqpar.SequenceParallel holds one sequence across P processes (batch 1 by design), so
this loop serves requests one after another: rank 0 keeps the clock and waits for each arrival,
every rank makes the same prefill/decode calls (the collectives keep them in step), and rank 0
records admission, first token and finish with the simulator's fields. The validation scenario
sets max_batch_size = 1, so the simulator serves the same way.

Clock "cpu" replays in rank 0's CPU time (waiting for the peer not counted, as the calibration's
sequence-parallel sweep counts it), plus idle gaps: an idle-core estimate, approximate for P ranks.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from simulator.records import COMPLETED, RequestRecord
from simulator.request import RequestSpec


def _rank_main(rank: int, device: torch.device, checkpoint: str, degree: int,
               requests: list[tuple[int, float, int, int, str]], prompts: list[list[int]],
               clock_kind: str) -> list[tuple[int, float, float, float, float]]:
    """One rank's loop; rank 0 returns (request_id, admitted_s, first_token_s, finish_s, merge_s) per request."""
    import torch.distributed as dist

    from fidelity.engine_side import CpuClock
    from real_engine.checkpoint import load_checkpoint
    from real_engine.seqpar import SeqParConfig, SequenceParallel

    _, model = load_checkpoint(checkpoint, device=str(device))
    config = SeqParConfig()
    SequenceParallel(model, config).generate([0] * 16, 2)  # warm-up: kernels, gloo buffers, allocator
    cpu = CpuClock()
    clock, sleep = (cpu, cpu.sleep) if clock_kind == "cpu" else (time.perf_counter, time.sleep)
    dist.barrier()
    t0 = clock()
    out = []
    for (rid, arrival, _, output_tokens, _), prompt in zip(requests, prompts, strict=True):
        if rank == 0:  # the other ranks wait inside the first collective of the prefill
            sleep(max(0.0, arrival - (clock() - t0)))
        admitted = clock() - t0
        sp = SequenceParallel(model, config)  # one sequence per instance
        token = sp.prefill(prompt)
        first = clock() - t0
        for _ in range(output_tokens - 1):  # greedy, EOS ignored: exactly output_tokens tokens
            token = sp.decode(token)
        out.append((rid, admitted, first, clock() - t0, sp.times.merge_s))  # merge: prefill and decode
    return out if rank == 0 else []


def serve_seqpar(checkpoint: str, degree: int, requests: list[RequestSpec], prompts: list[list[int]],
                 clock: str = "wall", deadline_s: float = 1200.0) -> tuple[list[RequestRecord], float]:
    """Serve ``requests`` over ``degree`` spawned ranks: (records in request-id order, mean merge s per request)."""
    from real_engine.dist import DistConfig, spawn

    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, requests[i].request_id))
    rows = [(r.request_id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.task) for r in
            (requests[i] for i in order)]
    results: list[Any] = spawn(_rank_main, DistConfig(degree, "gloo", threads_per_rank=1), checkpoint, degree, rows,
                               [prompts[i] for i in order], clock, deadline_s=deadline_s)
    times = {rid: (a, f, e) for rid, a, f, e, _ in results[0]}
    merge = sum(m for *_, m in results[0]) / max(1, len(results[0]))
    records = []
    for r in sorted(requests, key=lambda r: r.request_id):
        admitted, first, finish = times[r.request_id]
        records.append(RequestRecord(r.request_id, r.task, r.arrival_s, r.prompt_tokens, r.output_tokens, 0,
                                     admitted, first, finish, COMPLETED, ""))
    return records, merge
