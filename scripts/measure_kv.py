"""Measure the tiered KV cache's paging cost and each KV-compression mode's quality; write docs/tiered_kv.md.

    .venv/bin/python scripts/measure_kv.py                 # default run, a few minutes on 1 CPU thread
    .venv/bin/python scripts/measure_kv.py --quick         # smaller everything (a smoke run)

Writes CSVs under data/measurements/ (kv_paging_steps.csv, kv_paging_links.csv, kv_quality.csv,
kv_acceptance.csv, kv_needle.csv) and docs/tiered_kv.md.  Every number is measured in this run on
this machine, except the rows marked projected (this machine's measured bandwidth applied to
LLaMA-2-70B's KV size) and the seed figure (SEEDS.md).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from real_engine.checkpoint import load_checkpoint
from real_engine.config import PRESETS, ModelConfig
from real_engine.corpus import TASKS, load_eval_prompts
from real_engine.kv_compression import MODES, KVCompression
from real_engine.kv_quality import (
    compare,
    greedy_acceptance,
    greedy_with_cache,
    needle_prompts,
    perplexity,
    teacher_forced_logits,
)
from real_engine.kv_quant import bytes_per_token
from real_engine.paging_meter import measure_paging
from real_engine.tokenizer import ByteTokenizer
from simulator.paths import MODELS_DIR

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kv_report import render  # noqa: E402 - the report template lives beside this script

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "measurements"
TOK = ByteTokenizer()
NAMES = ("kv_paging_steps", "kv_paging_links", "kv_quality", "kv_acceptance", "kv_needle")


def mode_config(mode: str) -> KVCompression:
    return KVCompression(mode, group=32, value_group=32, sink_tokens=4, recent_tokens=64, heavy_fraction=0.05,
                         window_tokens=256)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; these are repository files
    os.replace(tmp, path)


def write_csv(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buf.getvalue())


def paging(contexts: list[int], steps: int) -> tuple[list[dict], list[dict], dict]:
    shape = PRESETS["bench-small"]
    step_rows, link_rows = [], []
    for ctx in contexts:
        for prefetch in (False, True):
            step, links = measure_paging(shape, ctx, chunk_tokens=256, steps=steps, prefetch=prefetch)
            step_rows.append({"prefetch": prefetch, "steps": steps, **dataclasses.asdict(step)})
            if not prefetch:  # per-link cost from synchronous transfers (nothing else on the clock)
                link_rows += [dataclasses.asdict(p) for p in links]
            print(f"paging ctx={ctx} prefetch={prefetch}: {step}", file=sys.stderr)
    return step_rows, link_rows, fit_paging(step_rows, link_rows)


def fit_paging(step_rows: list[dict], link_rows: list[dict]) -> dict:
    """Paging ms per step against KV tokens paged in per step (all links, synchronous runs): slope per 2K."""
    kv_token = PRESETS["bench-small"].kv_bytes_per_token(4)
    steps = int(step_rows[0]["steps"])
    contexts = sorted({int(r["context"]) for r in link_rows})
    xs, ys = [], []
    for ctx in contexts:
        # every page paged in crosses host->device (an SSD page is read into host memory first)
        moved = sum(r["bytes"] for r in link_rows if r["context"] == ctx and r["link"] == "host->device")
        secs = sum(r["seconds"] for r in link_rows if r["context"] == ctx)
        xs.append(moved / kv_token / steps)
        ys.append(secs * 1e3 / steps)
    slope, intercept = np.polyfit(xs, ys, 1)
    pred = np.polyval([slope, intercept], xs)
    r2 = 1 - float(np.sum((np.array(ys) - pred) ** 2)) / max(1e-12, float(np.sum((np.array(ys) - np.mean(ys)) ** 2)))
    return {"ms_per_2k_tokens": float(slope) * 2048, "intercept_ms": float(intercept), "r2": r2,
            "kv_bytes_per_token": kv_token, "points": list(zip(xs, ys, strict=True))}


def _typed(value: str) -> object:
    if value in ("True", "False"):
        return value == "True"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [{k: _typed(v) for k, v in row.items()} for row in csv.DictReader(f)]


def bytes_table(target_cfg: ModelConfig) -> dict:
    bpt = {}
    for name, cfg in (("tiny-target", target_cfg), ("llama2-70b", PRESETS["llama2-70b"])):
        hkv, d, layers = cfg.num_kv_heads, int(cfg.head_dim), cfg.num_layers
        bpt[name] = {"fp": bytes_per_token(hkv, d, layers, None, 32, 32, 2, 2),
                     "int8": bytes_per_token(hkv, d, layers, 8, 32, 32, 2, 2),
                     "int4": bytes_per_token(hkv, d, layers, 4, 32, 32, 2, 2)}
    return bpt


def render_from_csv(docs: Path) -> None:
    """Rewrite the document from the CSVs and run metadata of the last measurement (no re-measuring)."""
    rows = {name: read_csv(OUT / f"{name}.csv") for name in NAMES}
    meta = json.loads((OUT / "kv_meta.json").read_text(encoding="utf-8"))
    fit = fit_paging(rows["kv_paging_steps"], rows["kv_paging_links"])
    target_cfg = ModelConfig.from_hf_dict(json.loads((MODELS_DIR / "tiny-target" / "config.json").read_text()))
    write_atomic(docs, render(rows["kv_paging_steps"], rows["kv_paging_links"], fit, rows["kv_quality"],
                              rows["kv_acceptance"], rows["kv_needle"], bytes_table(target_cfg), meta,
                              PRESETS["bench-small"]))


def quality(target: torch.nn.Module, samples: list, per_task: int) -> tuple[list[dict], list[dict]]:
    rows = []
    for task in TASKS:
        chosen = [s for s in samples if s.task == task][:per_task]
        for mode in MODES:
            acc = {"tokens": 0, "kl": 0.0, "agree": 0, "nll": 0.0, "bytes": 0.0, "fp_nll": 0.0}
            for s in chosen:
                prompt, ref = TOK.encode(s.prompt, add_bos=True), TOK.encode(s.reference)
                fp, _ = teacher_forced_logits(target, prompt, ref, mode_config("fp"))
                logits, nbytes = teacher_forced_logits(target, prompt, ref, mode_config(mode))
                q = compare(fp, logits, ref, nbytes)
                fp_q = compare(fp, fp, ref, 0.0)
                acc["tokens"] += q.tokens
                acc["kl"] += q.kl_sum
                acc["agree"] += q.top1_agree
                acc["nll"] += q.nll_sum
                acc["fp_nll"] += fp_q.nll_sum
                acc["bytes"] += nbytes * (len(prompt) + len(ref))
            ctx = sum(len(TOK.encode(s.prompt, add_bos=True)) + len(TOK.encode(s.reference)) for s in chosen)
            n = acc["tokens"]
            rows.append({"task": task, "mode": mode, "samples": len(chosen), "tokens": n,
                         "mean_context": ctx / len(chosen), "kl_nats": acc["kl"] / n, "top1_agree": acc["agree"] / n,
                         "ppl_fp": perplexity(acc["fp_nll"], n), "ppl": perplexity(acc["nll"], n),
                         "ppl_change_pct": 100 * (perplexity(acc["nll"], n) / perplexity(acc["fp_nll"], n) - 1),
                         "bytes_per_token": acc["bytes"] / ctx})
            print(f"quality {task} {mode}: {rows[-1]}", file=sys.stderr)
    return rows, []


def acceptance(target: torch.nn.Module, draft: torch.nn.Module, samples: list, per_task: int, new_tokens: int,
               k: int) -> list[dict]:
    rows = []
    for task in TASKS:
        chosen = [s for s in samples if s.task == task][:per_task]
        for mode in MODES:
            acc = prop = rej = rounds = 0
            for s in chosen:
                a, p, j, r = greedy_acceptance(target, draft, TOK.encode(s.prompt, add_bos=True), new_tokens,
                                               mode_config(mode), k, stop_id=TOK.eos_id)
                acc, prop, rej, rounds = acc + a, prop + p, rej + j, rounds + r
            rows.append({"task": task, "mode": mode, "k": k, "prompts": len(chosen), "proposed": prop, "accepted": acc,
                         "rejections": rej, "acceptance": acc / (acc + rej) if acc + rej else float("nan"),
                         "accepted_per_proposed": acc / prop if prop else float("nan"),
                         "tokens_per_round": (acc + rounds) / rounds if rounds else float("nan")})
            print(f"acceptance {task} {mode}: {rows[-1]}", file=sys.stderr)
    return rows


def needle(target: torch.nn.Module, samples: list, trials: int, distance: int) -> list[dict]:
    reports = [s.prompt for s in samples if s.task == "summarization"]
    pairs = needle_prompts(reports, trials, distance, seed=0)
    rows = []
    for mode in MODES:
        hits = 0
        for prompt, answer in pairs:
            ids = TOK.encode(prompt, add_bos=True)
            hits += TOK.decode(greedy_with_cache(target, ids, len(answer), mode_config(mode))) == answer
        rows.append({"mode": mode, "trials": trials, "distance_bytes": distance, "accuracy": hits / trials})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: stable timings on a shared CPU)")
    ap.add_argument("--docs", default=str(ROOT / "docs" / "tiered_kv.md"))
    ap.add_argument("--render-only", action="store_true", help="rewrite the document from the last run's CSVs")
    args = ap.parse_args(argv)
    if args.render_only:
        render_from_csv(Path(args.docs))
        return 0
    torch.set_num_threads(args.threads)
    start = time.time()
    contexts = [1024, 2048] if args.quick else [1024, 2048, 4096, 8192]
    steps = 2 if args.quick else 6
    step_rows, link_rows, fit = paging(contexts, steps)
    _, target = load_checkpoint(MODELS_DIR / "tiny-target")
    _, draft = load_checkpoint(MODELS_DIR / "tiny-draft")
    target.eval()
    draft.eval()
    samples = load_eval_prompts(MODELS_DIR / "eval_prompts.jsonl")
    q_rows, _ = quality(target, samples, 2 if args.quick else 6)
    a_rows = acceptance(target, draft, samples, 1 if args.quick else 5, 24 if args.quick else 64, k=5)
    n_rows = needle(target, samples, 4 if args.quick else 12, 600)
    for name, rows in zip(NAMES, (step_rows, link_rows, q_rows, a_rows, n_rows), strict=True):
        write_csv(OUT / f"{name}.csv", rows)
    meta = {"command": " ".join(["python scripts/measure_kv.py", *(argv if argv is not None else sys.argv[1:])]),
            "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
            "threads": args.threads, "seconds": time.time() - start, "cpus": os.cpu_count(),
            "load": os.getloadavg()[0]}
    write_atomic(OUT / "kv_meta.json", json.dumps(meta, indent=1) + "\n")
    write_atomic(Path(args.docs), render(step_rows, link_rows, fit, q_rows, a_rows, n_rows,
                                         bytes_table(target.config), meta, PRESETS["bench-small"]))
    print(f"wrote {args.docs} and {OUT}/kv_*.csv in {time.time() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
