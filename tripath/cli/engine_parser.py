"""The parsers of the engine-side subcommands: `calibrate`, `profile` (tripath/calibrate/commands.py runs them) and
`validate` (tripath/fidelity/validate.py). Argparse only: torch loads when a command runs."""

from __future__ import annotations

import argparse

from tripath.cli.arg_types import fraction_threshold, gib, positive_thread_count, seed, timed_layers


def register(sub: argparse._SubParsersAction) -> None:
    """Register `calibrate`, `profile` and `validate` on the tripath parser."""
    _add_calibrate(sub)
    _add_validate(sub)


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    """`calibrate` and `profile`."""
    from tripath.calibrate import commands

    cal = sub.add_parser("calibrate", help="time the real engine, fit the cost formulas, write a profile",
                         description="Sweep prefill (new tokens x cached context) and decode (batch x total "
                         "context) on the real engine, fit prefill_v1 / decode_v2, write data/profiles/NAME.json "
                         "with NAME.samples.csv (resumable) and fit plots beside it.")
    cal.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    which = cal.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", metavar="DIR", help="HF-layout checkpoint folder (timed whole)")
    which.add_argument("--model-config", metavar="NAME", help="config preset with random weights (e.g. llama2-70b)")
    cal.add_argument("--layers-timed", type=timed_layers, default=2, help="presets: decoder layers instantiated; "
                     "the full depth is extrapolated per layer from 1 and this many (default 2)")
    cal.add_argument("--preset", choices=("quick", "full"), default="quick")
    cal.add_argument("--out", help="profile path (default data/profiles/DEVICE-MODEL.json)")
    cal.add_argument("--force", action="store_true", help="write the profile even if a fit exceeds the threshold")
    cal.add_argument("--max-holdout-mape", type=fraction_threshold, default=0.20, help="refusal threshold (fraction)")
    cal.add_argument("--threads", type=positive_thread_count, default=1,
                     help="torch CPU threads (default 1: steadier timings)")
    cal.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                     help="default float32 on cpu, bfloat16 on cuda")
    cal.add_argument("--statistic", choices=("median", "min"),
                     help="repetition statistic fitted (default: min for CPU wall time, where other processes "
                     "only add time; else median)")
    cal.add_argument("--cpu-clock", choices=("wall", "thread"),
                     help="CPU timing clock (default: thread CPU time when --threads 1, else wall)")
    cal.add_argument("--kv-capacity-gib", type=gib, help="KV budget of one replica (default: derived; needed "
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
    cal.set_defaults(func=commands.cmd_calibrate)

    prof = sub.add_parser("profile", help="inspect, compare, plot or project calibration profiles; import acceptance")
    psub = prof.add_subparsers(dest="profile_command", required=True, metavar="ACTION")
    show = psub.add_parser("show", help="coefficients, domains, fit errors and sources of one profile")
    show.add_argument("name", help="profile name (data/profiles/NAME.json) or path")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=commands.cmd_show)
    cmp_ = psub.add_parser("compare", help="two profiles side by side (ratios B / A)")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    cmp_.add_argument("--json", action="store_true")
    cmp_.set_defaults(func=commands.cmd_compare)
    plot = psub.add_parser("plot", help="samples against fits, one PNG per cost model")
    plot.add_argument("name")
    plot.add_argument("--out", required=True, help="folder for the PNGs, written whole (absent or empty)")
    plot.add_argument("--replace", action="store_true", help="replace an existing non-empty --out folder whole")
    plot.set_defaults(func=commands.cmd_plot)
    proj = psub.add_parser("project", help="scale a profile to other hardware by roofline ratios (projected)")
    proj.add_argument("src")
    proj.add_argument("--to", required=True, help="target hardware: a100-80gb, h100-sxm or h200")
    proj.add_argument("--out", help="default: data/profiles/projected-SRC-to-SPEC.json beside the source")
    proj.set_defaults(func=commands.cmd_project)
    build = psub.add_parser(
        "build", help="a GPU profile from aiconfigurator-core's measured kernel tables (needs the aic extra)",
        description="Query aiconfigurator-core's estimator (measured vLLM/SGLang/TensorRT-LLM kernel tables) over "
                    "a grid of decode and prefill iterations and write a tripath profile whose step costs are "
                    "those tables (docs/aic_profiles.md). Install the estimator with pip install -e '.[aic]'.")
    build.add_argument("--model", required=True, help="a shipped model (llama-2-7b, llama-2-70b, codellama-34b, "
                       "llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, qwen3-32b, mixtral-8x7b, qwen3-235b-a22b, "
                       "deepseek-v3, gpt-oss-120b) or a folder with an HF config.json")
    build.add_argument("--gpu", required=True, choices=("a100-80gb", "h100-sxm", "h200", "b200"))
    build.add_argument("--tp", type=int, default=1, choices=(1, 2, 4, 8), help="tensor-parallel degree")
    build.add_argument("--weights", default="fp16", choices=("fp16", "fp8", "fp4"),
                       help="fp4: mxfp4 mixture-of-experts checkpoints (gpt-oss)")
    build.add_argument("--expert-parallel", action="store_true", help="mixture of experts: shard the experts by "
                       "expert parallelism over the TP group (vLLM's --enable-expert-parallel) instead of by TP")
    build.add_argument("--attention-dp", type=int, default=1, choices=(1, 2, 4, 8), metavar="D",
                       help="mixture of experts: attention data parallelism (vLLM's --data-parallel-size D): a "
                       "replica of D ranks of --tp GPUs each (tp x D at most 8), the experts over all of them; the "
                       "profile is one rank's (default 1: none)")
    build.add_argument("--kv", default="fp16", choices=("fp16", "fp8"), help="KV-cache precision")
    build.add_argument("--backend", default="vllm", choices=("vllm", "sglang", "trtllm"))
    build.add_argument("--backend-version", help="default: the estimator's current version for that GPU")
    build.add_argument("--name", help="the profile key's model name (default: the preset's or the folder's)")
    build.add_argument("--no-draft", action="store_true", help="no speculative section (a shipped model gets its "
                       "catalogue draft priced from the same tables by default; a config folder gets none)")
    build.add_argument("--out", required=True, help="profile path to write")
    build.add_argument("--replace", action="store_true", help="overwrite an existing --out")
    build.add_argument("--json", action="store_true")
    build.set_defaults(func=commands.cmd_build)
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
    acc.set_defaults(func=commands.cmd_acceptance)


def _add_validate(sub: argparse._SubParsersAction) -> None:
    """`validate`."""
    from tripath.fidelity import validate
    from tripath.fidelity.validate import DEFAULT_OUT, DEFAULT_SCENARIOS, PARTIAL_OUT, QUICK_REQUESTS, QUICK_SCENARIOS

    p = sub.add_parser("validate", help="replay validation scenarios on the real engine and in the simulator; "
                       "report the error (--json)",
                       description="Fidelity: serve each validation scenario on the real engine (measured, "
                       "this machine) and simulate it on the profile; write the signed error table and CDFs.")
    p.add_argument("--profile", default="cpu-tiny", help="profile calibrated on this machine (name or path)")
    p.add_argument("--scenarios", default=str(DEFAULT_SCENARIOS), help="folder of validation scenario TOMLs")
    p.add_argument("--quick", action="store_true",
                   help=f"only {', '.join(QUICK_SCENARIOS)}, first {QUICK_REQUESTS} requests each")
    p.add_argument("--out", default=None,
                   help=f"report folder, written whole (default: {DEFAULT_OUT} for a full run, {PARTIAL_OUT} for "
                   "a quick or --only one; a partial run is refused over the full report)")
    p.add_argument("--replace", action="store_true", help="replace an existing non-empty --out folder whole")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--noise", action="append", default=[], metavar="NAME",
                   help="serve this scenario twice on the engine: run-to-run spread (repeatable)")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this scenario (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="print error_table.json")
    p.set_defaults(func=validate.cmd_validate)
