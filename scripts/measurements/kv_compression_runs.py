"""The KV-compression measurements of scripts/measurements/measure_kv.py, one function per CSV: teacher-forced
quality (KL, top-1 agreement, perplexity) and draft acceptance on long prompts of the held-out set,
needle retrieval (cache path and the serving Engine's store), and the store's footprint and speed.

Every row is measured in the run that calls these; measure_kv.py writes them out and renders the report.
"""

from __future__ import annotations

import dataclasses
import sys

import torch
from store_meter import measure_store  # beside this script (scripts/measurements/, first on sys.path)

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.kv.modes import MODES, KVCompression
from tripath.engine.kv.quality import compare, greedy_acceptance, perplexity, teacher_forced_logits
from tripath.engine.model.tokenizer import ByteTokenizer
from tripath.training.corpus import TASKS, CorpusConfig, build_corpus
from tripath.training.needle import NeedleConfig, filler_pool, needle_cases

TOK = ByteTokenizer()
LONG_TOKENS = 1000  # the tiny target was trained on 1024-token windows


def mode_config(mode: str) -> KVCompression:
    return KVCompression(mode, group=32, value_group=32, sink_tokens=4, recent_tokens=64, heavy_fraction=0.05,
                         window_tokens=256)


def long_prompt(samples: list, index: int, budget: int) -> list[int]:
    """Sample ``index``'s prompt preceded by the whole texts of other held-out samples of its task, as many
    as fit in ``budget`` tokens (with BOS): a long context whose early part is real text of the same kind."""
    s = samples[index]
    prompt = TOK.encode(s.prompt)
    before: list[int] = []
    for other in samples:
        if other.task != s.task or other is s:
            continue
        text = TOK.encode(other.text + "\n")
        if 1 + len(before) + len(text) + len(prompt) > budget:
            break
        before += text
    return [TOK.bos_id] + before + prompt


def quality(target: torch.nn.Module, samples: list, per_task: int) -> list[dict]:
    rows = []
    for task in TASKS:
        chosen = [i for i, s in enumerate(samples) if s.task == task][:per_task]
        cases = []
        for i in chosen:
            ref = TOK.encode(samples[i].reference)
            prompt = long_prompt(samples, i, LONG_TOKENS - len(ref))
            cases.append((prompt, ref, teacher_forced_logits(target, prompt, ref, mode_config("fp"))[0]))
        for mode in MODES:
            acc = {"tokens": 0, "kl": 0.0, "agree": 0, "nll": 0.0, "bytes": 0.0, "fp_nll": 0.0}
            for prompt, ref, fp in cases:
                logits, nbytes = teacher_forced_logits(target, prompt, ref, mode_config(mode))
                q, fp_q = compare(fp, logits, ref, nbytes), compare(fp, fp, ref, 0.0)
                acc["tokens"] += q.tokens
                acc["kl"] += q.kl_sum
                acc["agree"] += q.top1_agree
                acc["nll"] += q.nll_sum
                acc["fp_nll"] += fp_q.nll_sum
                acc["bytes"] += nbytes * (len(prompt) + len(ref))
            ctx = sum(len(p) + len(r) for p, r, _ in cases)
            n = acc["tokens"]
            rows.append({"task": task, "mode": mode, "samples": len(cases), "tokens": n,
                         "mean_context": ctx / len(cases), "kl_nats": acc["kl"] / n, "top1_agree": acc["agree"] / n,
                         "ppl_fp": perplexity(acc["fp_nll"], n), "ppl": perplexity(acc["nll"], n),
                         "ppl_change_pct": 100 * (perplexity(acc["nll"], n) / perplexity(acc["fp_nll"], n) - 1),
                         "bytes_per_token": acc["bytes"] / ctx})
            print(f"quality {task} {mode}: {rows[-1]}", file=sys.stderr)
    return rows


def acceptance(target: torch.nn.Module, draft: torch.nn.Module, samples: list, per_task: int, new_tokens: int,
               k: int) -> list[dict]:
    rows = []
    for task in TASKS:
        chosen = [i for i, s in enumerate(samples) if s.task == task][:per_task]
        prompts = [long_prompt(samples, i, LONG_TOKENS - new_tokens) for i in chosen]
        for mode in MODES:
            acc = prop = rej = rounds = 0
            for prompt in prompts:
                a, p, j, r = greedy_acceptance(target, draft, prompt, new_tokens, mode_config(mode), k,
                                               stop_id=TOK.eos_id)
                acc, prop, rej, rounds = acc + a, prop + p, rej + j, rounds + r
            rows.append({"task": task, "mode": mode, "k": k, "prompts": len(prompts), "proposed": prop,
                         "accepted": acc, "rejections": rej,
                         "acceptance": acc / (acc + rej) if acc + rej else float("nan"),
                         "accepted_per_proposed": acc / prop if prop else float("nan"),
                         "tokens_per_round": (acc + rounds) / rounds if rounds else float("nan")})
            print(f"acceptance {task} {mode}: {rows[-1]}", file=sys.stderr)
    return rows


def needle(model: torch.nn.Module, trials: int, contexts: list[int]) -> list[dict]:
    """Per context and mode: the tiny-needle model's held-out retrieval, through the dequantize-on-read
    caches (teacher-forced on the answer) and, for the quantized modes, the serving Engine's store (greedy)."""
    pool = filler_pool(build_corpus(CorpusConfig(seed=0, train_bytes_per_task=1_000)), heldout=True)
    rows = []
    for ctx in contexts:
        cases = needle_cases(pool, NeedleConfig(), trials, ctx, seed=0)
        fp = [teacher_forced_logits(model, c.prompt, c.answer, mode_config("fp"))[0] for c in cases]
        for mode in MODES:
            hits = first = agree = 0
            kl = 0.0
            for case, fp_logits in zip(cases, fp, strict=True):
                logits, _ = teacher_forced_logits(model, case.prompt, case.answer, mode_config(mode))
                guess = logits.argmax(-1).tolist()
                hits += guess == case.answer
                first += guess[0] == case.answer[0]
                q = compare(fp_logits, logits, case.answer, 0.0)
                kl, agree = kl + q.kl_sum, agree + q.top1_agree
            n = len(cases) * len(cases[0].answer)
            rows.append({"path": "cache", "mode": mode, "context": ctx, "trials": len(cases),
                         "accuracy": hits / len(cases), "first_digit": first / len(cases), "kl_nats": kl / n,
                         "top1_agree": agree / n})
            print(f"needle {rows[-1]}", file=sys.stderr)
        for mode in ("int8", "int4", "mixed-int8", "mixed-int4"):
            engine = Engine(model, EngineConfig(max_batch_size=16, num_blocks=1024, kv_compression=mode,
                                                fuse_projections=False))
            outs = engine.generate([c.prompt for c in cases], len(cases[0].answer))
            hits = sum(o == c.answer for o, c in zip(outs, cases, strict=True))
            first = sum(o[0] == c.answer[0] for o, c in zip(outs, cases, strict=True))
            rows.append({"path": "engine", "mode": mode, "context": ctx, "trials": len(cases),
                         "accuracy": hits / len(cases), "first_digit": first / len(cases), "kl_nats": float("nan"),
                         "top1_agree": float("nan")})
            print(f"needle {rows[-1]}", file=sys.stderr)
    return rows


def store(target: torch.nn.Module, samples: list, contexts: list[int], rounds: int) -> list[dict]:
    prompt = TOK.encode(" ".join(s.text for s in samples if s.task == "summarization"), add_bos=True)
    return [dataclasses.asdict(p) for p in measure_store(target, prompt, contexts, steps=17, rounds=rounds)]
