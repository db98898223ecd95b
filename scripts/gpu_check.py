"""CUDA correctness checks and a short calibration, for a session with one GPU (H200 / H100 / A100).

    python scripts/gpu_check.py --out-dir "$OUT"           # estimated 4-8 min on one H200 (never run); < 15 on an A100
    python scripts/gpu_check.py --out-dir /tmp/x --dry-run # CPU: the same jobs on tiny models and grids

Writes into --out-dir: gpu_check.json (every check: PASS/FAIL with its numbers) and, unless
--skip-calibration, the measured profiles <hardware>-llama2-7b.json and <hardware>-tiny.json with
their samples CSV, meta and fit plots (copy them into data/profiles/ and commit). Exit status 1 if
any check fails. --dry-run runs no CUDA check: it builds and runs the two calibration jobs on the
CPU with tiny models and grids, so the script's calibration path is tested without a GPU.

1. engine = dense: the paged, continuously batched engine's greedy outputs on CUDA equal greedy
   generation that re-runs the whole sequence with no cache (fp32, tiny-gqa, random weights);
2. paged = dense logits: a prefill chunk attending to a cached context through block tables gives
   the dense forward's logits (fp32: max |diff| < 1e-3; bf16: < 5 % of the logits' scale);
3. pinned host <-> device copy bandwidth (measured, CUDA events), 64 MiB - 1 GiB; the best H2D
   figure replaces the published device_host link in the calibrated profile, labelled measured;
4. calibration: LLaMA-2-7B shapes with random weights, 1 and 2 decoder layers timed in bf16 and
   extrapolated to 32, the `full` preset (CUDA events, median of 7 after 2 warm-ups), with the
   paging sweep per chunk size (64 / 256 / 1024 tokens per page; device<->host over PCIe, host<->SSD);
5. calibration of the shipped tiny pair (checkpoints: acceptance needs real draft/target weights) on
   the GPU, `quick` grid with the speculative sweep over tasks x K = 1..8 (v(K) on this GPU).
Not here: the sequence-parallel sweep (it spawns gloo CPU ranks; one GPU has no P > 1 to time) and the
compression sweep (its clock is a CPU one). Speculative = target-only, tiered = untiered and the SP merge
are checked by those features' own tests; run them here with CUDA once they take a device option.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tripath.engine.engine import Engine, EngineConfig
from tripath.engine.kv.paged_attention import PagedAttention, SequenceChunk
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.profile.profile import Coefficient, load_profile, save_profile, write_atomic

if TYPE_CHECKING:
    from tripath.calibrate.job import CalibrationJob


def dense_greedy(model: LlamaModel, prompt: list[int], n: int, device: torch.device) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids], device=device))[0, -1].argmax()))
    return ids[len(prompt):]


def check_engine_equals_dense(device: torch.device) -> dict[str, object]:
    model = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).to(device).eval()
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 17, 33, 1, 40, 9)]
    reference = [dense_greedy(model, p, 12, device) for p in prompts]
    engine = Engine(model, EngineConfig(max_batch_size=4, max_batched_tokens=32, block_size=4, num_blocks=128))
    outputs = engine.generate(prompts, 12)
    same = sum(a == b for a, b in zip(outputs, reference, strict=True))
    return {"name": "engine greedy = dense greedy (fp32, CUDA)", "pass": same == len(prompts),
            "sequences_equal": same, "sequences": len(prompts)}


@torch.inference_mode()
def check_paged_logits(device: torch.device, dtype: torch.dtype, tolerance: float) -> dict[str, object]:
    config = PRESETS["tiny-gqa"]
    model = LlamaModel(config, torch.Generator().manual_seed(3)).to(device=device, dtype=dtype).eval()
    ids = torch.randint(0, config.vocab_size, (1, 100), generator=torch.Generator().manual_seed(4)).to(device)
    dense = model(ids).float()  # [1, 100, V]
    engine = Engine(model, EngineConfig(block_size=16, num_blocks=16, fuse_projections=False))
    table = list(range(7))  # 100 tokens in blocks of 16
    first = PagedAttention(engine.kv, [SequenceChunk(0, 64, table)], config.kv_group_size)
    model(ids[:, :64], first.positions, first)  # writes the cached context
    second = PagedAttention(engine.kv, [SequenceChunk(64, 36, table)], config.kv_group_size)
    paged = model(ids[:, 64:], second.positions, second).float()  # [1, 36, V]
    diff = float((paged - dense[:, 64:]).abs().max())
    scale = float(dense.abs().max())
    bound = tolerance * (scale if dtype != torch.float32 else 1.0)
    return {"name": f"paged chunk after cached context = dense logits ({dtype})", "pass": diff < bound,
            "max_abs_diff": diff, "bound": bound}


def pinned_bandwidth(device: torch.device) -> dict[str, object]:
    results = {}
    for mib in (64, 256, 1024):
        n = mib << 20
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(n, dtype=torch.uint8, device=device)
        for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
            times = []
            for _ in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                dst.copy_(src, non_blocking=True)
                end.record()
                torch.cuda.synchronize(device)
                times.append(start.elapsed_time(end))  # ms
            results[f"{name}_{mib}MiB_gbps"] = round(n / (min(times) * 1e6), 3)  # bytes / (ms x 1e6) = GB/s
    best = max(v for k, v in results.items() if k.startswith("h2d"))
    return {"name": "pinned host<->device copy bandwidth (measured)", "pass": best > 1.0, **results,
            "best_h2d_gbps": best}


def calibration_jobs(out_dir: Path, preset: str, dry_run: bool, device_name: str | None = None
                     ) -> list[CalibrationJob]:
    """The script's calibrations: LLaMA-2-7B shapes with paging per chunk size, and the tiny pair with the
    speculative sweep over tasks x K. A dry run: the same jobs on the CPU with tiny models and grids.
    ``device_name``: the GPU's name (default: asked of CUDA), which names the profiles."""
    from tripath.calibrate.hardware import spec_for_device
    from tripath.calibrate.job import CalibrationJob
    from tripath.calibrate.presets import PRESETS as SWEEP_PRESETS
    from tripath.calibrate.presets import Preset
    from tripath.calibrate.sweeps.speculative import SpecSettings
    from tripath.calibrate.target import TargetSpec
    from tripath.calibrate.timer import TimerConfig
    from tripath.core.data_dirs import MODELS_DIR

    if dry_run:
        grid = Preset("dry-run", (8, 32, 64), (0, 32), (1, 2, 4), (16, 64), TimerConfig(warmup=0, reps=2),
                      spec_k=(1, 2), paging_chunks=(16, 64))
        big, big_grid, device, dtype, spec = "tiny-mha", grid, "cpu", "float32", SpecSettings(2, 1, 8)
        hw = "dry-run"
    else:
        big_grid, device, dtype, spec = SWEEP_PRESETS[preset], "cuda", "bfloat16", SpecSettings()
        grid = replace(SWEEP_PRESETS["quick"], spec_k=tuple(range(1, 9)))
        big = "llama2-7b"
        found = spec_for_device(device_name or torch.cuda.get_device_name(0))
        hw = found.name if found else "cuda"
    flags = f"--device {device} --dtype {dtype}"
    big_job = CalibrationJob(TargetSpec(preset=big, layers_timed=2, dtype=dtype), big_grid,
                             str(out_dir / f"{hw}-{big}.json"), device=device, force=True,
                             paging=True, plots=not dry_run, progress=not dry_run,
                             command=f"python scripts/gpu_check.py (tripath calibrate {flags} --model-config {big} "
                             f"--layers-timed 2 --preset {big_grid.name} --paging)")
    target, draft = MODELS_DIR / "tiny-target", MODELS_DIR / "tiny-draft"
    tiny_job = CalibrationJob(TargetSpec(checkpoint=str(target), dtype="float32"), grid,
                              str(out_dir / f"{hw}-tiny.json"), device=device, force=True, draft=str(draft),
                              spec=spec, plots=not dry_run, progress=not dry_run,
                              command=f"python scripts/gpu_check.py (tripath calibrate --device {device} --dtype "
                              f"float32 --model {target.name} --draft {draft.name} --preset {grid.name}, K = "
                              f"{', '.join(map(str, grid.spec_k))})")
    return [big_job, tiny_job]


def calibrate(job: CalibrationJob, h2d_gbps: float | None) -> dict[str, object]:
    """Run one calibration; a measured pinned-copy bandwidth replaces the published device_host link."""
    from tripath.calibrate.job import run_calibration

    out = Path(job.out)
    start = time.perf_counter()
    result = run_calibration(job)
    profile = load_profile(out)
    if h2d_gbps is not None:
        links = dict(profile.hardware.links)
        links["device_host"] = Coefficient(h2d_gbps, "GB/s", "measured", "pinned host-to-device copy, best of "
                                           "64 MiB - 1 GiB, CUDA events (scripts/gpu_check.py)")
        profile = replace(profile, hardware=replace(profile.hardware, links=links))
        save_profile(profile, out)
    fits = {n: c.fit.to_dict() for n, c in profile.costs.items() if c.fit}
    return {"name": f"calibration {out.stem}", "pass": not result.refusals, "profile": str(out),
            "seconds": round(time.perf_counter() - start, 1), "refusals": list(result.refusals), "fits": fits,
            "verify_by_k": {k: c.value for k, c in profile.speculative.verify_by_k.items()}
            if profile.speculative else {},
            "paging_chunks": sorted({c for link in profile.paging.values() for c in link.by_chunk_tokens})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--preset", choices=("quick", "full"), default="full")
    parser.add_argument("--skip-calibration", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="CPU: only the calibration jobs, on tiny models")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        checks = [calibrate(job, None) for job in calibration_jobs(args.out_dir, args.preset, dry_run=True)]
        write_atomic(args.out_dir / "gpu_check.json", json.dumps({"dry_run": True, "checks": checks}, indent=2) + "\n")
        return 0 if all(c["pass"] for c in checks) else 1
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, object] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                 "cuda": torch.version.cuda, "checks": []}
    checks = report["checks"]
    assert isinstance(checks, list)
    checks.append(check_engine_equals_dense(device))
    checks.append(check_paged_logits(device, torch.float32, 1e-3))
    checks.append(check_paged_logits(device, torch.bfloat16, 5e-2))
    bandwidth = pinned_bandwidth(device)
    checks.append(bandwidth)
    if not args.skip_calibration:
        big, tiny = calibration_jobs(args.out_dir, args.preset, dry_run=False)
        checks.append(calibrate(big, float(bandwidth["best_h2d_gbps"])))
        checks.append(calibrate(tiny, None))
    write_atomic(args.out_dir / "gpu_check.json", json.dumps(report, indent=2) + "\n")
    for check in checks:
        print(f"{'PASS' if check['pass'] else 'FAIL'}  {check['name']}")
    return 0 if all(c["pass"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
