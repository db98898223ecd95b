"""Measure sequence parallelism on this machine: P ranks (gloo, fixed threads each) vs one rank.

For each prompt length, repeated, P = 1 and P = P alternate inside ONE spawned group so both
see the same machine load (the machine is shared; each row records the 1-minute load average):
- P = 1: the plain model forward (dense causal SDPA, the same fused CPU kernel) on rank 0 with
  the same per-rank threads, while the other ranks wait in a barrier;
- P = P: SequenceParallel.prefill (zigzag shards, K/V all-gather, LSE merge) on every rank;
  then a few decode steps, each rank attending its own shard.
Per rank it records wall time and the time inside attention kernels, communication (which
includes waiting for a slower peer) and the merge.  Weights are seeded random (the tiny-target
shape with longer positions): speed does not depend on their values.

    python scripts/measure_seqpar.py       # 2K..32K: data/measurements/seqpar_cpu.csv, docs/sequence_parallel.md
    python scripts/measure_seqpar.py --lengths 2048 4096 --repeats 1 --no-write
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist

from real_engine.dist import DistConfig, spawn, subgroup
from real_engine.model import LlamaModel
from real_engine.seqpar import SeqParConfig, SequenceParallel, TieredShardCache
from real_engine.tiered_cache import TieredKVCache
from real_engine.tiers import TierConfig
from real_engine.train import TARGET_CONFIG

ROOT = Path(__file__).resolve().parents[1]
CSV_PATH = ROOT / "data" / "measurements" / "seqpar_cpu.csv"
DOC_PATH = ROOT / "docs" / "sequence_parallel.md"


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


def _plain_prefill_s(model: LlamaModel, prompt: list[int]) -> float:
    ids = torch.tensor([prompt])  # [1, L]
    start = time.perf_counter()
    with torch.inference_mode():
        model(ids, logits_index=torch.tensor([len(prompt) - 1]))
    return time.perf_counter() - start


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
    start = time.perf_counter()
    token = sp.prefill(prompt)
    wall = time.perf_counter() - start
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
    return {"prefill_s": wall, **phases, "decode_token_s": statistics.median(steps), **decode}


def bench_worker(rank: int, device: torch.device, bench: SeqParBench) -> list[dict]:
    """One rank's rows: (length, repeat, P) with its timings; P = 1 rows only on rank 0."""
    model = _model(bench)
    solo = subgroup(1)
    gen = torch.Generator().manual_seed(bench.seed + 1)
    warm = torch.randint(0, 256, (256,), generator=gen).tolist()
    _sp_run(model, bench, warm, None)  # warm-up: first calls allocate and load kernels
    if rank == 0:
        _plain_prefill_s(model, warm)
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
                    rows.append({**base, "kind": "plain", "prefill_s": _plain_prefill_s(model, prompt)})
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


FIELDS = [
    "length", "repeat", "P", "rank", "kind", "prefill_s", "attention_s", "comm_s", "merge_s", "decode_token_s",
    "decode_attention_s", "decode_comm_s", "decode_merge_s", "decode_stall_s", "load_avg_1m",
]  # fmt: skip


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


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

        def phase(key: str, group: list[dict] = spp, reps: tuple = tuple(plain)) -> float:
            return _ms([statistics.fmean(r[key] for r in group if r["repeat"] == rep) for rep in reps])

        attention, comm, merge = phase("attention_s"), phase("comm_s"), phase("merge_s")
        out.append({
            "length": length, "repeats": len(plain), "plain_ms": _ms(list(plain.values())),
            "sp1_ms": _ms([r["prefill_s"] for r in sp1]), "spp_ms": _ms(list(walls.values())),
            "speedup": statistics.median(ratios), "speedup_min": min(ratios), "speedup_max": max(ratios),
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


def render_report(summary: list[dict], bench: SeqParBench, command: str) -> str:
    p, t = bench.world_size, bench.threads_per_rank
    lines = [
        "# Sequence parallelism on CPU: measured speedup, merge and communication",
        "",
        f"All numbers **measured** on this machine ({platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__}, gloo over localhost) by `{command}` at "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; raw rows in `data/measurements/seqpar_cpu.csv`.",
        f"P = {p} ranks with {t} thread(s) each against one rank with the same {t} thread(s); {bench.layout} "
        "shards; the whole model (tiny-target shape: 6 layers, hidden 256, 8 query / 2 KV heads of 32; "
        "seeded random weights), batch 1. P = 1 and P = 2 alternate inside one process group, "
        f"{bench.repeats} repeats (lengths > 16K: {bench.long_repeats}); medians. The machine is shared with "
        "other work: the 1-minute load average during each length is shown (it counts our own ranks too); "
        "a load above "
        f"{p} means another process competed with the ranks for the {os.cpu_count()} cores.",
        "",
        "## Prefill (time to first token)",
        "",
        f"| prompt tokens | P=1 plain ms | P=1 SP code ms | P={p} ms | speedup (min-max) | attention ms | "
        "comm ms | merge ms | other ms | load avg |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| {s['length']} | {s['plain_ms']:.0f} | {s['sp1_ms']:.0f} | {s['spp_ms']:.0f} | "
            f"**{s['speedup']:.2f}x** ({s['speedup_min']:.2f}-{s['speedup_max']:.2f}) | {s['attention_ms']:.0f} | "
            f"{s['comm_ms']:.1f} | {s['merge_ms']:.1f} | {s['other_ms']:.0f} | "
            f"{s['load_min']:.1f}-{s['load_max']:.1f} |"
        )
    lines += [
        "",
        "attention / comm / merge / other: per-rank time (mean of the ranks) inside the attention kernels, "
        "in collectives (the K/V all-gather per layer and the token broadcast; includes waiting for the slower "
        "rank), in the LSE merge, and the rest (projections, MLP, norms, RoPE, cache writes).",
        "",
        "## Decode (per token, K/V sharded where it was produced)",
        "",
        f"| prompt tokens | P=1 ms/token | P={p} ms/token | comm ms/token | merge ms/token |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| {s['length']} | {s['decode1_ms']:.2f} | {s['decodep_ms']:.2f} | {s['decode_comm_ms']:.2f} | "
            f"{s['decode_merge_ms']:.2f} |"
        )
    tiered = [s for s in summary if s["tiered1_decode_ms"] == s["tiered1_decode_ms"]]  # not NaN
    if tiered:
        lines += [
            "",
            "## With the tiered KV cache on each rank",
            "",
            "Each rank's K/V in real_engine/tiered_cache.py with a device pool of half of the whole "
            "sequence's K/V (chunks of 256 tokens; sinks and a 256-token window pinned; the rest in host "
            "memory): P = 1 pages half its K/V in every decode step, a P = 2 shard nearly fits. One run each.",
            "",
            f"| prompt tokens | P=1 decode ms/token | P=1 tiered | paging ms/forward | P={p} decode | P={p} tiered | "
            f"paging ms/forward | P=1 prefill ms | P=1 tiered | P={p} prefill | P={p} tiered |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in tiered:
            lines.append(
                f"| {s['length']} | {s['decode1_ms']:.2f} | {s['tiered1_decode_ms']:.2f} | "
                f"{s['tiered1_stall_ms']:.2f} | {s['decodep_ms']:.2f} | {s[f'tiered{p}_decode_ms']:.2f} | "
                f"{s[f'tiered{p}_stall_ms']:.2f} | {s['sp1_ms']:.0f} | {s['tiered1_prefill_ms']:.0f} | "
                f"{s['spp_ms']:.0f} | {s[f'tiered{p}_prefill_ms']:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(SeqParBench.lengths))
    parser.add_argument("--repeats", type=int, default=SeqParBench.repeats)
    parser.add_argument("--long-repeats", type=int, default=SeqParBench.long_repeats)
    parser.add_argument("--world-size", type=int, default=SeqParBench.world_size)
    parser.add_argument("--threads", type=int, default=SeqParBench.threads_per_rank)
    parser.add_argument("--layout", default=SeqParBench.layout)
    parser.add_argument("--csv", type=Path, default=CSV_PATH)
    parser.add_argument("--doc", type=Path, default=DOC_PATH)
    parser.add_argument("--no-write", action="store_true", help="print the summary only")
    args = parser.parse_args()
    bench = SeqParBench(
        lengths=tuple(args.lengths), repeats=args.repeats, long_repeats=args.long_repeats,
        world_size=args.world_size, threads_per_rank=args.threads, layout=args.layout,
    )  # fmt: skip
    rows = measure(bench)
    summary = summarize(rows, bench.world_size)
    text = render_report(summary, bench, " ".join(["python scripts/measure_seqpar.py", *sys.argv[1:]]))
    print(text)
    if not args.no_write:
        write_csv(rows, args.csv)
        tmp = args.doc.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, args.doc)


if __name__ == "__main__":
    main()
