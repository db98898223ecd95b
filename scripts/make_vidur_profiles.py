"""Build the published A100 / H100 profiles for LLaMA-2-7B and -70B from Vidur's operator data.

    .venv/bin/python scripts/make_vidur_profiles.py --extract /work/shared/peer-data/vidur   # once: copy rows used
    .venv/bin/python scripts/make_vidur_profiles.py                                          # build the profiles

``--extract`` copies, from a Vidur data snapshot, only the rows the conversion uses into
data/peer-data/vidur/ (same relative paths, all columns kept; the MIT LICENSE beside them).
The build reads those copies and writes data/profiles/published-*.json with their samples CSV
and fit plots. Regenerating gives byte-identical JSON and CSV (fits rounded to 6 digits, fixed dates).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pandas as pd

from tripath.calibrate.job import write_plots
from tripath.calibrate.published.builder import build_published_profile, profile_name
from tripath.calibrate.published.vidur import (
    DECODE_BATCHES,
    DECODE_KV,
    GPUS,
    MODELS,
    PREFILL_CHUNKS,
    PREFILL_KV,
    all_reduce_path,
    mlp_path,
)
from tripath.calibrate.samples import HEADER
from tripath.core.data_dirs import DATA_DIR, PROFILES_DIR
from tripath.profile.profile import save_profile, save_samples

VIDUR_DIR = DATA_DIR / "peer-data" / "vidur"


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False, lineterminator="\n")


def extract(src: Path, dst: Path) -> None:
    """Copy the rows the conversion uses (tp of each model, 2-GPU all-reduce, the attention grid)."""
    for gpu in GPUS:
        for model in MODELS.values():
            df = pd.read_csv(mlp_path(src, gpu, model))
            _write_csv(df[df.num_tensor_parallel_workers == model.tp], mlp_path(dst, gpu, model))
        df = pd.read_csv(all_reduce_path(src, gpu))
        _write_csv(df[(df.num_workers == 2) & (df.devices_per_node == 2)], all_reduce_path(dst, gpu))
    for model in MODELS.values():
        path = Path("data/profiling") / model.attention
        df = pd.read_csv(src / path)
        if model.attention_format == "old":
            decode = ~df.is_prefill & df.batch_size.isin(DECODE_BATCHES) & df.kv_cache_size.isin(DECODE_KV)
            prefill = df.is_prefill & df.prefill_chunk_size.isin(PREFILL_CHUNKS) & df.kv_cache_size.isin(PREFILL_KV)
            df = df[decode | prefill]
        _write_csv(df, dst / path)
    shutil.copyfile(src / "LICENSE", dst / "LICENSE")


def build(root: Path, out_dir: Path, plots: bool) -> None:
    for gpu in GPUS:
        for model in MODELS:
            profile, samples, fitted = build_published_profile(root, gpu, model)
            name = profile_name(gpu, model)
            path = out_dir / f"{name}.json"
            save_profile(profile, path)
            save_samples(out_dir / f"{name}.samples.csv", HEADER, [s.row() for s in samples])
            if plots:
                write_plots(fitted, path, profile.key_str() + " (published)")
            fits = ", ".join(f"{n} holdout MAPE {f.result.quality.holdout_mape:.1%}" for n, f in fitted.items())
            print(f"wrote {path} ({len(samples)} samples; {fits})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extract", type=Path, metavar="VIDUR_DIR", help="copy the used rows from this snapshot")
    parser.add_argument("--root", type=Path, default=VIDUR_DIR, help="the extracted data (default: %(default)s)")
    parser.add_argument("--out-dir", type=Path, default=PROFILES_DIR)
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    if args.extract is not None:
        extract(args.extract, args.root)
        print(f"extracted the used rows into {args.root}")
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    build(args.root, args.out_dir, not args.no_plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
