"""Build the shipped GPU profiles from aiconfigurator-core's measured kernel tables (data/profiles/aic-*.json).

    .venv/bin/pip install -e '.[aic]'            # aiconfigurator-core, pinned
    .venv/bin/python scripts/make_aic_profiles.py [--only aic-llama2-70b-tp4-h100 ...] [--jobs 2]

Every (model, GPU, TP, weights, expert parallel, attention DP) of tripath/profile/catalog.py that fits is built with
the vLLM backend's current tables for that GPU; combinations whose weights leave under 10 % of memory for KV, or that
the estimator has no tables for, are listed as skipped with the reason. Rebuilding gives byte-identical JSON (fixed
dates, 6 significant digits). data/aic-profiles.json lists what was built and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor

from tqdm import tqdm

from tripath.calibrate.aic.builder import build_profile
from tripath.core.atomic import write_text
from tripath.core.data_dirs import DATA_DIR, PROFILES_DIR
from tripath.core.errors import InputError
from tripath.profile.catalog import MODELS, combinations, profile_name
from tripath.profile.profile import save_profile

INDEX = DATA_DIR / "aic-profiles.json"  # what was built, what was skipped and why


def build_one(job: tuple[str, str, int, str, bool, int]) -> tuple[str, str | None]:
    """(profile name, None when written or the reason it was skipped)."""
    model_name, gpu, tp, weights, ep, dp = job
    from tripath.profile.catalog import draft_for

    model = MODELS[model_name]
    name = profile_name(model.short, gpu, tp, weights, expert_parallel=ep, attention_dp=dp)
    try:
        profile = build_profile(model.name, model.config_dir, gpu, tp, weights, draft=draft_for(model.name),
                                expert_parallel=ep, attention_dp=dp)
    except InputError as exc:
        return name, str(exc)
    save_profile(profile, PROFILES_DIR / f"{name}.json")
    return name, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="build only these profile names")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    args = parser.parse_args(argv)
    jobs = [(m.name, gpu, tp, w, ep, dp) for m, gpu, tp, w, ep, dp in combinations()
            if not args.only or profile_name(m.short, gpu, tp, w, expert_parallel=ep, attention_dp=dp) in args.only]
    built, skipped = [], {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for name, reason in tqdm(pool.map(build_one, jobs), total=len(jobs), desc="profiles", unit="profile"):
            if reason is None:
                built.append(name)
            else:
                skipped[name] = reason
    if not args.only:
        write_text(INDEX, json.dumps({"built": sorted(built), "skipped": skipped},
                                                                 indent=1, sort_keys=True) + "\n")
    print(f"built {len(built)}, skipped {len(skipped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
