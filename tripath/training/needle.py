"""The synthetic retrieval ("needle") corpus of the tiny-needle model.

A document is a few facts, filler text, then every fact asked for again, in another order:

    <BOS>[K1]482
    [K2]093
    <filler: dialogue, report and Python text of the tiny-model corpus, 0..~900 bytes>
    [K2]093
    [K1]482<EOS>

A key is ONE byte from 0x80..0xFF, distinct within a document and never in the (ASCII-only) filler;
the value is three digits.  The answer is the digits after the repeated key: retrieval by exact key
match, the copy-from-context operation (induction) that needle-in-a-haystack tests probe.  Keys are
drawn afresh per document, so nothing can be memorised; held-out cases use fresh values and the
corpus's held-out filler (disjoint entity names, held-out stdlib files).  A first attempt with
five-letter keys ("key qzvkt = 4821.") stayed at chance (answer loss ln 10) for 400 steps on this
CPU: matching on a multi-byte key is a harder circuit than matching one distinctive byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tripath.engine.model.tokenizer import ByteTokenizer
from tripath.training.corpus import Corpus

FILLER_TASKS = ("dialogue", "summarization", "code")  # math's "Q:/A:" numbers would look like answers
TOK = ByteTokenizer()


@dataclass(frozen=True)
class NeedleConfig:
    """Shape of the documents; the same fields make training and evaluation documents."""

    max_facts: int = 4
    value_digits: int = 3
    max_filler_bytes: int = 900

    def __post_init__(self) -> None:
        if not 1 <= self.max_facts <= 128:
            raise ValueError(f"NeedleConfig.max_facts: must be in [1, 128], got {self.max_facts}")
        for name in ("value_digits",):
            if getattr(self, name) < 1:
                raise ValueError(f"NeedleConfig.{name}: must be >= 1, got {getattr(self, name)}")
        if self.max_filler_bytes < 0:
            raise ValueError(f"NeedleConfig.max_filler_bytes: must be >= 0, got {self.max_filler_bytes}")


def fact_ids(key: int, value: str) -> list[int]:
    return [key, *TOK.encode(value + "\n")]


def draw_facts(rng: np.random.Generator, cfg: NeedleConfig, least: int = 1) -> tuple[list[int], list[str]]:
    """least..max_facts distinct key bytes and their random values."""
    facts = int(rng.integers(min(least, cfg.max_facts), cfg.max_facts + 1))
    keys = [0x80 + int(k) for k in rng.choice(128, size=facts, replace=False)]
    values = ["".join(str(int(d)) for d in rng.integers(0, 10, cfg.value_digits)) for _ in range(facts)]
    return keys, values


def filler_pool(corpus: Corpus, heldout: bool) -> list[str]:
    """Texts to cut filler from: training documents, or the held-out samples' whole texts."""
    if heldout:
        return [s.text for task in FILLER_TASKS for s in corpus.heldout[task]]
    return [doc for task in FILLER_TASKS for doc in corpus.train[task]]


def filler(rng: np.random.Generator, pool: list[str], nbytes: int) -> str:
    """About nbytes of text: random pool texts cut at a random start, joined by newlines (ASCII only,
    so one byte = one token)."""
    parts: list[str] = []
    size = 0
    while size < nbytes:
        text = pool[int(rng.integers(len(pool)))].encode("ascii", "ignore").decode()
        start = int(rng.integers(max(1, len(text) // 2)))
        part = text[start : start + nbytes - size]
        parts.append(part)
        size += len(part) + 1
    return "\n".join(parts)[:nbytes]


@dataclass(frozen=True)
class Document:
    ids: list[int]  # BOS ... EOS
    answer: list[bool]  # True at the value digits of the queries (the tokens retrieval must produce)


def make_document(rng: np.random.Generator, pool: list[str], cfg: NeedleConfig,
                  filler_bytes: int | None = None) -> Document:
    keys, values = draw_facts(rng, cfg)
    nbytes = int(rng.integers(0, cfg.max_filler_bytes + 1)) if filler_bytes is None else filler_bytes
    ids = [TOK.bos_id] + [t for k, v in zip(keys, values, strict=True) for t in fact_ids(k, v)]
    ids += TOK.encode(filler(rng, pool, nbytes) + "\n")
    answer = [False] * len(ids)
    for i in rng.permutation(len(keys)):
        ids += fact_ids(keys[i], values[i])
        answer += [False] + [True] * cfg.value_digits + [False]
    return Document(ids + [TOK.eos_id], answer + [False])


def packed_batch(rng: np.random.Generator, pool: list[str], cfg: NeedleConfig, batch_size: int,
                 seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """[B, T+1] ids and [B, T+1] answer mask: documents back to back, the last one cut off."""
    ids = np.zeros((batch_size, seq_len + 1), dtype=np.int64)
    mask = np.zeros((batch_size, seq_len + 1), dtype=bool)
    for row in range(batch_size):
        row_ids: list[int] = []
        row_mask: list[bool] = []
        while len(row_ids) < seq_len + 1:
            doc = make_document(rng, pool, cfg)
            row_ids += doc.ids
            row_mask += doc.answer
        ids[row] = row_ids[: seq_len + 1]
        mask[row] = row_mask[: seq_len + 1]
    return ids, mask


@dataclass(frozen=True)
class NeedleCase:
    prompt: list[int]  # BOS, facts, filler, newline, then the asked fact's key byte
    answer: list[int]  # the value's digits
    fact_start: int  # position of the asked fact's key byte
    fact_end: int  # tokens up to the end of the last fact line


def needle_cases(pool: list[str], cfg: NeedleConfig, count: int, context_tokens: int, seed: int) -> list[NeedleCase]:
    """Held-out retrieval prompts of context_tokens tokens: 2..max_facts fact lines at the start, filler,
    then the LAST fact's key.  The last line starts at position >= 5, past the 4 attention-sink tokens
    the sink modes keep, so what those modes keep of the start does not contain the asked value."""
    rng = np.random.default_rng([seed, context_tokens, 17])
    cases = []
    for _ in range(count):
        keys, values = draw_facts(rng, cfg, least=2)
        head = [TOK.bos_id] + [t for k, v in zip(keys, values, strict=True) for t in fact_ids(k, v)]
        query = TOK.encode("\n") + [keys[-1]]
        body = TOK.encode(filler(rng, pool, max(0, context_tokens - len(head) - len(query))))
        start = len(head) - len(fact_ids(keys[-1], values[-1]))
        cases.append(NeedleCase(head + body + query, TOK.encode(values[-1]), start, len(head)))
    return cases
