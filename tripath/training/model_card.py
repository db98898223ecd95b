"""MODEL_CARD.md for the tiny draft/target pair, written from the checkpoints and their train_log.json.

    python -m tripath.training.model_card            # rewrite data/models/MODEL_CARD.md

Every number in the card is measured on this machine: losses by tripath/training/train.py during
training, decode step costs and draft/target agreement here, when the card is written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import torch

from tripath.core.atomic import write_text
from tripath.core.data_dirs import MODELS_DIR
from tripath.engine.kv.dense import decode_step_ms
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.model.model import LlamaModel
from tripath.engine.model.tokenizer import ByteTokenizer
from tripath.training.corpus import TASKS, Corpus, CorpusConfig, build_corpus, load_eval_prompts


def measure_cost_ratio(
    target: LlamaModel, draft: LlamaModel, context: int = 256, steps: int = 32, rounds: int = 7
) -> dict[str, float]:
    """Batch-1 decode step time of each model (ms) and the draft/target ratio c.

    The two models are timed alternately, round by round, so a burst of load from other
    processes hits both. Load only ever adds time, so each side's fastest round is the
    estimate of its own cost (as timeit advises); the medians are reported beside it.
    """
    target_ms, draft_ms = [], []
    for _ in range(rounds):
        target_ms.append(decode_step_ms(target, context, steps, repeats=1))
        draft_ms.append(decode_step_ms(draft, context, steps, repeats=1))
    t, d = min(target_ms), min(draft_ms)
    return {
        "context": context,
        "threads": torch.get_num_threads(),
        "target_ms": t,
        "draft_ms": d,
        "ratio": d / t,
        "target_median_ms": sorted(target_ms)[rounds // 2],
        "draft_median_ms": sorted(draft_ms)[rounds // 2],
    }


@torch.inference_mode()
def greedy_agreement(target: LlamaModel, draft: LlamaModel, prompts_path: Path) -> dict[str, float]:
    """Per task, the fraction of reference positions where draft and target argmax agree
    (teacher-forced on the held-out references): a proxy for greedy speculative acceptance."""
    tok = ByteTokenizer()
    agree: dict[str, list[int]] = {task: [0, 0] for task in TASKS}
    for sample in load_eval_prompts(prompts_path):
        prompt = tok.encode(sample.prompt, add_bos=True)
        ids = torch.tensor([prompt + tok.encode(sample.reference)])  # [1, L]
        predict = slice(len(prompt) - 1, ids.shape[1] - 1)  # positions predicting reference bytes
        t_arg = target(ids)[0, predict].argmax(-1)
        d_arg = draft(ids)[0, predict].argmax(-1)
        agree[sample.task][0] += int((t_arg == d_arg).sum())
        agree[sample.task][1] += int(t_arg.numel())
    return {task: hit / max(1, n) for task, (hit, n) in agree.items()}


def _loss_table(logs: dict[str, dict]) -> list[str]:
    baseline = math.log(next(iter(logs.values()))["model"]["vocab_size"])
    rows = [
        f"Uniform-byte baseline: ln(vocab) = {baseline:.3f} nats/byte.",
        "",
        "| task | " + " | ".join(f"{n} text | {n} reference" for n in logs) + " |",
        "|---|" + "---|---|" * len(logs),
    ]
    for task in TASKS:
        cells = []
        for log in logs.values():
            h = (log.get("final_heldout") or {}).get(task, {})
            cells += [
                f"{h.get('text_loss', float('nan')):.3f}",
                f"{h.get('reference_loss', float('nan')):.3f}",
            ]
        rows.append(f"| {task} | " + " | ".join(cells) + " |")
    return rows


def render_card(
    logs: dict[str, dict],
    corpus: Corpus,
    cost: dict[str, float],
    agreement: dict[str, float],
    weight_bytes: dict[str, int],
) -> str:
    """The card's Markdown; `logs` maps model name to its train_log.json content."""
    cfg = corpus.config
    first = next(iter(logs.values()))
    threads = first.get("threads", "unrecorded")
    commands = list(dict.fromkeys(log["command"] for log in logs.values()))  # one per separate run
    lines = [
        "# Tiny draft/target pair (byte-level LLaMA)",
        "",
        "Two small LLaMA-architecture models trained from scratch on this machine's CPU, for measuring",
        "speculative decoding (acceptance by task, draft/target cost ratio) with real weights. They are",
        "test instruments, not useful language models. Provenance of every number: **measured** here.",
        "",
        f"## Corpus (tripath/training/corpus.py, seed {cfg.seed})",
        "",
        "Byte-level tokens (id = byte value; BOS=256, EOS=257, PAD=258; vocabulary padded to 264).",
        "",
        "| task | training bytes | documents | what it is |",
        "|---|---|---|---|",
    ]
    what = {
        "code": f"Python standard-library source in line-aligned chunks of <= {cfg.code_chunk_bytes} bytes",
        "dialogue": "templated user/assistant conversations (6 topics; assistant echoes entities)",
        "math": "multi-step integer arithmetic with worked steps (hard to predict)",
        "summarization": "templated company report + 'Summary:' copying salient sentences verbatim",
    }
    for task in TASKS:
        lines.append(f"| {task} | {corpus.train_bytes(task)} | {len(corpus.train[task])} | {what[task]} |")
    lines += [
        "",
        "Held out (data/models/eval_prompts.jsonl, never in training): code from whole held-out stdlib",
        "files (hash of path), math problems by a hash of the question, dialogue and summarization",
        "with a disjoint set of entity names; separate seed streams (tests/training/test_corpus.py checks it).",
        "",
        "## Models",
        "",
        "| | params | layers | hidden | heads / kv heads | intermediate | max positions | file |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, log in logs.items():
        m = log["model"]
        lines.append(
            f"| {name} | {log['params']:,} | {m['num_layers']} | {m['hidden_size']} | "
            f"{m['num_heads']} / {m['num_kv_heads']} | {m['intermediate_size']} | "
            f"{m['max_position_embeddings']} | {weight_bytes[name] / 1e6:.1f} MB fp32 |"
        )
    lines += [
        "",
        "## Training (tripath/training/train.py)",
        "",
        "| | steps | batch x seq | tokens seen | wall time | tokens/s | lr (peak) | complete |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, log in logs.items():
        t = log["train"]
        lines.append(
            f"| {name} | {log['steps_done']} / {t['steps']} | {t['batch_size']} x {t['seq_len']} | "
            f"{log['tokens_seen']:,} | {log['train_seconds'] / 60:.1f} min | {log['tokens_per_s']:.0f} | "
            f"{t['lr']} | {'yes' if log['complete'] else 'NO: latest periodic checkpoint'} |"
        )
    lines += [
        "",
        f"AdamW (betas 0.9/0.95, weight decay {t['weight_decay']} on matrices), linear warmup "
        f"{t['warmup_steps']} steps, cosine decay to {t['min_lr_ratio']} x peak; bf16 autocast on CPU with",
        f"fp32 master weights; gradient clip {t['grad_clip']}; torch threads: {threads}.",
        "Training windows start at a document's BOS; each batch row is a different task (equal mix).",
        "The CPU (2 cores) was shared with other jobs, so wall time and tokens/s are pessimistic.",
        "",
        "Command(s): " + "; ".join(f"`{c}`" for c in commands),
        "",
        "## Held-out loss per task (nats per byte, final checkpoint)",
        "",
        "text: every byte of the held-out sample; reference: only the continuation after the prompt.",
        "",
    ]
    lines += _loss_table(logs)
    lines += [
        "",
        "## Speculative-decoding figures (measured when this card was written)",
        "",
        f"Batch-1 decode step after {cost['context']} context tokens (dense KV cache, fp32, "
        f"{cost['threads']} thread(s), fastest of interleaved rounds): target {cost['target_ms']:.3f} ms, "
        f"draft {cost['draft_ms']:.3f} ms, **draft/target cost ratio c = {cost['ratio']:.3f}** "
        f"(medians: {cost['target_median_ms']:.3f} / {cost['draft_median_ms']:.3f} ms).",
        "",
        "Greedy draft/target argmax agreement on the held-out references (teacher-forced; a proxy for",
        "per-token acceptance, not the measured acceptance of a speculative run):",
        "",
        "| task | agreement |",
        "|---|---|",
    ]
    lines += [f"| {task} | {agreement[task]:.3f} |" for task in TASKS]
    lines += [
        "",
        "## Limits",
        "",
        "- Copying is partial: teacher-forced, the target predicts ~80% of summary bytes, but greedy decoding",
        "  writes a summary-shaped fact sentence with its own made-up name instead of copying the report's",
        "  names and numbers exactly (more training would be needed; "
        "tests/training/test_tiny_models.py checks what holds).",
        "- Trained at 1024-byte windows: positions beyond ~1024 are untrained although max positions is 2048.",
        "- Runs listed with two commands overlapped in time on the shared CPU (draft trained in its own process).",
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()} "
        f"({os.cpu_count()} CPUs), torch {torch.__version__}, Python {platform.python_version()}.",
        "",
    ]
    return "\n".join(lines)


def write_model_card(models_dir: Path, corpus: Corpus | None = None, threads: int = 1) -> Path:
    """Loads both checkpoints, measures cost ratio and agreement, writes MODEL_CARD.md atomically."""
    torch.set_num_threads(threads)
    logs, models, weight_bytes = {}, {}, {}
    for name in ("tiny-target", "tiny-draft"):
        folder = models_dir / name
        logs[name] = json.loads((folder / "train_log.json").read_text())
        models[name] = load_checkpoint(folder)[1]
        weight_bytes[name] = (folder / "model.safetensors").stat().st_size
    if corpus is None:
        corpus = build_corpus(CorpusConfig(seed=logs["tiny-target"]["train"]["seed"]))
    cost = measure_cost_ratio(models["tiny-target"], models["tiny-draft"])
    agreement = greedy_agreement(
        models["tiny-target"], models["tiny-draft"], models_dir / "eval_prompts.jsonl"
    )
    text = render_card(logs, corpus, cost, agreement, weight_bytes)
    path = models_dir / "MODEL_CARD.md"
    write_text(path, text)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tripath.training.model_card", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--models-dir", type=Path, default=MODELS_DIR)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the timing")
    args = parser.parse_args(argv)
    print(write_model_card(args.models_dir, threads=args.threads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
