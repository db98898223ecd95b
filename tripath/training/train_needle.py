"""Trains tiny-needle: a small byte-level LLaMA that retrieves a fact placed early in a 1K context.

    python -m tripath.training.train_needle --steps 600

The data is tripath/training/needle.py's documents packed into 1024-token rows.  The loss is the mean
next-byte loss over every token PLUS the mean loss over the answer digits only: the answers are
~2% of the tokens, and without their own term the filler's gradient drowns the retrieval signal
the model is for.  Same optimiser and schedule as tripath/training/train.py (AdamW, warmup, cosine, bf16
autocast, one thread).  Held-out needle accuracy (greedy, exact match of all digits, held-out keys
and filler) is measured at the end at several contexts and written to train_log.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from tripath.core.atomic import write_text
from tripath.core.data_dirs import MODELS_DIR
from tripath.engine.model.checkpoint import load_checkpoint, save_checkpoint
from tripath.engine.model.config import ModelConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.model.tokenizer import VOCAB_SIZE
from tripath.training.corpus import CorpusConfig, build_corpus
from tripath.training.needle import NeedleCase, NeedleConfig, filler_pool, needle_cases, packed_batch
from tripath.training.train import TrainConfig, _write_json, learning_rate

# Positions beyond 1024 are never trained (rows are 1024 tokens), so the model says so.
NEEDLE_CONFIG = ModelConfig(
    vocab_size=VOCAB_SIZE,
    hidden_size=128,
    intermediate_size=352,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    max_position_embeddings=1024,
)
EVAL_CONTEXTS = (256, 512, 768, 1000)


@torch.inference_mode()
def retrieves(model: LlamaModel, case: NeedleCase) -> bool:
    """Greedy decoding of len(answer) tokens (dense recompute, full precision) equals the answer."""
    ids = list(case.prompt)
    for _ in case.answer:
        ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(case.prompt) :] == case.answer


def needle_accuracy(model: LlamaModel, cases: list[NeedleCase]) -> float:
    was_training = model.training
    model.eval()
    hits = sum(retrieves(model, c) for c in cases)
    model.train(was_training)
    return hits / len(cases)


def train(cfg: TrainConfig, needle: NeedleConfig, pool: list[str], heldout_pool: list[str], out_dir: Path,
          command: str, eval_cases: int, short: tuple[int, int, int], init: Path | None = None) -> dict:
    """short = (steps, seq_len, max filler bytes) of a first phase of short rows (same tokens per step):
    retrieval over a short distance is learnt first, with 4x as many answers per token, then the
    rest of the run (cfg.seq_len rows, needle.max_filler_bytes) stretches it to the full context."""
    short_steps, short_len, short_filler = short
    short_needle = dataclasses.replace(needle, max_filler_bytes=short_filler)
    short_batch = cfg.batch_size * cfg.seq_len // short_len
    torch.manual_seed(cfg.seed)
    model = LlamaModel(NEEDLE_CONFIG, torch.Generator().manual_seed(cfg.seed))
    previous: dict | None = None
    if init is not None:  # continue an earlier run: its weights, a fresh optimiser and schedule
        model.load_state_dict(load_checkpoint(init)[1].state_dict())
        previous = json.loads((init / "train_log.json").read_text(encoding="utf-8"))
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    rng = np.random.default_rng([cfg.seed, 11])
    phase = {"steps": short_steps, "seq_len": short_len, "batch_size": short_batch, "max_filler_bytes": short_filler}
    log: dict = {"name": "tiny-needle", "short_phase": phase, "params": NEEDLE_CONFIG.num_params(),
                 "model": NEEDLE_CONFIG.to_dict(),
                 "train": asdict(cfg), "needle": asdict(needle), "command": command,
                 "threads": torch.get_num_threads(), "history": [], "complete": False, "continued_from": previous}
    quick = {ctx: needle_cases(heldout_pool, needle, 16, ctx, seed=1) for ctx in (200, 512, 1000)}
    start, tokens, ema = time.perf_counter(), 0, float("nan")
    bar = tqdm(range(cfg.steps), desc="tiny-needle", mininterval=5.0, file=sys.stderr)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg)
        if step < short_steps:
            ids, mask = packed_batch(rng, pool, short_needle, short_batch, short_len)
        else:
            ids, mask = packed_batch(rng, pool, needle, cfg.batch_size, cfg.seq_len)
        x, answer = torch.from_numpy(ids), torch.from_numpy(mask[:, 1:])  # answer: targets that are digits
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(x[:, :-1])  # [B, T, V]
        nll = F.cross_entropy(logits.float().reshape(-1, VOCAB_SIZE), x[:, 1:].reshape(-1), reduction="none")
        answer_nll = nll[answer.reshape(-1)]
        loss = nll.mean() + (answer_nll.mean() if answer_nll.numel() else 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        tokens += x[:, 1:].numel()
        ema = 0.98 * ema + 0.02 * float(answer_nll.mean()) if step else float(answer_nll.mean())
        bar.set_postfix(answer_loss=f"{ema:.3f}", tok_s=f"{tokens / (time.perf_counter() - start):.0f}")
        done = step + 1
        if done % cfg.eval_every == 0 or done == cfg.steps:
            acc = {ctx: needle_accuracy(model, cases) for ctx, cases in quick.items()}
            log["history"].append({"step": done, "tokens": tokens, "seconds": round(time.perf_counter() - start, 1),
                                   "answer_loss_ema": ema, "needle_accuracy_16": acc})
            tqdm.write(f"[tiny-needle] step {done} answer loss {ema:.3f} needle acc {acc}")
        if done % cfg.save_every == 0 or done == cfg.steps:
            seconds = time.perf_counter() - start
            log.update(steps_done=done, tokens_seen=tokens, train_seconds=round(seconds, 1),
                       tokens_per_s=round(tokens / seconds, 1), complete=done == cfg.steps)
            save_checkpoint(model, NEEDLE_CONFIG, out_dir)
            _write_json(out_dir / "train_log.json", log)
    log["heldout_needle_accuracy"] = heldout_accuracy(model, heldout_pool, needle, eval_cases)
    _write_json(out_dir / "train_log.json", log)
    tqdm.write(f"[tiny-needle] held-out needle accuracy: {log['heldout_needle_accuracy']}")
    return log


def heldout_accuracy(model: LlamaModel, pool: list[str], needle: NeedleConfig, cases: int) -> dict:
    """Greedy exact-match accuracy per context on needle_cases (seed 0), full precision."""
    by_context = {ctx: needle_accuracy(model, needle_cases(pool, needle, cases, ctx, seed=0)) for ctx in EVAL_CONTEXTS}
    return {"cases_per_context": cases, "seed": 0, "by_context": by_context}


CARD_BEGIN, CARD_END = "<!-- tiny-needle:begin -->", "<!-- tiny-needle:end -->"


def card_section(log: dict, weights_bytes: int) -> str:
    """The tiny-needle section of data/models/MODEL_CARD.md, from its train_log.json."""
    m, t, ph = log["model"], log["train"], log["short_phase"]
    acc = log.get("heldout_needle_accuracy", {})
    rows = "\n".join(f"| {ctx} | {a:.2f} |" for ctx, a in acc.get("by_context", {}).items())
    return "\n".join([
        CARD_BEGIN,
        "# tiny-needle: a retrieval model for the KV-compression needle test",
        "",
        "Same LLaMA architecture and byte-level vocabulary as the pair above, trained here from scratch "
        "(`tripath/training/train_needle.py`) on the synthetic retrieval corpus of `tripath/training/needle.py`: "
        "one to "
        f"{log['needle']['max_facts']} facts (a key byte from 0x80-0xFF, then {log['needle']['value_digits']} "
        "random digits, one per line) at the start, filler cut from the dialogue, summarization and code text of "
        "the corpus above, then every key again in another order; the loss is the mean next-byte loss plus the "
        "mean loss on the answer digits. Provenance of every number: **measured** here.",
        "",
        "| params | layers | hidden | heads / kv heads | intermediate | max positions | file |",
        "|---|---|---|---|---|---|---|",
        f"| {log['params']:,} | {m['num_layers']} | {m['hidden_size']} | {m['num_heads']} / {m['num_kv_heads']} | "
        f"{m['intermediate_size']} | {m['max_position_embeddings']} | {weights_bytes / 1e6:.1f} MB fp32 |",
        "",
        f"Training: {log.get('steps_done', 0)} / {t['steps']} steps (complete: {log['complete']}); the first "
        f"{ph['steps']} steps on {ph['batch_size']} x {ph['seq_len']}-token rows with at most "
        f"{ph['max_filler_bytes']} filler bytes (retrieval over a short distance is learnt first), the rest on "
        f"{t['batch_size']} x {t['seq_len']}-token rows with up to {log['needle']['max_filler_bytes']} filler bytes; "
        f"{log.get('tokens_seen', 0):,} tokens in {log.get('train_seconds', 0) / 60:.1f} min "
        f"({log.get('tokens_per_s', 0):.0f} tokens/s, {log['threads']} torch thread, the 2-core CPU shared with "
        f"other jobs); AdamW, peak lr {t['lr']}, warmup {t['warmup_steps']}, cosine, bf16 autocast, seed {t['seed']}.",
        "",
        f"Command: `{log['command']}`",
        "",
        *_continued(log.get("continued_from")),
        *_total(log),
        f"Held-out needle accuracy (all {log['needle']['value_digits']} digits right, greedy, full precision; "
        f"{acc.get('cases_per_context', 0)} cases per context, seed {acc.get('seed', 0)}; held-out filler and fresh "
        "values; 2-4 fact lines, the asked one is the last, past the 4 sink tokens, ~context - 17 tokens back; "
        "chance 0.001):",
        "",
        "| context tokens | accuracy |",
        "|---|---|",
        rows,
        "",
        "Limits: positions beyond 1024 are untrained (max positions 1024). A first attempt with five-letter keys "
        "(\"key qzvkt = 4821.\") stayed at chance for 400 steps and was abandoned. Runs were stopped by hand and "
        "continued (fresh optimiser and schedule, new data seed) when the key lookup was still improving: "
        "accuracy is partial (about half the needles), the first digit (which fact to read) is the weak step. "
        "The model is a test instrument "
        "for retrieval under KV compression, not a language model.",
        CARD_END,
    ])


def _continued(prev: dict | None) -> list[str]:
    """Card lines for the run this one continued from (its weights were the starting point)."""
    lines = []
    while prev:  # each run may itself have continued an earlier one
        acc = (prev.get("heldout_needle_accuracy") or {}).get("by_context", "not measured")
        lines.append(f"Continued from an earlier run: `{prev['command']}`, {prev.get('steps_done', 0)} steps, "
                     f"{prev.get('tokens_seen', 0):,} tokens in {prev.get('train_seconds', 0) / 60:.1f} min "
                     f"(its held-out accuracy: {acc}).")
        prev = prev.get("continued_from")
    return [*reversed(lines), ""] if lines else []


def _total(log: dict) -> list[str]:
    """Steps, tokens and time summed over a run and every run it continued from."""
    runs, prev = [], log
    while prev:
        runs.append(prev)
        prev = prev.get("continued_from")
    if len(runs) < 2:
        return []
    steps, tokens = sum(r.get("steps_done", 0) for r in runs), sum(r.get("tokens_seen", 0) for r in runs)
    seconds = sum(r.get("train_seconds", 0) for r in runs)
    best = max(r.get("tokens_per_s", 0) for r in runs)
    return [f"All {len(runs)} runs: {steps:,} steps, {tokens:,} tokens, {seconds / 60:.0f} min on the shared CPU "
            f"(at the fastest run's {best:.0f} tokens/s: {tokens / best / 60:.0f} min).", ""]


def write_card(model_dir: Path, card: Path) -> None:
    """Replace (or append) the tiny-needle section of the model card, atomically."""
    log = json.loads((model_dir / "train_log.json").read_text(encoding="utf-8"))
    section = card_section(log, (model_dir / "model.safetensors").stat().st_size)
    text = card.read_text(encoding="utf-8") if card.exists() else ""
    if CARD_BEGIN in text and CARD_END in text:
        head, rest = text.split(CARD_BEGIN, 1)
        text = head + section + rest.split(CARD_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    write_text(card, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tripath.training.train_needle", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=MODELS_DIR / "tiny-needle")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--short-steps", type=int, default=0, help="first steps on short rows (curriculum)")
    ap.add_argument("--short-len", type=int, default=256)
    ap.add_argument("--short-filler", type=int, default=160, help="max filler bytes in the short phase")
    ap.add_argument("--eval-cases", type=int, default=100, help="held-out needles per context at the end")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: the CPU is shared)")
    ap.add_argument("--init-from", type=Path, default=None, help="continue from this checkpoint's weights")
    ap.add_argument("--card-only", action="store_true", help="rewrite the MODEL_CARD.md section from train_log.json")
    ap.add_argument("--eval-only", action="store_true",
                    help="held-out needle accuracy of the saved model into train_log.json; rewrite the card")
    args = ap.parse_args(argv)
    card = args.out_dir.parent / "MODEL_CARD.md"
    if args.eval_only:
        torch.set_num_threads(args.threads)
        heldout = filler_pool(build_corpus(CorpusConfig(seed=args.seed, train_bytes_per_task=1_000)), True)
        model = load_checkpoint(args.out_dir)[1].eval()
        log = json.loads((args.out_dir / "train_log.json").read_text(encoding="utf-8"))
        log["heldout_needle_accuracy"] = heldout_accuracy(model, heldout, NeedleConfig(), args.eval_cases)
        _write_json(args.out_dir / "train_log.json", log)
        write_card(args.out_dir, card)
        return 0
    if args.card_only:
        write_card(args.out_dir, card)
        return 0
    torch.set_num_threads(args.threads)
    command = "python -m tripath.training.train_needle " + shlex.join(sys.argv[1:] if argv is None else argv)
    corpus = build_corpus(CorpusConfig(seed=args.seed, train_bytes_per_task=500_000))
    needle = NeedleConfig()
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                      seed=args.seed, eval_every=args.eval_every, save_every=args.eval_every)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    train(cfg, needle, filler_pool(corpus, False), filler_pool(corpus, True), args.out_dir, command, args.eval_cases,
          (args.short_steps, args.short_len, args.short_filler), args.init_from)
    write_card(args.out_dir, card)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
