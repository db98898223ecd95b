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


def _cmd_calibrate(args: argparse.Namespace) -> int:
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


def _cmd_show(args: argparse.Namespace) -> int:
    from tripath.profile.inspect import describe, format_show
    from tripath.profile.profile import load_profile

    profile = load_profile(profile_path(args.name))
    print(json.dumps(describe(profile), indent=2) if args.json else format_show(profile))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from tripath.profile.inspect import compare, format_compare
    from tripath.profile.profile import load_profile

    a, b = load_profile(profile_path(args.a)), load_profile(profile_path(args.b))
    print(json.dumps(compare(a, b), indent=2) if args.json else format_compare(a, b))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
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


def _cmd_project(args: argparse.Namespace) -> int:
    from tripath.calibrate.hardware import spec_named
    from tripath.calibrate.published.projection import project_profile
    from tripath.profile.profile import load_profile, save_profile

    src = profile_path(args.src)
    projected = project_profile(load_profile(src), spec_named(args.to),
                                command=f"tripath profile project {args.src} --to {args.to}")
    out = Path(args.out) if args.out else src.with_name(f"projected-{src.stem}-to-{args.to}.json")
    save_profile(projected, out)
    print(f"wrote {out} ({projected.key_str()}): {projected.notes[0]}")
    return 0


def _cmd_acceptance(args: argparse.Namespace) -> int:
    from tripath.core.atomic import write_text
    from tripath.profile.profile import load_profile, save_profile
    from tripath.profile.vllm_metrics import merge_overlay, overlay, read_acceptance, scenario_table

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


def _cmd_build(args: argparse.Namespace) -> int:
    from tripath.calibrate.aic.builder import build_profile, grid_error, weight_read_floor_ms
    from tripath.calibrate.aic.estimator import Estimator, EstimatorKey
    from tripath.profile.catalog import MODELS, draft_for
    from tripath.profile.profile import save_profile

    preset = MODELS.get(args.model)
    model_dir = preset.config_dir if preset is not None else Path(args.model)
    if preset is None and not (model_dir / "config.json").is_file():
        raise InputError(str(model_dir / "config.json"), "--model", "not a shipped model "
                         f"({', '.join(MODELS)}) nor a folder holding an HF config.json")
    name = args.name or (preset.name if preset is not None else model_dir.name.lower())
    out = Path(args.out)
    if out.exists() and not args.replace:
        raise InputError(str(out), "--out", "exists; pass --replace to overwrite it")
    draft = None if args.no_draft or preset is None else draft_for(preset.name)
    profile = build_profile(name, model_dir, args.gpu, args.tp, args.weights, args.kv, args.backend,
                            args.backend_version, draft)
    est = Estimator(EstimatorKey(model_dir, args.gpu, args.backend, args.backend_version, args.tp, args.weights,
                                 args.kv))
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
               "kv_capacity_bytes": profile.kv_capacity_bytes,
               "measured_share_decode": decode.measured_share if decode else None,
               "largest_error_vs_estimator": check}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"wrote {out} ({profile.key_str()}) from {est.describe()}")
        print(f"  decode step, batch 1 at 1K context: {summary['decode_ms_batch1_1k']:.2f} ms (weight-read floor "
              f"{summary['weight_read_floor_ms']:.2f} ms); batch 64: {summary['decode_ms_batch64_1k']:.2f} ms")
        print(f"  KV budget {profile.kv_capacity_bytes / 2**30:.1f} GiB; {decode.measured_share:.1%} of the decode "
              f"grid's time from measured kernel rows; largest difference from the estimator at {len(points)} "
              f"off-grid checks: {check:.2%}")
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Register `calibrate` and `profile` on the tripath parser."""
    cal = sub.add_parser("calibrate", help="time the real engine, fit the cost formulas, write a profile",
                         description="Sweep prefill (new tokens x cached context) and decode (batch x total "
                         "context) on the real engine, fit prefill_v1 / decode_v2, write data/profiles/NAME.json "
                         "with NAME.samples.csv (resumable) and fit plots beside it.")
    cal.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    which = cal.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", metavar="DIR", help="HF-layout checkpoint folder (timed whole)")
    which.add_argument("--model-config", metavar="NAME", help="config preset with random weights (e.g. llama2-70b)")
    cal.add_argument("--layers-timed", type=int, default=2, help="presets: decoder layers instantiated; the "
                     "full depth is extrapolated per layer from 1 and this many (default 2)")
    cal.add_argument("--preset", choices=("quick", "full"), default="quick")
    cal.add_argument("--out", help="profile path (default data/profiles/DEVICE-MODEL.json)")
    cal.add_argument("--force", action="store_true", help="write the profile even if a fit exceeds the threshold")
    cal.add_argument("--max-holdout-mape", type=float, default=0.20, help="refusal threshold (fraction)")
    cal.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: steadier timings)")
    cal.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                     help="default float32 on cpu, bfloat16 on cuda")
    cal.add_argument("--statistic", choices=("median", "min"),
                     help="repetition statistic fitted (default: min for CPU wall time, where other processes "
                     "only add time; else median)")
    cal.add_argument("--cpu-clock", choices=("wall", "thread"),
                     help="CPU timing clock (default: thread CPU time when --threads 1, else wall)")
    cal.add_argument("--kv-capacity-gib", type=float, help="KV budget of one replica (default: derived; needed "
                     "when the full model's weights do not fit the device that times a few of its layers)")
    cal.add_argument("--draft", metavar="DIR", help="draft checkpoint folder: adds the speculative sweep "
                     "(per task and K of the preset's grid, quick {1,2,4,6}, full 1..8: acceptance, cost ratio c, "
                     "verify cost v(K); needs --model)")
    cal.add_argument("--eval-prompts", metavar="JSONL", help="prompts by task for the speculative sweep "
                     "(default data/models/eval_prompts.jsonl)")
    cal.add_argument("--paging", action="store_true", help="add the paging sweep: N pages over each link "
                     "(device<->host, host<->SSD) through the tiered cache's tiers, pages of 64/256/1024 tokens; "
                     "fits paging_v1 per link and per chunk size")
    cal.add_argument("--seqpar", action="store_true", help="add the sequence-parallel sweep: P vs P = 1 "
                     "prefill speedup and merge ms at 512/1024/2048 tokens, P in quick {2}, full {2, 4} (gloo ranks; "
                     "a P above the CPU count is skipped with a printed reason)")
    cal.add_argument("--compression", action="store_true", help="add the KV-compression sweep: int8, int4, "
                     "mixed-int4, window vs full precision on two eval prompts (bytes, decode time, top-1 "
                     "agreement; acceptance drop with --draft; needs --model)")
    cal.add_argument("--step-overhead", action="store_true", help="add the step-overhead sweep: a served "
                     "Engine.step() minus its forward at each decode batch of the preset and a few prefills "
                     "(costs.step_overhead, overhead_v1; under a minute on the quick preset)")
    cal.add_argument("--refresh", action="append", choices=("compression", "seqpar", "paging", "speculative"),
                     help="measure this optional sweep afresh (repeatable): its rows are dropped from the samples "
                     "CSV first; the other sweeps' rows are kept and refitted, not re-measured")
    cal.add_argument("--no-progress", action="store_true")
    cal.add_argument("--json", action="store_true")
    cal.set_defaults(func=_cmd_calibrate)

    prof = sub.add_parser("profile", help="inspect, compare, plot or project calibration profiles; import acceptance")
    psub = prof.add_subparsers(dest="profile_command", required=True, metavar="ACTION")
    show = psub.add_parser("show", help="coefficients, domains, fit errors and sources of one profile")
    show.add_argument("name", help="profile name (data/profiles/NAME.json) or path")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_cmd_show)
    cmp_ = psub.add_parser("compare", help="two profiles side by side (ratios B / A)")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    cmp_.add_argument("--json", action="store_true")
    cmp_.set_defaults(func=_cmd_compare)
    plot = psub.add_parser("plot", help="samples against fits, one PNG per cost model")
    plot.add_argument("name")
    plot.add_argument("--out", required=True, help="folder for the PNGs, written whole (absent or empty)")
    plot.add_argument("--replace", action="store_true", help="replace an existing non-empty --out folder whole")
    plot.set_defaults(func=_cmd_plot)
    proj = psub.add_parser("project", help="scale a profile to other hardware by roofline ratios (projected)")
    proj.add_argument("src")
    proj.add_argument("--to", required=True, help="target hardware: a100-80gb, h100-sxm or h200")
    proj.add_argument("--out", help="default: data/profiles/projected-SRC-to-SPEC.json beside the source")
    proj.set_defaults(func=_cmd_project)
    build = psub.add_parser(
        "build", help="a GPU profile from aiconfigurator-core's measured kernel tables (needs the aic extra)",
        description="Query aiconfigurator-core's estimator (measured vLLM/SGLang/TensorRT-LLM kernel tables) over "
                    "a grid of decode and prefill iterations and write a tripath profile whose step costs are "
                    "those tables (docs/aic_profiles.md). Install the estimator with pip install -e '.[aic]'.")
    build.add_argument("--model", required=True, help="a shipped model (llama-2-7b, llama-2-70b, codellama-34b, "
                       "llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, qwen3-32b) or a folder with an HF config.json")
    build.add_argument("--gpu", required=True, choices=("a100-80gb", "h100-sxm", "h200", "b200"))
    build.add_argument("--tp", type=int, default=1, choices=(1, 2, 4, 8), help="tensor-parallel degree")
    build.add_argument("--weights", default="fp16", choices=("fp16", "fp8"))
    build.add_argument("--kv", default="fp16", choices=("fp16", "fp8"), help="KV-cache precision")
    build.add_argument("--backend", default="vllm", choices=("vllm", "sglang", "trtllm"))
    build.add_argument("--backend-version", help="default: the estimator's current version for that GPU")
    build.add_argument("--name", help="the profile key's model name (default: the preset's or the folder's)")
    build.add_argument("--no-draft", action="store_true", help="no speculative section (a shipped model gets its "
                       "catalogue draft priced from the same tables by default; a config folder gets none)")
    build.add_argument("--out", required=True, help="profile path to write")
    build.add_argument("--replace", action="store_true", help="overwrite an existing --out")
    build.add_argument("--json", action="store_true")
    build.set_defaults(func=_cmd_build)
    acc = psub.add_parser(
        "acceptance", help="per-task draft acceptance from a vLLM /metrics dump (a profile overlay or scenario table)",
        description="Read vLLM's speculative-decoding counters (vllm:spec_decode_num_drafts, _num_draft_tokens, "
                    "_num_accepted_tokens, _num_accepted_tokens_per_pos; Prometheus text, with or without _total) "
                    "and print the task's acceptance: per-position P(token j accepted | tokens before it "
                    "accepted) and the mean a, as a profile overlay (JSON acceptance section) or as the scenario "
                    "line `[strategy.speculative] acceptance = {TASK = a}` (docs/acceptance.md).")
    acc.add_argument("file", help="the metrics dump (e.g. curl http://HOST:8000/metrics > metrics.txt)")
    acc.add_argument("--task", required=True, help="the task the dump measured (a scenario's [workload.tasks] name; "
                                                   "the dump does not say)")
    acc.add_argument("--model", help="keep this model_name's series (needed when the dump holds several)")
    acc.add_argument("--as", dest="as_", choices=("overlay", "scenario"), default="overlay",
                     help="print a profile overlay (default) or the scenario table line")
    acc.add_argument("--out", help="write the overlay (or, with --into, the merged profile) here")
    acc.add_argument("--into", metavar="PROFILE", help="merge into this profile (name or path) and write it to --out")
    acc.add_argument("--json", action="store_true", help="counters, per-position acceptance, mean a and both forms")
    acc.set_defaults(func=_cmd_acceptance)
