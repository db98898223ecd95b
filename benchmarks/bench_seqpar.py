"""Sequence parallelism speedup and merge overhead per prompt length: P = 1 vs P = 2, same run.

For each prompt length, repeated, P = 1 and P = 2 alternate inside ONE spawned gloo group so
both see the same machine load (the machine is shared; each row records the 1-minute load
average, which counts our own ranks too: above 2 means contention for the 2 cores):
- P = 1: the plain model forward (dense causal SDPA, the same fused CPU kernel) on rank 0 with
  the same per-rank threads (1), while the other rank waits in a barrier;
- P = 2: SequenceParallel.prefill (zigzag shards, K/V all-gather, LSE merge) on both ranks;
  then a few decode steps, each rank attending its own shard (optionally in the tiered cache).
Per rank it records wall time and the time in attention kernels, communication (including
waiting for the slower peer) and the merge.  The WHOLE model runs (tiny-target shape, seeded
random weights; speed does not depend on their values).  Goal: >= 1.8x at 8K tokens and above.
The full measurement, with 32K tokens, decode and the tiered cache, writing the CSV and
docs/sequence_parallel.md, is scripts/measurements/measure_seqpar.py (it imports this module).

    .venv/bin/python benchmarks/bench_seqpar.py [--lengths 2048 4096 8192 16384] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import asdict, dataclass, replace

import torch
import torch.distributed as dist

from tripath.engine.model.model import LlamaModel
from tripath.engine.seqpar.dist import DistConfig, spawn, subgroup
from tripath.engine.seqpar.parallel import SeqParConfig, SequenceParallel, TieredShardCache
from tripath.engine.tiered.cache import TieredKVCache
from tripath.engine.tiered.tier_config import TierConfig
from tripath.training.train import TARGET_CONFIG

GOAL_SPEEDUP, GOAL_FROM_TOKENS = 1.8, 8192


@dataclass(frozen=True)
class SeqParBench:
    lengths: tuple[int, ...] = (2048, 4096, 8192, 16384, 32768)
    repeats: int = 3
    long_repeats: int = 1  # repeats for lengths above 16K (one P=1 prefill at 32K takes minutes)
    world_size: int = 2
    threads_per_rank: int = 1
    decode_tokens: int = 8
    layout: str = "zigzag"
    seed: int = 0
    tiered_max_length: int = 8192  # also run each rank's K/V in the tiered cache up to this length (0: never)

    def __post_init__(self) -> None:
        if not self.lengths or min(self.lengths) < 2 * self.world_size:
            raise ValueError(f"SeqParBench.lengths: need lengths >= 2 * world_size, got {self.lengths}")
        for name in ("repeats", "long_repeats", "world_size", "threads_per_rank", "decode_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"SeqParBench.{name}: must be >= 1, got {getattr(self, name)}")


def _model(bench: SeqParBench) -> LlamaModel:
    positions = max(bench.lengths) + bench.decode_tokens + 1
    config = replace(TARGET_CONFIG, max_position_embeddings=positions)
    return LlamaModel(config, torch.Generator().manual_seed(bench.seed)).eval()


def _plain_prefill(model: LlamaModel, prompt: list[int]) -> dict:
    ids = torch.tensor([prompt])  # [1, L]
    start, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        model(ids, logits_index=torch.tensor([len(prompt) - 1]))
    return {"prefill_s": time.perf_counter() - start, "prefill_cpu_s": time.process_time() - cpu}


def tier_budget(model: LlamaModel, length: int) -> TierConfig:
    """A device pool per rank that holds half of ONE rank's full-sequence K/V (plus pinned slack):
    P = 1 must page the other half through host memory each decode step, while a P = 2 shard fits."""
    layers, chunk = model.config.num_layers, 256
    pages = -(-length // chunk)  # pages of one layer's full K/V
    return TierConfig(chunk, device_pages=layers * (-(-pages // 2) + 2), host_pages=layers * pages, ssd_pages=0)


def _sp_run(
    model: LlamaModel, bench: SeqParBench, prompt: list[int], group: dist.ProcessGroup | None, tiered: bool = False
) -> dict:
    store = None
    if tiered:
        tiers = TieredKVCache(model.config, tier_budget(model, len(prompt)), torch.float32, "cpu")
        store = TieredShardCache(tiers)
    sp = SequenceParallel(model, SeqParConfig(bench.layout), group, store)
    dist.barrier(group=group)
    start, cpu = time.perf_counter(), time.process_time()
    token = sp.prefill(prompt)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    phases = {"attention_s": sp.times.attention_s, "comm_s": sp.times.comm_s, "merge_s": sp.times.merge_s}
    sp.times.reset()
    steps = []
    for _ in range(bench.decode_tokens):
        t0 = time.perf_counter()
        token = sp.decode(token)
        steps.append(time.perf_counter() - t0)
    decode = {f"decode_{k}": v / bench.decode_tokens for k, v in asdict(sp.times).items()}
    if store is not None:
        decode["decode_stall_s"] = store.cache.stall_s / (bench.decode_tokens + 1)  # paging time, per forward
        store.cache.close()
    return {"prefill_s": wall, "prefill_cpu_s": cpu, **phases, "decode_token_s": statistics.median(steps), **decode}


def bench_worker(rank: int, device: torch.device, bench: SeqParBench) -> list[dict]:
    """One rank's rows: (length, repeat, P) with its timings; P = 1 rows only on rank 0."""
    model = _model(bench)
    solo = subgroup(1)
    gen = torch.Generator().manual_seed(bench.seed + 1)
    warm = torch.randint(0, 256, (256,), generator=gen).tolist()
    _sp_run(model, bench, warm, None)  # warm-up: first calls allocate and load kernels
    if rank == 0:
        _plain_prefill(model, warm)
    rows = []
    for length in bench.lengths:
        prompt = torch.randint(0, 256, (length,), generator=gen).tolist()
        repeats = bench.repeats if length <= 16384 else bench.long_repeats
        for rep in range(repeats):
            # alternate which degree goes first, so a load change mid-pair does not favour one side
            for degree in ((1, bench.world_size) if rep % 2 == 0 else (bench.world_size, 1)):
                base = {"length": length, "repeat": rep, "P": degree, "rank": rank, "load_avg_1m": os.getloadavg()[0]}
                dist.barrier()
                if degree == 1 and rank == 0:
                    rows.append({**base, "kind": "plain", **_plain_prefill(model, prompt)})
                    if rep == 0:  # the SP code at P = 1: its overhead over plain, and the P = 1 decode
                        rows.append({**base, "kind": "sp", **_sp_run(model, bench, prompt, solo)})
                        if length <= bench.tiered_max_length:
                            rows.append({**base, "kind": "sp_tiered", **_sp_run(model, bench, prompt, solo, True)})
                elif degree > 1:
                    rows.append({**base, "kind": "sp", **_sp_run(model, bench, prompt, None)})
                    if rep == 0 and length <= bench.tiered_max_length:
                        rows.append({**base, "kind": "sp_tiered", **_sp_run(model, bench, prompt, None, True)})
    dist.barrier()
    return rows


def measure(bench: SeqParBench, timeout_s: float = 900.0) -> list[dict]:
    config = DistConfig(world_size=bench.world_size, timeout_s=timeout_s, threads_per_rank=bench.threads_per_rank)
    per_rank = spawn(bench_worker, config, bench, deadline_s=6 * 3600)
    return [row for rows in per_rank for row in rows]


def _ms(values: list[float]) -> float:
    return 1e3 * statistics.median(values) if values else float("nan")


def summarize(rows: list[dict], world: int) -> list[dict]:
    """One line per length: medians over repeats; P = world walls are the slowest rank's."""
    out = []
    for length in sorted({r["length"] for r in rows}):
        at = [r for r in rows if r["length"] == length]
        plain = {r["repeat"]: r["prefill_s"] for r in at if r["kind"] == "plain"}
        sp1 = [r for r in at if r["kind"] == "sp" and r["P"] == 1]
        spp = [r for r in at if r["kind"] == "sp" and r["P"] == world]
        walls = {rep: max(r["prefill_s"] for r in spp if r["repeat"] == rep) for rep in plain}
        ratios = [plain[rep] / walls[rep] for rep in plain]
        # CPU seconds (all threads of the process, gloo's included; not time spent waiting for a core
        # or for the peer): the speedup two uncontended cores would give if waiting cost nothing
        nan = float("nan")  # rows measured before CPU time was recorded
        plain_rows = [r for r in at if r["kind"] == "plain"]
        plain_cpu = {r["repeat"]: r.get("prefill_cpu_s", nan) for r in plain_rows}
        cpu_ratios = [
            plain_cpu[rep] / max(r.get("prefill_cpu_s", nan) for r in spp if r["repeat"] == rep) for rep in plain_cpu
        ]

        def phase(key: str, group: list[dict] = spp, reps: tuple = tuple(plain)) -> float:
            return _ms([statistics.fmean(r[key] for r in group if r["repeat"] == rep) for rep in reps])

        attention, comm, merge = phase("attention_s"), phase("comm_s"), phase("merge_s")
        out.append({
            "length": length, "repeats": len(plain), "plain_ms": _ms(list(plain.values())),
            "sp1_ms": _ms([r["prefill_s"] for r in sp1]), "spp_ms": _ms(list(walls.values())),
            "speedup": statistics.median(ratios), "speedup_min": min(ratios), "speedup_max": max(ratios),
            "cpu_speedup": statistics.median(cpu_ratios),
            # share of a core each process got while prefilling: 1.0 = a core of its own
            "share1": statistics.median([r.get("prefill_cpu_s", nan) / r["prefill_s"] for r in plain_rows]),
            "sharep": statistics.median([r.get("prefill_cpu_s", nan) / r["prefill_s"] for r in spp]),
            "attention_ms": attention, "comm_ms": comm, "merge_ms": merge,
            "other_ms": _ms(list(walls.values())) - attention - comm - merge,
            "decode1_ms": _ms([r["decode_token_s"] for r in sp1]), "decodep_ms": phase("decode_token_s"),
            "decode_comm_ms": phase("decode_comm_s"), "decode_merge_ms": phase("decode_merge_s"),
            "load_min": min(r["load_avg_1m"] for r in at), "load_max": max(r["load_avg_1m"] for r in at),
        })  # fmt: skip
        tiered = [r for r in at if r["kind"] == "sp_tiered"]
        for degree in (1, world):
            mine = [r for r in tiered if r["P"] == degree]
            out[-1][f"tiered{degree}_prefill_ms"] = _ms([max(r["prefill_s"] for r in mine)] if mine else [])
            out[-1][f"tiered{degree}_decode_ms"] = _ms([max(r["decode_token_s"] for r in mine)] if mine else [])
            out[-1][f"tiered{degree}_stall_ms"] = _ms([max(r["decode_stall_s"] for r in mine)] if mine else [])
    return out



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="threads per rank (and for the P = 1 baseline)")
    args = parser.parse_args()
    bench = SeqParBench(
        lengths=tuple(args.lengths), repeats=args.repeats, long_repeats=args.repeats,
        threads_per_rank=args.threads, decode_tokens=2, tiered_max_length=0,
    )  # fmt: skip
    summary = summarize(measure(bench), bench.world_size)
    print(f"{'tokens':>7} {'P=1 ms':>8} {'P=2 ms':>8} {'speedup':>8} {'min-max':>11} {'attn ms':>8} "
          f"{'comm ms':>8} {'merge ms':>9} {'load':>9}")  # fmt: skip
    for s in summary:
        print(
            f"{s['length']:>7} {s['plain_ms']:>8.0f} {s['spp_ms']:>8.0f} {s['speedup']:>7.2f}x "
            f"{s['speedup_min']:>5.2f}-{s['speedup_max']:<5.2f} {s['attention_ms']:>8.0f} {s['comm_ms']:>8.1f} "
            f"{s['merge_ms']:>9.1f} {s['load_min']:>4.1f}-{s['load_max']:<4.1f}"
        )
    long = [s for s in summary if s["length"] >= GOAL_FROM_TOKENS]
    missed = [s["length"] for s in long if s["speedup"] < GOAL_SPEEDUP]
    verdict = "met" if long and not missed else f"missed at {missed}" if long else "not measured"
    print(f"goal >= {GOAL_SPEEDUP}x from {GOAL_FROM_TOKENS} tokens: {verdict} (measured, medians; see load)")


if __name__ == "__main__":
    main()
