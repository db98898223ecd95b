"""Measure the tiered KV cache's paging cost and each KV-compression mode's quality; write docs/tiered_kv.md.

    .venv/bin/python scripts/measurements/measure_kv.py                     # default run, a few minutes on 1 CPU thread
    .venv/bin/python scripts/measurements/measure_kv.py --quick             # smaller everything (a smoke run)

    .venv/bin/python scripts/measurements/measure_kv.py --compression-only  # re-measure, rewrite the compression block

Writes CSVs under data/measurements/ (kv_paging_steps.csv, kv_paging_links.csv, kv_quality.csv,
kv_acceptance.csv, kv_needle.csv, kv_store.csv) and docs/tiered_kv.md.  Every number is measured in this run on
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
import time
from pathlib import Path

import numpy as np
import torch

from tripath.core.atomic import write_text
from tripath.core.data_dirs import MODELS_DIR
from tripath.engine.kv.quant import bytes_per_token
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.model.config import PRESETS, ModelConfig
from tripath.training.corpus import load_eval_prompts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kv_compression_report import render_compression, splice  # noqa: E402 - beside this script
from kv_compression_runs import acceptance, needle, quality, store  # noqa: E402 - beside this script
from kv_report import render  # noqa: E402 - the report template lives beside this script
from paging_meter import measure_paging  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "data" / "measurements"
NAMES = ("kv_paging_steps", "kv_paging_links", "kv_quality", "kv_acceptance", "kv_needle", "kv_store")
COMPRESSION = NAMES[2:]


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text)


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


def render_from_csv(docs: Path, out: Path = OUT) -> None:
    """Rewrite the document from the CSVs and run metadata of the last measurement (no re-measuring)."""
    rows = {name: read_csv(out / f"{name}.csv") for name in NAMES}
    meta = json.loads((out / "kv_meta.json").read_text(encoding="utf-8"))
    fit = fit_paging(rows["kv_paging_steps"], rows["kv_paging_links"])
    target_cfg = ModelConfig.from_hf_dict(json.loads((MODELS_DIR / "tiny-target" / "config.json").read_text()))
    write_atomic(docs, render(rows["kv_paging_steps"], rows["kv_paging_links"], fit, rows["kv_quality"],
                              rows["kv_acceptance"], rows["kv_needle"], bytes_table(target_cfg), meta,
                              PRESETS["bench-small"], rows["kv_store"]))


def measure_compression(quick: bool, parts: set[str], out: Path) -> tuple[dict[str, list[dict]], ModelConfig]:
    """The compression CSVs' rows; a part not in ``parts`` is read back from the last run's CSV in ``out``."""
    _, target = load_checkpoint(MODELS_DIR / "tiny-target")
    _, draft = load_checkpoint(MODELS_DIR / "tiny-draft")
    _, needle_model = load_checkpoint(MODELS_DIR / "tiny-needle")
    for m in (target, draft, needle_model):
        m.eval()
    samples = load_eval_prompts(MODELS_DIR / "eval_prompts.jsonl")
    jobs = {"kv_store": lambda: store(target, samples, [256, 512] if quick else [256, 512, 1024, 2000],
                                      1 if quick else 3),
            "kv_needle": lambda: needle(needle_model, 4 if quick else 50, [512, 1000] if quick else [512, 768, 1000]),
            "kv_quality": lambda: quality(target, samples, 2 if quick else 6),
            "kv_acceptance": lambda: acceptance(target, draft, samples, 1 if quick else 5, 24 if quick else 64, k=5)}
    rows = {name: job() if name.removeprefix("kv_") in parts else read_csv(out / f"{name}.csv")
            for name, job in jobs.items()}
    return rows, target.config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: stable timings on a shared CPU)")
    ap.add_argument("--docs", default=str(ROOT / "docs" / "tiered_kv.md"))
    ap.add_argument("--render-only", action="store_true", help="rewrite the document from the last run's CSVs")
    ap.add_argument("--out", type=Path, default=OUT, help="where the CSVs and kv_meta.json go")
    ap.add_argument("--parts", default="store,needle,quality,acceptance",
                    help="with --compression-only: what to re-measure (the rest is read from the last CSVs)")
    ap.add_argument("--compression-only", action="store_true",
                    help="re-measure only the compression CSVs and rewrite only the document's compression block")
    args = ap.parse_args(argv)
    if args.render_only:
        render_from_csv(Path(args.docs), args.out)
        return 0
    torch.set_num_threads(args.threads)
    start = time.time()
    command = " ".join(["python scripts/measurements/measure_kv.py", *(argv if argv is not None else sys.argv[1:])])
    meta = {"command": command, "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
            "threads": args.threads, "cpus": os.cpu_count()}
    if args.compression_only:
        rows, target_cfg = measure_compression(args.quick, set(args.parts.split(",")), args.out)
        for name in COMPRESSION:
            write_csv(args.out / f"{name}.csv", rows[name])
        old = json.loads((args.out / "kv_meta.json").read_text(encoding="utf-8"))
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        runs = old.setdefault("compression_runs", {})
        for part in [x for x in args.parts.split(",") if f"kv_{x}" in COMPRESSION]:
            runs[part] = (f"`{command}` ({when}, {time.time() - start:.0f} s, load average "
                          f"{os.getloadavg()[0]:.1f}, {args.threads} torch thread, CPU shared)")
        write_atomic(args.out / "kv_meta.json", json.dumps(old, indent=1) + "\n")
        block = render_compression(rows["kv_quality"], rows["kv_acceptance"], rows["kv_needle"],
                                   bytes_table(target_cfg), rows["kv_store"], old)
        doc = Path(args.docs)
        write_atomic(doc, splice(doc.read_text(encoding="utf-8"), block))
        print(f"rewrote the compression block of {doc} in {time.time() - start:.0f} s", file=sys.stderr)
        return 0
    contexts = [1024, 2048] if args.quick else [1024, 2048, 4096, 8192]
    steps = 2 if args.quick else 6
    step_rows, link_rows, fit = paging(contexts, steps)
    rows, target_cfg = measure_compression(args.quick, {"store", "needle", "quality", "acceptance"}, args.out)
    rows.update(kv_paging_steps=step_rows, kv_paging_links=link_rows)
    for name in NAMES:
        write_csv(args.out / f"{name}.csv", rows[name])
    meta.update(seconds=time.time() - start, load=os.getloadavg()[0])
    write_atomic(args.out / "kv_meta.json", json.dumps(meta, indent=1) + "\n")
    write_atomic(Path(args.docs), render(step_rows, link_rows, fit, rows["kv_quality"], rows["kv_acceptance"],
                                         rows["kv_needle"], bytes_table(target_cfg), meta, PRESETS["bench-small"],
                                         rows["kv_store"]))
    print(f"wrote {args.docs} and {args.out}/kv_*.csv in {time.time() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
