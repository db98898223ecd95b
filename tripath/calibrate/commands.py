"""`tripath calibrate` and `tripath profile {show,compare,plot,project,acceptance}`: thin wrappers over typed functions.

Only argparse is imported at module level, so building the parser (``tripath --help``) never
loads torch or matplotlib; each command imports what it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError

EXIT_REFUSED = 3  # a fit exceeded the threshold: nothing written (samples kept)


def profile_path(name_or_path: str) -> Path:
    """A bare name means data/profiles/NAME.json; anything with a slash or .json is a path."""
    if "/" in name_or_path or os.sep in name_or_path or name_or_path.endswith(".json"):
        return Path(name_or_path)
    return PROFILES_DIR / f"{name_or_path}.json"


def cmd_calibrate(args: argparse.Namespace) -> int:
    from tripath.calibrate.fit import FitRefused
    from tripath.calibrate.job import run_calibration
    from tripath.calibrate.job_config import CalibrationJob
    from tripath.calibrate.presets import PRESETS
    from tripath.calibrate.target import TargetSpec

    target = TargetSpec(checkpoint=args.model, preset=args.model_config, layers_timed=args.layers_timed,
                        dtype=args.dtype or ("bfloat16" if args.device == "cuda" else "float32"))
    out = args.out or str(PROFILES_DIR / f"{args.device}-{target.name}.json")
    source = f"--model {args.model}" if args.model else f"--model-config {args.model_config} --layers-timed " \
        f"{args.layers_timed}"
    command = f"tripath calibrate --device {args.device} {source} --preset {args.preset} --dtype {target.dtype}"
    if args.draft:
        command += f" --draft {args.draft}"
    if args.paging:
        command += " --paging"
    if args.seqpar:
        command += " --seqpar"
    if args.compression:
        command += " --compression"
    if args.step_overhead:
        command += " --step-overhead"
    job = CalibrationJob(target, PRESETS[args.preset], out, device=args.device, threads=args.threads,
                         force=args.force, max_holdout_mape=args.max_holdout_mape, command=command,
                         statistic=args.statistic, cpu_clock=args.cpu_clock,
                         kv_capacity_bytes=None if args.kv_capacity_gib is None else int(args.kv_capacity_gib * 2**30),
                         progress=not args.no_progress, draft=args.draft, eval_prompts=args.eval_prompts,
                         paging=args.paging, seqpar=args.seqpar, compression=args.compression,
                         step_overhead=args.step_overhead,
                         refresh=tuple(args.refresh or ()))
    try:
        result = run_calibration(job)
    except FitRefused as err:
        print(f"tripath: calibration refused: {err}", file=sys.stderr)
        return EXIT_REFUSED
    summary = {"profile": str(result.profile_path), "samples": str(result.samples_path),
               "plots": [str(p) for p in result.plots], "measured_points": result.measured_points,
               "key": result.profile.key_str(), "forced_despite": list(result.refusals),
               "fits": {n: c.fit.to_dict() if c.fit else None for n, c in result.profile.costs.items()}}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"wrote {result.profile_path} ({result.profile.key_str()}); samples {result.samples_path}")
        for name, cost in result.profile.costs.items():
            if cost.fit is not None:
                holdout = "n/a" if cost.fit.holdout_mape is None else f"{cost.fit.holdout_mape:.1%}"
                print(f"  costs.{name}: n={cost.fit.n_samples}, train MAPE {cost.fit.train_mape:.1%}, "
                      f"holdout MAPE {holdout}")
        for reason in result.refusals:
            print(f"  written with --force despite: {reason}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from tripath.profile.inspect import describe, format_show
    from tripath.profile.profile import load_profile

    profile = load_profile(profile_path(args.name))
    print(json.dumps(describe(profile), indent=2) if args.json else format_show(profile))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from tripath.profile.inspect import compare, format_compare
    from tripath.profile.profile import load_profile

    a, b = load_profile(profile_path(args.a)), load_profile(profile_path(args.b))
    print(json.dumps(compare(a, b), indent=2) if args.json else format_compare(a, b))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from tripath.calibrate.assemble import full_depth_points
    from tripath.calibrate.plots import plot_fit
    from tripath.calibrate.samples import read_samples, samples_path_for
    from tripath.core.atomic import check_dir_target, writing_dir
    from tripath.profile.profile import load_profile

    out = check_dir_target(args.out, args.replace)  # refused before any work
    path = profile_path(args.name)
    profile = load_profile(path)
    samples = read_samples(samples_path_for(path))
    names: list[str] = []
    with writing_dir(out, args.replace) as tmp:  # the folder appears whole, or not at all
        for name, model in profile.costs.items():
            # the statistic the fit used is named in its data line, e.g. "cpu-tiny.samples.csv (min_ms): ..."
            statistic = "min" if model.fit is not None and "(min_ms)" in model.fit.data else "median"
            x1, x2, ms = full_depth_points(samples, name, profile.model.layers, statistic)
            if len(ms) == 0:
                continue
            written = plot_fit(name, model, x1, x2, ms, tmp / f"{path.stem}.{name}.png", profile.key_str())
            names.append(written.name)
    for name in names:
        print(f"wrote {out / name}")
    return 0


def cmd_project(args: argparse.Namespace) -> int:
    from tripath.calibrate.hardware import spec_named
    from tripath.calibrate.published.projection import project_profile
    from tripath.core.atomic import check_file_target
    from tripath.profile.profile import load_profile, save_profile

    src = profile_path(args.src)
    out = Path(args.out) if args.out else src.with_name(f"projected-{src.stem}-to-{args.to}.json")
    check_file_target(out, "--out")  # before any work
    projected = project_profile(load_profile(src), spec_named(args.to),
                                command=f"tripath profile project {args.src} --to {args.to}")
    save_profile(projected, out)
    print(f"wrote {out} ({projected.key_str()}): {projected.notes[0]}")
    return 0


def cmd_acceptance(args: argparse.Namespace) -> int:
    from tripath.core.atomic import check_file_target, write_text
    from tripath.profile.profile import load_profile, save_profile
    from tripath.profile.vllm_metrics import merge_overlay, overlay, read_acceptance, scenario_table

    if args.out is not None:
        check_file_target(args.out, "--out")  # before any work
    entry, counters = read_acceptance(args.file, args.task, args.model)
    entries = {args.task: entry}
    layer = overlay(entries)
    if args.into is not None:
        if args.out is None:
            raise InputError(None, "--out", "--into writes the merged profile: give --out PATH")
        merged = merge_overlay(load_profile(profile_path(args.into)), layer, args.file)
        save_profile(merged, args.out)
        written = f"wrote {args.out}: {args.into} with acceptance.{args.task} from {args.file}"
    elif args.out is not None:
        write_text(Path(args.out), json.dumps(layer, indent=2) + "\n")
        written = f"wrote {args.out}"
    else:
        written = None
    if args.json:
        drafts = counters.drafts.value
        print(json.dumps({
            "task": args.task, "k": entry.k, "mean": entry.mean, "per_position": entry.per_position,
            "mean_acceptance_length": 1.0 + counters.accepted.value / drafts,
            "draft_acceptance_rate": counters.accepted.value / counters.draft_tokens.value
            if counters.draft_tokens.value else None,
            "counters": {"drafts": drafts, "draft_tokens": counters.draft_tokens.value,
                         "accepted_tokens": counters.accepted.value,
                         "accepted_per_position": [c.value for c in counters.per_pos]},
            "model_name": counters.model_name, "overlay": layer, "scenario": scenario_table(entries),
            "written": written}, indent=2))
        return 0
    if written is not None:
        print(written)
    else:
        print(scenario_table(entries) if args.as_ == "scenario" else json.dumps(layer, indent=2))
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from tripath.calibrate.aic.estimator import Estimator, EstimatorKey, installed_version
    from tripath.core.atomic import check_file_target

    check_file_target(args.out, "--out", args.replace)  # before any work
    dp = int(getattr(args, "attention_dp", 1))
    if args.tp * dp > 8:
        raise InputError(None, "--attention-dp", f"{dp} ranks of --tp {args.tp} is {args.tp * dp} GPUs: at most 8 "
                         "(one node)")
    installed_version()  # the aic extra missing: one line saying how to install it, before the builder's imports
    from tripath.calibrate.aic.builder import build_profile, grid_error, weight_read_floor_ms
    from tripath.profile.catalog import MODELS, draft_for
    from tripath.profile.profile import save_profile

    preset = MODELS.get(args.model)
    model_dir = preset.config_dir if preset is not None else Path(args.model)
    if preset is None and not (model_dir / "config.json").is_file():
        raise InputError(str(model_dir / "config.json"), "--model", "not a shipped model "
                         f"({', '.join(MODELS)}) nor a folder holding an HF config.json")
    name = args.name or (preset.name if preset is not None else model_dir.name.lower())
    out = Path(args.out)
    draft = None if args.no_draft or preset is None else draft_for(preset.name)
    ep = bool(getattr(args, "expert_parallel", False))
    profile = build_profile(name, model_dir, args.gpu, args.tp, args.weights, args.kv, args.backend,
                            args.backend_version, draft, expert_parallel=ep, attention_dp=dp)
    est = Estimator(EstimatorKey(model_dir, args.gpu, args.backend, args.backend_version, args.tp, args.weights,
                                 args.kv, ep, dp))
    window = int(profile.costs["prefill"].domain["context_tokens"][1])
    points = [("decode", b, c) for b in (1, 7, 33, 100, 257) for c in (100, window // 3)]
    points += [("prefill", t, c) for t in (17, 700, 3000) for c in (0, window // 5)]
    check = grid_error(profile, est, points)
    save_profile(profile, out)
    decode = profile.costs["decode"].table
    summary = {"profile": str(out), "key": profile.key_str(), "estimator": est.describe(),
               "decode_ms_batch1_1k": profile.decode_ms(1, 1024),
               "decode_ms_batch64_1k": profile.decode_ms(64, 64 * 1024),
               "weight_read_floor_ms": weight_read_floor_ms(profile),
               "weight_read_floor_all_experts_ms": weight_read_floor_ms(profile, all_experts=True),
               "kv_capacity_bytes": profile.kv_capacity_bytes,
               "measured_share_decode": decode.measured_share if decode else None,
               "largest_error_vs_estimator": check}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"wrote {out} ({profile.key_str()}) from {est.describe()}")
        every = ("" if profile.model.moe is None else
                 f", every expert's {summary['weight_read_floor_all_experts_ms']:.2f} ms")
        print(f"  decode step, batch 1 at 1K context: {summary['decode_ms_batch1_1k']:.2f} ms (weight-read floor "
              f"{summary['weight_read_floor_ms']:.2f} ms{every}); batch 64: {summary['decode_ms_batch64_1k']:.2f} ms")
        rank = f" per rank (one of {dp}; step costs per rank too)" if dp > 1 else ""
        print(f"  KV budget {profile.kv_capacity_bytes / 2**30:.1f} GiB{rank}; {decode.measured_share:.1%} of the "
              f"decode grid's time from measured kernel rows; largest difference from the estimator at {len(points)} "
              f"off-grid checks: {check:.2%}")
    return 0
