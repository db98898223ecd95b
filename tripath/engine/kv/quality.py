"""What each KV-compression mode costs in quality, measured with the tiny target on held-out text.

- ``teacher_forced``: a held-out sample's prompt is prefilled at full precision (as KIVI does, the
  prompt attends to itself unquantized), then the cache is compressed and the reference is fed in
  chunks of ``chunk`` tokens; the logits predicting the reference are compared with full precision:
  KL(p_fp || p_mode), top-1 agreement, and the reference's perplexity.
- ``greedy_acceptance``: the negative coupling with speculative decoding.  In greedy speculative
  decoding the output is the target's greedy output and a drafted token is accepted exactly when it
  equals the target's argmax after the same prefix.  So the target (with compressed KV) decodes its
  own greedy continuation token by token, the draft (full precision, as the draft keeps its own
  cache) is teacher-forced on it, and rounds of K proposals are replayed over the match indicators:
  acceptance = accepted drafts / proposed drafts.
- ``needle``: a fact placed early in a long report, then asked for at the end.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

import torch

from tripath.engine.kv.modes import KVCompression, cache_bytes_per_token, make_cache
from tripath.engine.model.model import LlamaModel


@dataclass(frozen=True)
class QualityPoint:
    tokens: int  # reference tokens scored
    kl_sum: float  # sum over positions of KL(p_fp || p_mode), nats
    top1_agree: int  # positions where the mode's argmax equals full precision's
    nll_sum: float  # sum of -log p_mode(reference token)
    bytes_per_token: float  # stored by the mode's cache at the end of the sample


@torch.inference_mode()
def teacher_forced_logits(model: LlamaModel, prompt: list[int], reference: list[int], mode: KVCompression,
                          chunk: int = 32) -> tuple[torch.Tensor, float]:
    """Logits predicting each reference token [len(reference), V] and the cache's bytes per token."""
    cache = make_cache(mode, model.config.num_layers)
    ids = prompt + reference
    rows = [model(torch.tensor([prompt]), attention=cache)[0, -1:]]  # [1, V]: predicts reference[0]
    for start in range(len(prompt), len(ids) - 1, chunk):
        end = min(start + chunk, len(ids) - 1)  # the last reference token is never fed
        pos = torch.arange(start, end).unsqueeze(0)  # [1, T]
        rows.append(model(torch.tensor([ids[start:end]]), pos, cache)[0])
    return torch.cat(rows), cache_bytes_per_token(cache)


def compare(fp_logits: torch.Tensor, logits: torch.Tensor, reference: list[int], nbytes: float) -> QualityPoint:
    logp_fp, logp = fp_logits.log_softmax(-1), logits.log_softmax(-1)
    kl = (logp_fp.exp() * (logp_fp - logp)).sum(-1)  # [T]
    target = torch.tensor(reference)
    nll = -logp.gather(1, target.unsqueeze(1)).squeeze(1)
    agree = int((fp_logits.argmax(-1) == logits.argmax(-1)).sum())
    return QualityPoint(len(reference), float(kl.sum()), agree, float(nll.sum()), nbytes)


@torch.inference_mode()
def greedy_with_cache(model: LlamaModel, prompt: list[int], new_tokens: int, mode: KVCompression,
                      stop_id: int | None = None) -> list[int]:
    """The target's greedy continuation, one token per step, attending through the mode's cache
    (up to new_tokens, or through stop_id)."""
    cache = make_cache(mode, model.config.num_layers)
    logits = model(torch.tensor([prompt]), attention=cache)[0, -1]
    out: list[int] = []
    for i in range(new_tokens):
        out.append(int(logits.argmax()))
        if out[-1] == stop_id or i == new_tokens - 1:
            break
        pos = torch.tensor([[len(prompt) + i]])
        logits = model(torch.tensor([[out[-1]]]), pos, cache)[0, -1]
    return out


@torch.inference_mode()
def greedy_acceptance(target: LlamaModel, draft: LlamaModel, prompt: list[int], new_tokens: int,
                      mode: KVCompression, k: int, stop_id: int | None = None) -> tuple[int, int, int, int]:
    """(accepted drafts, proposed drafts, rejections, rounds) of greedy speculative decoding with K = k.

    accepted / (accepted + rejections) is the per-position acceptance a of the simulator's
    E = (1 - a^(K+1)) / (1 - a); accepted / proposed is vLLM's draft acceptance rate.
    """
    text = greedy_with_cache(target, prompt, new_tokens, mode, stop_id)
    ids = torch.tensor([prompt + text])  # [1, P + N]
    draft_next = draft(ids)[0, len(prompt) - 1 : -1].argmax(-1).tolist()  # draft's guess for each text token
    match = [d == t for d, t in zip(draft_next, text, strict=True)]
    accepted = proposed = rejections = rounds = 0
    pos = 0
    while pos < len(text):
        kk = min(k, len(text) - pos - 1)  # never propose past the last token (as the engines cap K)
        n = 0
        while n < kk and match[pos + n]:
            n += 1
        accepted, proposed, rounds = accepted + n, proposed + kk, rounds + 1
        rejections += int(n < kk)
        pos += n + 1  # n accepted drafts + one token from the target
    return accepted, proposed, rejections, rounds


def needle_prompts(reports: list[str], count: int, distance: int, seed: int) -> list[tuple[str, str]]:
    """(prompt, answer) pairs: "Report: S\\nS employs N people ..." then ~distance bytes of other
    sentences from held-out reports, then "\\nSummary: S employs" -> the answer is " N"."""
    rng = random.Random(seed)
    subjects = [r.split("\n")[0].removeprefix("Report: ") for r in reports]
    sentences = [s for r in reports for s in re.findall(r"[A-Z][^.]*\.", r.split("\n")[1])]
    out = []
    for _ in range(count):
        subject = rng.choice(subjects)
        number = rng.randint(1000, 9999)
        body: list[str] = []
        while sum(len(s) + 1 for s in body) < distance:
            sentence = rng.choice(sentences)
            if subject.split()[0] not in sentence:
                body.append(sentence)
        fact = f"{subject} employs {number} people across {rng.randint(2, 60)} offices."
        out.append((f"Report: {subject}\n{fact} " + " ".join(body) + f"\nSummary: {subject} employs", f" {number}"))
    return out


def perplexity(nll_sum: float, tokens: int) -> float:
    return math.exp(nll_sum / tokens) if tokens else float("nan")
