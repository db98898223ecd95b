"""Who proposes the K speculative tokens: a draft model on its own paged KV cache, or prompt lookup.

Both sit behind one interface: ``propose(seqs, ks)`` returns a padded batch of proposals with
the proposal distribution q (one-hot for a deterministic proposer, which keeps rejection
sampling lossless), ``commit(seq)`` rolls the proposer's state back to the sequence's
accepted tokens after verification, ``free(request_id)`` forgets a finished request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from tripath.engine.batch import Part, pack
from tripath.engine.kv.paged import KVCacheManager, KVTensors
from tripath.engine.kv.paged_attention import PagedAttention
from tripath.engine.model.fusion import fuse_projections
from tripath.engine.model.model import LlamaModel
from tripath.engine.sequence import Sequence
from tripath.engine.speculative.rejection import sampling_probs


@dataclass(frozen=True)
class PagedChunk:
    """num_cached tokens of seq_id are in the cache; ``tokens`` follow; logits wanted for the last num_logits."""

    seq_id: int
    num_cached: int
    tokens: list[int]
    num_logits: int


# A continuation chunk this short runs as one-token rows of the batched decode kernel (below).
SPLIT_MAX_TOKENS = 16


def paged_forward(model: LlamaModel, kv: KVTensors, manager: KVCacheManager, chunks: list[PagedChunk]) -> list[Tensor]:
    """One forward pass over all chunks on a paged cache; returns each chunk's logits [num_logits, V] in order.

    Grows each block table to num_cached + len(tokens) (the caller truncates what is rejected). A short
    chunk after cached tokens (a draft catch-up) runs as one-token rows (tripath/engine/batch.py), in the
    batched decode kernel plain decoding uses, instead of a masked per-chunk call.
    """
    parts = []
    for ch in chunks:
        kv.copy_blocks(manager.reserve(ch.seq_id, ch.num_cached + len(ch.tokens)))
        split = ch.num_cached > 0 and len(ch.tokens) <= SPLIT_MAX_TOKENS
        parts.append(Part(ch.seq_id, ch.num_cached, ch.tokens, manager.block_table(ch.seq_id), ch.num_logits, split))
    batch = pack(parts)
    device = kv.kv.device
    attention = PagedAttention(kv, batch.chunks, model.config.kv_group_size)
    ids = torch.tensor(batch.token_ids, dtype=torch.int64, device=device).unsqueeze(0)  # [1, N]
    index = torch.tensor(batch.rows, dtype=torch.int64, device=device)
    logits = model(ids, attention.positions, attention, logits_index=index)[0]  # [R, V]
    return [logits[a:b] for a, b in batch.spans]


@dataclass(frozen=True)
class Proposal:
    tokens: Tensor  # [B, K] proposed ids, padded with 0 past num_draft
    num_draft: Tensor  # [B] tokens actually proposed per sequence (<= the K asked for)
    probs: Tensor | None  # [B, K, V] the proposal distribution q at each slot; None when every row is greedy


class Proposer(Protocol):
    def propose(self, seqs: list[Sequence], ks: list[int]) -> Proposal: ...

    def commit(self, seq: Sequence) -> None: ...

    def free(self, request_id: int) -> None: ...


def _pack(
    proposed: list[list[int]], probs: list[list[Tensor]] | None, k: int, vocab: int, device: torch.device
) -> Proposal:
    """Pad per-sequence proposals to [B, K]; probs None: all rows greedy, q is not needed (and not built)."""
    tokens = torch.tensor([t + [0] * (k - len(t)) for t in proposed], dtype=torch.int64, device=device)  # [B, K]
    q = None
    if probs is not None:
        q = torch.zeros(len(proposed), k, vocab, dtype=torch.float32, device=device)
        for i, ps in enumerate(probs):
            if ps:
                q[i, : len(ps)] = torch.stack(ps)
    num = torch.tensor([len(t) for t in proposed], dtype=torch.int64, device=device)
    return Proposal(tokens, num, q)


class DraftModelProposer:
    """A smaller model drafts autoregressively on its own paged KV cache (one batched pass per token).

    ``computed[id]`` tokens of a sequence have draft K/V; the first pass of a round feeds whatever
    the draft has not seen (the last emitted token, after a full accept also the last draft
    token, after plain rounds the whole gap), so fallback rounds cost the draft nothing.
    """

    def __init__(
        self, model: LlamaModel, num_blocks: int, block_size: int, generator: torch.Generator | None = None
    ) -> None:
        self.model = fuse_projections(model.eval())  # as Engine does for the target: c compares like with like
        param = next(model.parameters())
        self.manager = KVCacheManager(num_blocks, block_size)
        self.kv = KVTensors.allocate(model.config, num_blocks, block_size, param.dtype, param.device)
        self.generator = generator
        self.computed: dict[int, int] = {}
        self.pass_seconds: list[tuple[int, int, float]] = []  # (batch size, tokens, wall s) of every draft pass

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], ks: list[int]) -> Proposal:
        k = max(ks, default=0)
        vocab = self.model.config.vocab_size
        device = self.kv.kv.device
        proposed: list[list[int]] = [[] for _ in seqs]
        probs: list[list[Tensor]] = [[] for _ in seqs]
        for j in range(k):
            active = [i for i, ki in enumerate(ks) if ki > j]
            chunks = []
            for i in active:
                seq, done = seqs[i], self.computed.get(seqs[i].request_id, 0)
                new = seq.token_slice(done, seq.num_tokens) if j == 0 else [proposed[i][-1]]
                chunks.append(PagedChunk(seq.request_id, done, new, 1))
            start = time.perf_counter()
            logits = torch.cat(paged_forward(self.model, self.kv, self.manager, chunks))  # [A, V]
            if all(seqs[i].sampling.greedy for i in active):  # greedy verification never reads q
                q, drawn = None, logits.argmax(-1)
            else:
                q = sampling_probs(logits.unsqueeze(1), [seqs[i].sampling for i in active])[:, 0]  # [A, V]
                drawn = torch.multinomial(q, 1, generator=self.generator).squeeze(1)  # argmax rows: one-hot q
            toks = drawn.tolist()  # waits for the device: the pass time below is complete
            n_tokens = sum(len(ch.tokens) for ch in chunks)
            self.pass_seconds.append((len(active), n_tokens, time.perf_counter() - start))
            for row, (i, ch) in enumerate(zip(active, chunks, strict=True)):
                self.computed[seqs[i].request_id] = ch.num_cached + len(ch.tokens)
                proposed[i].append(int(toks[row]))
                if q is not None:
                    probs[i].append(q[row])
        return _pack(proposed, probs if any(probs) else None, k, vocab, device)

    def commit(self, seq: Sequence) -> None:
        """Keep only draft K/V of tokens the sequence still has (never the final, unfed token)."""
        done = self.computed.get(seq.request_id, 0)
        keep = min(done, seq.num_tokens - 1)
        if keep < done:
            self.manager.truncate(seq.request_id, keep)
            self.computed[seq.request_id] = keep

    def free(self, request_id: int) -> None:
        self.manager.free(request_id)
        self.computed.pop(request_id, None)


class PromptLookupProposer:
    """Prompt lookup decoding (Saxena 2023; vLLM's n-gram proposer): find the latest earlier occurrence
    of the context's last n tokens (n = max_ngram down to min_ngram) and propose what followed it.
    No model, no cache; q is one-hot at the proposed token.  n counts tokens: the defaults suit
    BPE-like tokens; with byte-level tokens n-grams of ~4-12 bytes (1-3 words) discriminate."""

    def __init__(self, vocab_size: int, min_ngram: int = 2, max_ngram: int = 4) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"min_ngram/max_ngram: need 1 <= min <= max, got {min_ngram}/{max_ngram}")
        self.vocab, self.min_ngram, self.max_ngram = vocab_size, min_ngram, max_ngram

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        arr = np.asarray(tokens, dtype=np.int64)
        for n in range(min(self.max_ngram, len(arr) - 1), self.min_ngram - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)  # [L-n, n]: every earlier n-gram
            hits = np.flatnonzero((windows == arr[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n  # continuation of the latest match
                return arr[start : start + k].tolist()
        return []

    def propose(self, seqs: list[Sequence], ks: list[int]) -> Proposal:
        k = max(ks, default=0)
        proposed = [self.lookup(s.prompt_ids + s.output_ids, ki) if ki else [] for s, ki in zip(seqs, ks, strict=True)]
        eye = torch.eye(self.vocab)
        probs = [[eye[t] for t in toks] for toks in proposed]
        return _pack(proposed, probs, k, self.vocab, torch.device("cpu"))

    def commit(self, seq: Sequence) -> None:
        pass

    def free(self, request_id: int) -> None:
        pass
