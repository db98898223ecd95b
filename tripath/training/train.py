"""Trains the tiny byte-level draft/target pair on the multi-task corpus (CPU, no download).

    python -m tripath.training.train --draft-steps 1000 --target-steps 1000

AdamW with linear warmup and cosine decay, bf16 autocast on CPU with fp32 master weights,
one fixed seed. Checkpoints (HF layout, atomic) are saved every --save-every steps, so a run
cut short still leaves the latest weights; each model folder also gets train_log.json, from
which tripath/training/model_card.py writes data/models/MODEL_CARD.md.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from tripath.core.atomic import write_text
from tripath.core.data_dirs import MODELS_DIR
from tripath.engine.model.checkpoint import save_checkpoint
from tripath.engine.model.config import ModelConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.model.tokenizer import VOCAB_SIZE, ByteTokenizer
from tripath.training.corpus import TASKS, Corpus, CorpusConfig, build_corpus, write_eval_prompts
from tripath.training.corpus_tasks import Sample

# Sized so the draft's batch-1 decode step costs well under a quarter of the target's on a
# 2-core CPU (measured by tripath/training/model_card.py); GQA (4 query heads per KV head) in the target.
TARGET_CONFIG = ModelConfig(
    vocab_size=VOCAB_SIZE,
    hidden_size=256,
    intermediate_size=688,
    num_layers=6,
    num_heads=8,
    num_kv_heads=2,
    max_position_embeddings=2048,
)
DRAFT_CONFIG = ModelConfig(
    vocab_size=VOCAB_SIZE,
    hidden_size=128,
    intermediate_size=352,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    max_position_embeddings=2048,
)
EVAL_PROMPTS_PER_TASK = 24


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser and schedule of one model's run."""

    steps: int
    batch_size: int = 4
    seq_len: int = 1024
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 250
    save_every: int = 250
    seed: int = 0
    bf16: bool = True

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "eval_every", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"lr/min_lr_ratio: need lr > 0 and 0 <= min_lr_ratio <= 1, got {self.lr}")
        if self.warmup_steps < 0 or self.weight_decay < 0 or not self.grad_clip > 0:
            raise ValueError("warmup_steps/weight_decay/grad_clip: must be >= 0, >= 0, > 0")


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to cfg.lr, then cosine decay to cfg.lr * min_lr_ratio at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)


class TokenStreams:
    """Per task, all training documents as one id stream (BOS doc EOS BOS doc EOS ...).

    Windows start at a document's BOS so each sample sees documents from their start, as
    the evaluation prompts are fed (a summary needs its whole report in the window).
    """

    def __init__(self, corpus: Corpus, tokenizer: ByteTokenizer) -> None:
        self.ids: dict[str, np.ndarray] = {}
        self.starts: dict[str, np.ndarray] = {}
        for task in TASKS:
            docs = [tokenizer.encode(doc, add_bos=True, add_eos=True) for doc in corpus.train[task]]
            lengths = np.array([len(d) for d in docs], dtype=np.int64)
            self.starts[task] = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            self.ids[task] = np.fromiter((t for d in docs for t in d), dtype=np.int64, count=int(lengths.sum()))

    def batch(self, rng: np.random.Generator, batch_size: int, seq_len: int) -> torch.Tensor:
        """[B, T+1] ids; rows cycle through the tasks (equal mix), task order rotated at random."""
        rows = []
        offset = int(rng.integers(len(TASKS)))
        for row in range(batch_size):
            task = TASKS[(row + offset) % len(TASKS)]
            stream, starts = self.ids[task], self.starts[task]
            start = min(int(starts[int(rng.integers(len(starts)))]), len(stream) - seq_len - 1)
            rows.append(stream[start : start + seq_len + 1])
        return torch.from_numpy(np.stack(rows))  # [B, T+1]


@torch.inference_mode()
def evaluate(
    model: LlamaModel, samples: dict[str, tuple[Sample, ...]], tokenizer: ByteTokenizer, bf16: bool
) -> dict[str, dict[str, float]]:
    """Per task, mean next-byte NLL (nats) over whole held-out texts and over their references only."""
    model.eval()
    out = {}
    max_len = model.config.max_position_embeddings
    for task, task_samples in samples.items():
        total = ref_total = 0.0
        count = ref_count = 0
        for s in task_samples:
            prompt = tokenizer.encode(s.prompt, add_bos=True)
            ids = (prompt + tokenizer.encode(s.reference, add_eos=True))[:max_len]
            x = torch.tensor([ids])  # [1, L]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(x[:, :-1])
            nll = F.cross_entropy(logits[0].float(), x[0, 1:], reduction="none")  # [L-1]
            total += float(nll.sum())
            count += nll.numel()
            ref = nll[len(prompt) - 1 :]  # positions whose target is a reference byte (or EOS)
            ref_total += float(ref.sum())
            ref_count += ref.numel()
        out[task] = {"text_loss": total / count, "reference_loss": ref_total / max(1, ref_count)}
    model.train()
    return out


def _write_json(path: Path, data: dict) -> None:
    write_text(path, json.dumps(data, indent=2))


def train_model(
    name: str,
    config: ModelConfig,
    cfg: TrainConfig,
    streams: TokenStreams,
    heldout: dict[str, tuple[Sample, ...]],
    out_dir: Path,
    command: str,
) -> dict:
    """Trains one model from scratch; checkpoint + train_log.json every save_every steps and at the end."""
    torch.manual_seed(cfg.seed)
    model = LlamaModel(config, torch.Generator().manual_seed(cfg.seed))
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]  # no decay on norm gains
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    rng = np.random.default_rng([cfg.seed, 7])
    tokenizer = ByteTokenizer()
    quick = {task: s[:12] for task, s in heldout.items()}
    log: dict = {
        "name": name,
        "params": config.num_params(),
        "model": config.to_dict(),
        "train": asdict(cfg),
        "command": command,
        "threads": torch.get_num_threads(),
        "history": [],
        "complete": False,
    }
    start, tokens, train_loss = time.perf_counter(), 0, float("nan")
    bar = tqdm(range(cfg.steps), desc=name, mininterval=5.0, file=sys.stderr)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg)
        batch = streams.batch(rng, cfg.batch_size, cfg.seq_len)  # [B, T+1]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(batch[:, :-1])  # [B, T, V]
        loss = F.cross_entropy(logits.float().reshape(-1, config.vocab_size), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        tokens += batch[:, 1:].numel()
        value = float(loss.detach())
        train_loss = 0.98 * train_loss + 0.02 * value if step else value
        elapsed = time.perf_counter() - start
        bar.set_postfix(loss=f"{train_loss:.3f}", tok_s=f"{tokens / elapsed:.0f}")
        done = step + 1
        if done % cfg.eval_every == 0 or done == cfg.steps:
            final = done == cfg.steps
            losses = evaluate(model, heldout if final else quick, tokenizer, cfg.bf16)
            log["history"].append(
                {
                    "step": done,
                    "tokens": tokens,
                    "seconds": round(elapsed, 1),
                    "train_loss_ema": train_loss,
                    "heldout": losses,
                }
            )
            summary = " ".join(f"{t}={v['text_loss']:.3f}" for t, v in losses.items())
            tqdm.write(f"[{name}] step {done}/{cfg.steps} tokens {tokens} {elapsed:.0f}s heldout {summary}")
        if done % cfg.save_every == 0 or done == cfg.steps:
            log.update(
                steps_done=done,
                tokens_seen=tokens,
                train_seconds=round(time.perf_counter() - start, 1),
                tokens_per_s=round(tokens / (time.perf_counter() - start), 1),
                complete=done == cfg.steps,
                final_heldout=log["history"][-1]["heldout"] if log["history"] else None,
            )
            save_checkpoint(model, config, out_dir / name)
            _write_json(out_dir / name / "train_log.json", log)
    return log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tripath.training.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=MODELS_DIR, help="where tiny-target/, tiny-draft/ go")
    parser.add_argument("--target-steps", type=int, default=1000)
    parser.add_argument("--draft-steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=4, help="sequences per step (rows cycle tasks)")
    parser.add_argument("--seq-len", type=int, default=1024, help="bytes per training sequence")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus-bytes", type=int, default=1_500_000, help="training bytes per task")
    parser.add_argument("--only", choices=("both", "target", "draft"), default="both")
    parser.add_argument("--eval-every", type=int, default=250)
    # One thread: on a CPU shared with other jobs, two OpenMP threads per process oversubscribe the
    # cores and run slower than one (README.md, "The real engine").
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-bf16", action="store_true", help="train in fp32 instead of bf16 autocast")
    parser.add_argument("--no-card", action="store_true", help="skip writing MODEL_CARD.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    command = "python -m tripath.training.train " + shlex.join(sys.argv[1:] if argv is None else argv)
    corpus = build_corpus(CorpusConfig(seed=args.seed, train_bytes_per_task=args.corpus_bytes))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    prompts = [s for task in TASKS for s in corpus.heldout[task][:EVAL_PROMPTS_PER_TASK]]
    write_eval_prompts(prompts, args.out_dir / "eval_prompts.jsonl")
    streams = TokenStreams(corpus, ByteTokenizer())
    # The target first: it is the long run, and the one whose copying ability matters most.
    runs = [("tiny-target", TARGET_CONFIG, args.target_steps), ("tiny-draft", DRAFT_CONFIG, args.draft_steps)]
    for name, config, steps in runs:
        if args.only in ("both", name.removeprefix("tiny-")):
            cfg = TrainConfig(
                steps=steps,
                batch_size=args.batch_size,
                seq_len=args.seq_len,
                lr=args.lr,
                seed=args.seed,
                eval_every=args.eval_every,
                save_every=args.eval_every,
                bf16=not args.no_bf16,
            )
            train_model(name, config, cfg, streams, corpus.heldout, args.out_dir, command)
    if not args.no_card:
        from tripath.training.model_card import write_model_card  # after training: it times both models

        write_model_card(args.out_dir, corpus)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
