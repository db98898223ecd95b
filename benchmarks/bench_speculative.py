"""Speculative decoding: measured speedup vs the speedup the analytic formula predicts, same run.

Per task, with the shipped tiny pair at batch 1 (greedy, fp32): target-only decoding and fixed-K
speculation run interleaved prompt by prompt (so CPU contention hits both alike).  From the
same run: a = accepted / (accepted + rejections), c = mean draft pass / mean target step,
v(K) = mean verify pass / mean target step, predicted = E(K, a) / (K c + v(K)) with
E = (1 - a^(K+1)) / (1 - a); measured = target-only decode time / speculative decode time.
Means, not medians: on a shared CPU a pass is now and then descheduled for a few ms, and the
measured totals include those stalls, so the prediction must too to compare like with like.
"tokens/round" (measured) against E(K, a) checks the formula's i.i.d. acceptance assumption.
The "other" column is the share of a speculative step spent outside the draft passes and the
target pass (scheduling, verification bookkeeping, cache truncation): the formula does not
model it, so it is where the prediction and the measurement part.

    .venv/bin/python benchmarks/bench_speculative.py [--k 4] [--prompts 6] [--new-tokens 96] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from tripath.core.data_dirs import MODELS_DIR
from tripath.core.speculative import FixedK, SpecCosts, expected_tokens, predicted_speedup
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.model.tokenizer import ByteTokenizer
from tripath.engine.speculative.decoding import SpecStepRecord, SpeculativeDecoding
from tripath.engine.speculative.proposers import DraftModelProposer
from tripath.training.corpus import TASKS, load_eval_prompts

ENGINE = EngineConfig(num_blocks=256, block_size=16)


def _run(engine: Engine, prompt: list[int], new: int) -> list:
    """Step records after the prefill step (batch 1)."""
    rid = engine.add_request(prompt, new)
    recs = []
    while engine.has_unfinished:
        recs.append(engine.step())
    engine.release(rid)
    return recs[1:]


def bench_task(target: torch.nn.Module, draft: torch.nn.Module, prompts: list[list[int]], k: int, new: int) -> dict:
    plain = Engine(target, ENGINE)
    spec = Engine(target, ENGINE, strategy=SpeculativeDecoding(DraftModelProposer(draft, 256, 16), FixedK(k)))
    _run(plain, [1] * 8, 4), _run(spec, [1] * 8, 4)  # warm-up
    base_steps: list[float] = []
    spec_recs: list[SpecStepRecord] = []
    for prompt in prompts:
        base_steps += [r.wall_s for r in _run(plain, prompt, new)]
        spec_recs += _run(spec, prompt, new)
    unit = statistics.mean(base_steps)
    c = spec.strategy.timings.cost_ratio(unit, mean=True)  # decode-like batch-1 draft passes
    full = [r for r in spec_recs if r.ks == (k,)]  # rounds at the full K (the last few are capped)
    v = statistics.mean(r.verify_s for r in full) / unit
    a = spec.strategy.counters.per_token_acceptance
    spec_time = sum(r.wall_s for r in spec_recs)
    other = sum(r.wall_s - r.draft_s - r.verify_s for r in full) / sum(r.wall_s for r in full)
    measured = sum(base_steps) / spec_time  # both decode the same number of tokens per prompt
    predicted = predicted_speedup(k, a, SpecCosts(c=c, verify_base=v))
    return {
        "k": k,
        "a": a,
        "acceptance_rate": spec.strategy.counters.acceptance_rate,
        "c": c,
        "v": v,
        "target_step_ms": unit * 1e3,
        "other_share": other,
        "tokens_per_round": sum(r.emitted_tokens for r in full) / len(full),
        "expected_tokens": expected_tokens(k, a),
        "predicted": predicted,
        "measured": measured,
        "error": measured / predicted - 1.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--models-dir", type=Path, default=MODELS_DIR, help="holds tiny-target, tiny-draft, eval_prompts.jsonl"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_checkpoint(args.models_dir / "tiny-target")[1]
    draft = load_checkpoint(args.models_dir / "tiny-draft")[1]
    tok = ByteTokenizer()
    samples = load_eval_prompts(args.models_dir / "eval_prompts.jsonl")
    results = {}
    for task in TASKS:
        prompts = [tok.encode(s.prompt, add_bos=True) for s in samples if s.task == task][: args.prompts]
        results[task] = bench_task(target, draft, prompts, args.k, args.new_tokens)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"speculative decoding, K={args.k}, batch 1, tiny pair, {args.prompts} prompts x {args.new_tokens} tokens")
    head = f"{'task':<14}{'a':>6}{'tok/round':>10}{'E(K,a)':>8}{'c':>7}{'v(K)':>7}{'other':>7}"
    print(head + f"{'predicted':>11}{'measured':>10}{'error':>8}")
    for task, r in results.items():
        print(
            f"{task:<14}{r['a']:>6.2f}{r['tokens_per_round']:>10.2f}{r['expected_tokens']:>8.2f}"
            f"{r['c']:>7.3f}{r['v']:>7.2f}{r['other_share']:>7.0%}"
            f"{r['predicted']:>10.2f}x{r['measured']:>9.2f}x{r['error']:>+8.0%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
