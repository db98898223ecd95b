"""Sequence parallelism served in real time: P gloo ranks (tripath.engine.seqpar.parallel), one request at a time, FCFS.

tripath.engine.seqpar.parallel.SequenceParallel holds one sequence across P processes (batch 1 by design), so
SeqParEngine serves requests one after another; every rank replays the workload through the engine's own
replay loop (tripath.engine.workload_replay.serve and its ReplayLog), makes the same
prefill/decode calls (the collectives keep them in step), and rank 0's records (admission, first
token and finish, the simulator's fields) are the result. The validation scenario
sets max_batch_size = 1, so the simulator serves the same way.

Clock "cpu" (SpReplayClock) replays in rank 0's thread CPU time plus the wall time its collectives
waited (for the peer, the socket, a core), plus idle gaps. Thread CPU alone cannot see a rank
blocked in a collective (6 all-gathers of (out, lse) and the token broadcast per decode step). That
wait is real time on an idle machine too, so the replay counts it; under contention it is inflated
like any wall time.

Core share, per rank: thread CPU / wall of its steps OUTSIDE the collectives (inside them the rank
blocks by design), the fewest of the ranks: 1.00 = every rank had a core of its own while computing.
The parent process sleeps in spawn's join (0.2 s timeouts), so it takes next to no CPU.
That per-rank share barely sees contention in decode: a rank blocked in a collective needs a free
core to wake on when its peer's data arrives, and that wake-up delay is counted as a wait, not as
time off a core while computing (docs/seqpar_wall_time.md, "Round 2"). So the served core share is
also capped by the machine share: 1 - (CPU the rest of the machine used while the ranks served, from
/proc/stat less the ranks' own process CPU) / (wall x P), the part of the P cores the ranks need that
other processes left free (None off Linux).
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from tripath.core.records import RequestRecord
from tripath.core.request import RequestSpec
from tripath.engine.seqpar.attention import PhaseTimes


class SpReplayClock:
    """Thread CPU time + the wall time spent waiting in collectives + skipped idle gaps (see the module doc)."""

    def __init__(self) -> None:
        self.base = time.thread_time()
        self.idle = 0.0
        self.waited = 0.0  # comm waits of the finished sequences
        self.live: PhaseTimes | None = None  # the sequence being served

    def attach(self, times: PhaseTimes) -> None:
        """Count ``times``' comm waits from now on (the previous sequence's waits are kept)."""
        if self.live is not None:
            self.waited += self.live.comm_wait_s
        self.live = times

    def __call__(self) -> float:
        live = self.live.comm_wait_s if self.live is not None else 0.0
        return time.thread_time() - self.base + self.waited + live + self.idle

    def sleep(self, seconds: float) -> None:
        self.idle += max(0.0, seconds)


def machine_busy_s() -> float | None:
    """CPU seconds every process on the machine has used since boot (/proc/stat, all CPUs; None off Linux).

    Busy = user + nice + system + irq + softirq + steal (a hypervisor's steal is a core taken away too)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class RankUse:
    """One rank's time over its steps (prefills and decodes): wall, thread CPU, and the collectives' share."""

    wall_s: float
    cpu_s: float
    comm_s: float  # wall inside collectives (a rank also waits there for a peer that is behind)
    comm_cpu_s: float  # thread CPU inside collectives
    process_cpu_s: float = 0.0  # the whole process's CPU over the serving window (gloo's threads too)
    window_s: float = 0.0  # wall seconds of the serving window (barrier to barrier)
    machine_busy_s: float | None = None  # the machine's busy CPU seconds over the window (rank 0; else None)

    @property
    def core_share(self) -> float | None:
        """Thread CPU / wall outside the collectives (1.0: a core of its own while computing)."""
        wall = self.wall_s - self.comm_s
        return (self.cpu_s - self.comm_cpu_s) / wall if wall > 0 else None


@dataclass(frozen=True)
class SeqParServed:
    records: list[RequestRecord]  # in request-id order
    merge_s: float  # mean merge seconds per request (prefill and decode), rank 0
    comm_wait_s: float  # mean seconds per request that rank 0 waited in collectives
    ranks: tuple[RankUse, ...]

    @property
    def machine_share(self) -> float | None:
        """1 - CPU used by other processes over the window / (window x P): the free part of the ranks' P cores."""
        busy = next((r.machine_busy_s for r in self.ranks if r.machine_busy_s is not None), None)
        window = max((r.window_s for r in self.ranks), default=0.0)
        if busy is None or window <= 0:
            return None
        foreign = max(0.0, busy - sum(r.process_cpu_s for r in self.ranks))
        return max(0.0, 1.0 - foreign / (window * len(self.ranks)))

    @property
    def core_share(self) -> float | None:
        """The fewest rank's share outside its collectives, capped by the machine share (see the module doc)."""
        shares = [s for r in self.ranks if (s := r.core_share) is not None]
        if (machine := self.machine_share) is not None:
            shares.append(machine)
        return min(shares) if shares else None


class _ListedPrompts:
    """The caller's prompt per request, handed out in the order serve() asks: arrival order, rejected skipped."""

    source = "listed"

    def __init__(self, specs: list[RequestSpec], prompts: list[list[int]], engine: Any) -> None:
        order = sorted(range(len(specs)), key=lambda i: (specs[i].arrival_s, specs[i].request_id))
        self.queue = deque(prompts[i] for i in order
                           if engine.check_request(specs[i].prompt_tokens, specs[i].output_tokens) is None)

    def prompt(self, task: str, length: int) -> list[int]:
        ids = self.queue.popleft()
        if len(ids) != length:
            raise ValueError(f"prompt of {len(ids)} tokens for a {length}-token request")
        return ids


def _rank_main(rank: int, device: torch.device, checkpoint: str, degree: int,
               requests: list[tuple[int, float, int, int, str]], prompts: list[list[int]],
               clock_kind: str) -> tuple[list[RequestRecord], list[tuple[int, float, float]], RankUse]:
    """One rank's replay through serve() on a SeqParEngine: rank 0's records and (request_id, merge_s,
    comm_wait_s) per request (other ranks: empty lists), and this rank's RankUse."""
    import torch.distributed as dist

    from tripath.engine.model.checkpoint import load_checkpoint
    from tripath.engine.seqpar.parallel import SeqParConfig, SeqParEngine
    from tripath.engine.workload_replay import serve

    _, model = load_checkpoint(checkpoint, device=str(device))
    config = SeqParConfig()
    SeqParEngine(model, config).generate([[0] * 16], 2)  # warm-up: kernels, gloo buffers, allocator
    replay = SpReplayClock()
    clock, sleep = (replay, replay.sleep) if clock_kind == "cpu" else (time.perf_counter, time.sleep)
    engine = SeqParEngine(model, config, on_sequence=lambda sp: replay.attach(sp.times))
    specs = [RequestSpec(*row) for row in requests]
    listed = _ListedPrompts(specs, prompts, engine)
    dist.barrier()
    window, process, busy = time.perf_counter(), time.process_time(), machine_busy_s() if rank == 0 else None
    # every rank replays: the queue order (arrival order) fixes the steps, so the ranks make the same calls
    # whenever each sees a request arrive; a rank that is early waits inside the collectives
    result = serve(engine, specs, listed, clock, sleep, warmup=False)  # type: ignore[arg-type]
    dist.barrier()  # the ranks' windows end together, so the machine's busy time covers both
    end_busy = machine_busy_s() if busy is not None else None
    comm = sum(t.comm_s for _, t in engine.served)
    comm_cpu = sum(t.comm_cpu_s for _, t in engine.served)
    use = RankUse(engine.wall_s, engine.cpu_s, comm, comm_cpu, time.process_time() - process,
                  time.perf_counter() - window, end_busy - busy if end_busy is not None and busy is not None else None)
    phases = [(rid, t.merge_s, t.comm_wait_s) for rid, t in engine.served]
    return (result.records, phases, use) if rank == 0 else ([], [], use)


def serve_seqpar(checkpoint: str, degree: int, requests: list[RequestSpec], prompts: list[list[int]],
                 clock: str = "wall", deadline_s: float = 1200.0) -> SeqParServed:
    """Serve ``requests`` over ``degree`` spawned ranks (records in request-id order, merge, waits, rank use)."""
    from tripath.engine.seqpar.dist import DistConfig, spawn

    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, requests[i].request_id))
    rows = [(r.request_id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.task) for r in
            (requests[i] for i in order)]
    results: list[Any] = spawn(_rank_main, DistConfig(degree, "gloo", threads_per_rank=1), checkpoint, degree, rows,
                               [prompts[i] for i in order], clock, deadline_s=deadline_s)
    records, phases = results[0][0], results[0][1]
    merge = sum(row[1] for row in phases) / max(1, len(phases))
    waited = sum(row[2] for row in phases) / max(1, len(phases))
    return SeqParServed(records, merge, waited, tuple(use for _, _, use in results))
