"""Where a sequence-parallel step's wall time goes: two gloo ranks serving the tiny target.

    python scripts/measurements/measure_seqpar_wall.py [--prompt 900] [--steps 60] [--runs 2] [--pin]

Per rank, after a prefill of --prompt tokens, --steps decode steps, each timed on four clocks: wall
(perf_counter), the main thread's CPU (thread_time), the process's CPU (process_time: gloo's I/O and
worker threads too), and the engine's own timers (PhaseTimes: wall and thread CPU inside the
collectives, merge, attention). Also: every thread's CPU seconds over the decode loop (/proc: does
a gloo thread spin?), torch's intra-op threads per rank, the latency of a tiny all-gather and
broadcast in a tight loop, the parent process's CPU while it waits for the ranks, and the load
average. Medians and minima over steps; --runs repeats the whole thing (new processes).
All numbers are measured on this machine at the time of the run; other jobs on the shared cores
add wall time, so read the load average beside them.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from tripath.core.data_dirs import MODELS_DIR
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.seqpar.dist import DistConfig, spawn
from tripath.engine.seqpar.parallel import SeqParConfig, SeqParEngine, SequenceParallel

COLUMNS = ("wall", "thread_cpu", "process_cpu", "comm_wall", "comm_cpu", "merge", "attention")


def _thread_cpu() -> dict[str, tuple[str, float]]:
    """CPU seconds of every thread of this process (utime + stime from /proc), by thread id."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{tid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{os.getpid()}/task/{tid}/comm") as fh:
            out[tid] = (fh.read().strip(), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _latency_us(op: Any, n: int = 200) -> tuple[float, float]:
    lat = []
    for _ in range(n):
        start = time.perf_counter()
        op()
        lat.append(time.perf_counter() - start)
    return min(lat) * 1e6, statistics.median(lat) * 1e6


def worker(rank: int, device: torch.device, prompt_len: int, steps: int, pin: bool) -> dict[str, Any]:
    if pin:  # one core per rank: does migration or sharing a core with the peer cost the collectives?
        os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})
    _, model = load_checkpoint(str(MODELS_DIR / "tiny-target"))
    SeqParEngine(model, SeqParConfig()).generate([[0] * 16], 2)  # warm-up
    prompt = torch.randint(0, model.config.vocab_size, (prompt_len,), generator=torch.Generator().manual_seed(0))
    part, token = torch.zeros(8, 33), torch.zeros(1, dtype=torch.int64)  # one decode partial: [Hq, D + 1]
    parts = [torch.empty_like(part) for _ in range(2)]
    res: dict[str, Any] = {"torch_threads": torch.get_num_threads(),
                           "allgather_us": _latency_us(lambda: dist.all_gather(parts, part)),
                           "broadcast_us": _latency_us(lambda: dist.broadcast(token, 0))}
    sp = SequenceParallel(model, SeqParConfig())
    times = sp.times
    dist.barrier()
    clocks = (time.perf_counter(), time.thread_time(), time.process_time())
    nxt = sp.prefill(prompt.tolist())
    res["prefill_ms"] = {"wall": (time.perf_counter() - clocks[0]) * 1e3,
                         "thread_cpu": (time.thread_time() - clocks[1]) * 1e3,
                         "comm_wall": times.comm_s * 1e3, "comm_cpu": times.comm_cpu_s * 1e3}
    before, rows = _thread_cpu(), []
    for _ in range(steps):
        marks = (time.perf_counter(), time.thread_time(), time.process_time(), times.comm_s, times.comm_cpu_s,
                 times.merge_s, times.attention_s)
        nxt = sp.decode(nxt)
        now = (time.perf_counter(), time.thread_time(), time.process_time(), times.comm_s, times.comm_cpu_s,
               times.merge_s, times.attention_s)
        rows.append([(b - a) * 1e3 for a, b in zip(marks, now, strict=True)])
    after = _thread_cpu()
    columns = list(zip(*rows, strict=True))
    res["decode_median_ms"] = dict(zip(COLUMNS, (statistics.median(c) for c in columns), strict=True))
    res["decode_min_ms"] = dict(zip(COLUMNS, (min(c) for c in columns), strict=True))
    res["thread_cpu_s"] = {f"{name}:{tid}": round(cpu - before.get(tid, (name, 0.0))[1], 3)
                           for tid, (name, cpu) in after.items()}
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=900)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--pin", action="store_true", help="pin rank r to CPU r")
    args = parser.parse_args()
    for run in range(args.runs):
        usage, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        out = spawn(worker, DistConfig(2, "gloo", threads_per_rank=1), args.prompt, args.steps, args.pin,
                    deadline_s=600)
        done = resource.getrusage(resource.RUSAGE_SELF)
        parent = done.ru_utime + done.ru_stime - usage.ru_utime - usage.ru_stime
        stamp = time.strftime("%H:%M:%S UTC", time.gmtime())
        print(f"run {run}: parent CPU {parent:.3f} s over {time.perf_counter() - wall:.1f} s wall while the ranks "
              f"worked; load average {os.getloadavg()[0]:.2f} (measured {stamp})")
        for rank, res in enumerate(out):
            print(f"  rank {rank}: torch threads {res['torch_threads']}; tiny all-gather min/median "
                  f"{res['allgather_us'][0]:.0f}/{res['allgather_us'][1]:.0f} us, broadcast "
                  f"{res['broadcast_us'][0]:.0f}/{res['broadcast_us'][1]:.0f} us")
            print("    prefill ms: " + ", ".join(f"{k} {v:.1f}" for k, v in res["prefill_ms"].items()))
            for stat in ("decode_median_ms", "decode_min_ms"):
                print(f"    {stat}: " + ", ".join(f"{k} {v:.2f}" for k, v in res[stat].items()))
            print(f"    thread CPU s over {args.steps} steps: {res['thread_cpu_s']}")


if __name__ == "__main__":
    main()
