"""Build the published profiles (LLaMA-2 and LLaMA-3 on A100 / H100) from Vidur's operator data, and their projections.

    .venv/bin/python scripts/make_vidur_profiles.py --extract /work/shared/peer-data/vidur   # once: copy the data
    .venv/bin/python scripts/make_vidur_profiles.py                                          # build the profiles

``--extract`` copies, from a Vidur data snapshot, into data/peer-data/vidur/ (same relative paths; the
MIT LICENSE beside them): every mlp.csv and network file the product uses byte for byte, and the
attention rows the conversion uses (all columns kept). The build reads those copies and writes
data/profiles/published-*.json with their samples CSV and fit plots, then projected-*.json (the
published profiles scaled to GPUs Vidur did not measure). Regenerating gives byte-identical JSON
and CSV (fits rounded to 6 digits, fixed dates).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pandas as pd

from tripath.calibrate.job import write_plots
from tripath.calibrate.published.builder import (
    PROJECTED,
    build_published_profile,
    profile_name,
    project_with_paths,
    with_paths,
)
from tripath.calibrate.published.vidur import (
    DECODE_BATCHES,
    DECODE_KV,
    MEASURED,
    MLP_FILES,
    MODELS,
    NETWORK_FILES,
    NETWORKS,
    PREFILL_CHUNKS,
    PREFILL_KV,
    compute_path,
    network_path,
)
from tripath.calibrate.samples import HEADER
from tripath.core.data_dirs import DATA_DIR, PROFILES_DIR
from tripath.profile.profile import save_profile, save_samples

VIDUR_DIR = DATA_DIR / "peer-data" / "vidur"


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False, lineterminator="\n")


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def extract(src: Path, dst: Path) -> None:
    """Copy every mlp.csv and network file in full, and the attention rows of the grid the conversion uses."""
    for gpu_dir, hf_dir in MLP_FILES:
        _copy(compute_path(src, gpu_dir, hf_dir), compute_path(dst, gpu_dir, hf_dir))
    for network in NETWORKS:
        for name in NETWORK_FILES:
            _copy(network_path(src, network, name), network_path(dst, network, name))
    for model in MODELS.values():
        if model.attention is None:
            continue
        path = Path("data/profiling") / model.attention
        df = pd.read_csv(src / path)
        if model.attention_format == "old":
            decode = ~df.is_prefill & df.batch_size.isin(DECODE_BATCHES) & df.kv_cache_size.isin(DECODE_KV)
            prefill = df.is_prefill & df.prefill_chunk_size.isin(PREFILL_CHUNKS) & df.kv_cache_size.isin(PREFILL_KV)
            df = df[decode | prefill]
        _write_csv(df, dst / path)
    shutil.copyfile(src / "LICENSE", dst / "LICENSE")


def build(root: Path, out_dir: Path, plots: bool) -> None:
    published = {}
    for gpu, model in MEASURED:
        profile, samples, fitted = build_published_profile(root, gpu, model)
        profile = with_paths(root, profile, model)
        published[gpu, model] = profile
        name = profile_name(gpu, model)
        path = out_dir / f"{name}.json"
        save_profile(profile, path)
        save_samples(out_dir / f"{name}.samples.csv", HEADER, [s.row() for s in samples])
        if plots:
            write_plots(fitted, path, profile.key_str() + " (published)")
        fits = ", ".join(f"{n} holdout MAPE {f.result.quality.holdout_mape:.1%}" for n, f in fitted.items())
        print(f"wrote {path} ({len(samples)} samples; {fits})")
    for src, model, dst in PROJECTED:
        path = out_dir / f"{profile_name(dst, model, projected=True)}.json"
        save_profile(project_with_paths(root, published[src, model], model, dst), path)
        print(f"wrote {path} (projected from {profile_name(src, model)})")


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
