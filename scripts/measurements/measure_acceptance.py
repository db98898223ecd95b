"""Measure speculative decoding with the shipped tiny pair: acceptance by task for K = 1..8, speedup
against target-only decoding, the measured cost ratio c and verify cost v(K), the break-even
acceptance; plus prompt lookup and the adaptive controller.  Batch 1 (per-request latency).

    .venv/bin/python scripts/measurements/measure_acceptance.py            # writes the three outputs below

Outputs: data/measurements/speculative_runs.csv (one row per task, proposer, K, prompt: raw
counts and decode seconds), data/measurements/speculative_costs.csv (per task: c and v(K)),
docs/speculative.md (the tables and the command).  All numbers are measured on this machine,
except "predicted", which is the formula E(K, a) / (K c + v(K)) applied to measured a, c, v(K).
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from tripath.core.atomic import write_text
from tripath.core.data_dirs import MODELS_DIR
from tripath.core.speculative import AdaptiveK, ControllerConfig, FixedK, SpecCosts
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.model.model import LlamaModel
from tripath.engine.model.tokenizer import ByteTokenizer
from tripath.engine.speculative.decoding import SpeculativeDecoding
from tripath.engine.speculative.metrics import SpecCounters, SpecTimings
from tripath.engine.speculative.proposers import DraftModelProposer, PromptLookupProposer
from tripath.training.corpus import TASKS, load_eval_prompts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acceptance_report import Row, findings, markdown, summarize, write_csv  # noqa: E402 - beside this script

__all__ = ["Row", "Run", "TaskCosts", "findings", "markdown", "measure", "summarize", "write_csv"]

REPO = Path(__file__).resolve().parents[2]
ENGINE = EngineConfig(num_blocks=256, block_size=16)


@dataclass(frozen=True)
class Run:
    """One request at batch 1 under one configuration (measured)."""

    task: str
    proposer: str  # none | draft | lookup
    k: str  # "0" target-only, "1".."8", or "adaptive"
    prompt: int
    new_tokens: int
    decode_s: float  # wall time of every step after the prefill step
    drafts: int
    draft_tokens: int
    accepted: int
    rejections: int
    lossless: bool  # output equals the target-only output (greedy)
    phase: int  # 1: fixed K; 2: adaptive (its own target-only runs, interleaved the same way)


@dataclass
class TaskCosts:
    """Per-task pass times (s) at batch 1, for c and v(K)."""

    target_step_s: list[float]
    timings: SpecTimings

    def costs(self, mean: bool = True) -> tuple[float, dict[int, float]]:
        """c and v(K); means by default: the measured speedups are ratios of totals, stalls included."""
        unit = (statistics.mean if mean else statistics.median)(self.target_step_s)
        c = self.timings.cost_ratio(unit, mean)
        return c, {k: self.timings.verify_cost(k, unit, mean) for k in sorted(self.timings.verify_s)}


def _timed(engine: Engine, prompt: list[int], new: int) -> tuple[list[int], list[float]]:
    """Generate at batch 1; returns the output and the wall time of each step after the prefill."""
    rid = engine.add_request(prompt, new)
    walls = []
    while engine.has_unfinished:
        walls.append(engine.step().wall_s)
    out = engine.output(rid)
    engine.release(rid)
    return out, walls[1:]


def _spec_run(
    task: str, name: str, k: str, i: int, engine: Engine, prompt: list[int], new: int, ref: list[int],
    phase: int = 1,
) -> Run:
    before = SpecCounters()
    before.merge(engine.strategy.counters)
    out, walls = _timed(engine, prompt, new)
    c = engine.strategy.counters
    return Run(
        task, name, k, i, new, sum(walls), c.num_drafts - before.num_drafts,
        c.num_draft_tokens - before.num_draft_tokens, c.num_accepted_tokens - before.num_accepted_tokens,
        c.num_rejections - before.num_rejections, out == ref, phase,
    )


def measure(
    target: LlamaModel,
    draft: LlamaModel,
    prompts: dict[str, list[list[int]]],
    ks: list[int],
    new: int,
    progress: Callable[[str], None] = lambda s: None,
) -> tuple[list[Run], dict[str, TaskCosts]]:
    """Interleaved per prompt (target-only, then every K), so CPU contention hits all configs alike."""
    runs: list[Run] = []
    costs: dict[str, TaskCosts] = {}
    plain = Engine(target, ENGINE)
    _timed(plain, [1] * 8, 4)  # warm-up: RoPE tables, allocator
    for task, task_prompts in prompts.items():
        tc = costs[task] = TaskCosts([], SpecTimings())
        engines = {k: Engine(target, ENGINE, strategy=SpeculativeDecoding(DraftModelProposer(draft, 256, 16),
                                                                          FixedK(k))) for k in ks}
        # byte-level tokens: 4..12-byte n-grams (about 1..3 words) are what a BPE lookup of 1..3 tokens sees
        pld = PromptLookupProposer(target.config.vocab_size, min_ngram=4, max_ngram=12)
        lookup = Engine(target, ENGINE, strategy=SpeculativeDecoding(pld, FixedK(4)))
        for eng in [*engines.values(), lookup]:
            _timed(eng, [1] * 8, 4)
        for i, prompt in enumerate(task_prompts):
            ref, walls = _timed(plain, prompt, new)
            tc.target_step_s += walls
            runs.append(Run(task, "none", "0", i, new, sum(walls), 0, 0, 0, 0, True, 1))
            for k, eng in engines.items():
                runs.append(_spec_run(task, "draft", str(k), i, eng, prompt, new, ref))
            runs.append(_spec_run(task, "lookup", "4", i, lookup, prompt, new, ref))
            progress(f"{task} prompt {i}")
        for eng in engines.values():
            tc.timings.draft_pass_s += eng.strategy.timings.draft_pass_s
            for k, xs in eng.strategy.timings.verify_s.items():
                tc.timings.verify_s.setdefault(k, []).extend(xs)
        # adaptive K: the controller is given this task's measured c and a linear fit of v(K)
        c, v = tc.costs()
        slope = (v[max(v)] - v[min(v)]) / (max(v) - min(v)) if len(v) > 1 else 0.0
        spec = SpecCosts(c=c, verify_base=max(1e-6, v[min(v)] - slope * min(v)), verify_per_token=max(0.0, slope))
        ctrl = AdaptiveK(ControllerConfig(k_max=max(ks)), spec)
        adaptive = Engine(target, ENGINE, strategy=SpeculativeDecoding(DraftModelProposer(draft, 256, 16), ctrl))
        _timed(adaptive, [1] * 8, 4)
        for i, prompt in enumerate(task_prompts):
            ref, walls = _timed(plain, prompt, new)
            runs.append(Run(task, "none", "0", i, new, sum(walls), 0, 0, 0, 0, True, 2))
            runs.append(_spec_run(task, "draft", "adaptive", i, adaptive, prompt, new, ref, phase=2))
        progress(f"{task} adaptive")
    return runs, costs


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=10, help="held-out prompts per task")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--models-dir", type=Path, default=MODELS_DIR, help="holds tiny-target, tiny-draft, eval_prompts.jsonl"
    )
    ap.add_argument("--out-dir", type=Path, default=REPO / "data" / "measurements")
    ap.add_argument("--doc", type=Path, default=REPO / "docs" / "speculative.md")
    args = ap.parse_args(argv)
    if args.prompts < 1 or args.new_tokens < 2 or args.k_max < 1 or args.threads < 1:
        ap.error("--prompts, --k-max and --threads must be >= 1, --new-tokens >= 2")
    torch.set_num_threads(args.threads)
    target = load_checkpoint(args.models_dir / "tiny-target")[1]
    draft = load_checkpoint(args.models_dir / "tiny-draft")[1]
    tok = ByteTokenizer()
    samples = load_eval_prompts(args.models_dir / "eval_prompts.jsonl")
    prompts = {t: [tok.encode(s.prompt, add_bos=True) for s in samples if s.task == t][: args.prompts] for t in TASKS}
    start = time.time()
    runs, costs = measure(
        target, draft, prompts, list(range(1, args.k_max + 1)), args.new_tokens,
        progress=lambda s: print(f"[{time.time() - start:6.1f}s] {s}", file=sys.stderr),
    )
    rows = summarize(runs, costs)
    names = [f.name for f in fields(Run)]
    write_csv(args.out_dir / "speculative_runs.csv", names, [[getattr(r, n) for n in names] for r in runs])
    cost_rows = []
    for task, tc in costs.items():
        c, v = tc.costs()
        cost_rows.append([task, "c_mean", "", c, len(tc.timings.draft_pass_s)])
        cost_rows.append([task, "c_median", "", tc.costs(mean=False)[0], len(tc.timings.draft_pass_s)])
        cost_rows += [[task, "v_mean", k, x, len(tc.timings.verify_s[k])] for k, x in v.items()]
        cost_rows.append([task, "target_step_s_mean", "", statistics.mean(tc.target_step_s), len(tc.target_step_s)])
    write_csv(args.out_dir / "speculative_costs.csv", ["task", "quantity", "k", "value", "n_samples"], cost_rows)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    meta = {
        "engine commit": commit.strip() or "unknown",
        "torch": torch.__version__,
        "threads": str(args.threads),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip() + " (CPU shared with other jobs)",
        "date (UTC)": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "wall time": f"{time.time() - start:.0f} s",
        "raw data": "data/measurements/speculative_runs.csv, data/measurements/speculative_costs.csv",
        "inputs (sha256, first 12 hex)": ", ".join(
            f"{name} {_sha(args.models_dir / name)}"
            for name in ("tiny-target/model.safetensors", "tiny-draft/model.safetensors", "eval_prompts.jsonl")
        ),
    }
    argv_str = " ".join(argv if argv is not None else sys.argv[1:])
    command = f".venv/bin/python scripts/measurements/measure_acceptance.py {argv_str}".strip()
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.doc, markdown(rows, costs, command, meta))
    for r in rows:
        print(asdict(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
