"""One forward pass's packed batch: every sequence's new tokens in one row, and which rows give logits.

Shared by the serving loop (tripath/engine/engine.py, which gathers a step's parts in a ``StepBatch``) and the
draft model's passes (tripath/engine/speculative/proposers.py). A part that is ``split`` (a verification of
K+1 tokens, a draft catch-up) becomes one-token rows at consecutive positions of the same block table: the attention
writes every new K/V before attending and masks keys past each row's position, so row i sees exactly
tokens 0..num_cached+i (causal), and the rows share the one batched decode call with the plain decodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.scheduler import ScheduledChunk


class Part(NamedTuple):
    """num_cached tokens of request_id are in the cache; ``tokens`` follow; logits wanted for the last num_logits."""

    request_id: int
    num_cached: int
    tokens: list[int]
    block_table: list[int]
    num_logits: int  # 0: none (a prefill chunk that does not reach the end of its tokens)
    split: bool = False  # as one-token rows


@dataclass(frozen=True)
class Packed:
    token_ids: list[int]  # the forward's [N] token row
    chunks: list[SequenceChunk]  # one-token chunks first, as the attention back ends batch them
    request_ids: list[int]  # per chunk
    rows: list[int]  # logits_index: the wanted rows, part by part
    spans: list[tuple[int, int]]  # per part: its logits' range in rows (empty when it wants none)


def pack(parts: list[Part]) -> Packed:
    pieces: list[tuple[int, int, list[int]]] = []  # (part, num_cached, tokens)
    for i, p in enumerate(parts):
        if p.split:
            pieces += [(i, p.num_cached + j, [t]) for j, t in enumerate(p.tokens)]
        else:
            pieces.append((i, p.num_cached, p.tokens))
    pieces.sort(key=lambda piece: len(piece[2]) != 1)  # stable: a part's rows stay in position order
    token_ids: list[int] = []
    chunks: list[SequenceChunk] = []
    request_ids: list[int] = []
    ends: list[list[int]] = [[] for _ in parts]  # packed index after each piece of each part
    for i, cached, toks in pieces:
        token_ids += toks
        ends[i].append(len(token_ids))
        chunks.append(SequenceChunk(cached, len(toks), parts[i].block_table))
        request_ids.append(parts[i].request_id)
    rows: list[int] = []
    spans: list[tuple[int, int]] = []
    for i, p in enumerate(parts):
        n = p.num_logits
        if n:  # a split part's pieces are one token each; an unsplit part is one piece
            rows += [e - 1 for e in ends[i][-n:]] if p.split else range(ends[i][0] - n, ends[i][0])
        spans.append((len(rows) - n, len(rows)))
    return Packed(token_ids, chunks, request_ids, rows, spans)


@dataclass
class StepBatch:
    """One engine step's parts, one per scheduled chunk, and the phase mix its StepRecord reports."""

    chunks: list[ScheduledChunk]
    parts: list[Part] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)  # request ids scheduled for the first time
    shapes: list[tuple[int, int]] = field(default_factory=list)  # (cached, new) per part: StepRecord.chunk_shapes
    prefill_seqs: int = 0
    prefill_tokens: int = 0
    decode_seqs: int = 0
    total_context: int = 0  # tokens attended to: cached + new, over the parts

    def add(self, part: Part, prefill: bool, num_new: int) -> None:
        """The next chunk's part; ``num_new`` of its tokens are the chunk's own (the rest are drafts)."""
        self.parts.append(part)
        if prefill:
            self.prefill_seqs += 1
            self.prefill_tokens += num_new
        else:
            self.decode_seqs += 1
        self.shapes.append((part.num_cached, len(part.tokens)))
        self.total_context += part.num_cached + len(part.tokens)

    @cached_property
    def packed(self) -> Packed:
        """The parts as one forward (built once, after the last ``add``)."""
        return pack(self.parts)

    @cached_property
    def sampled(self) -> list[int]:
        """Indices of the parts that give logits, in order."""
        return [i for i, p in enumerate(self.parts) if p.num_logits]

    def fields(self) -> dict[str, Any]:
        """The StepRecord fields this batch decides."""
        return dict(batch_size=len(self.chunks), num_tokens=len(self.packed.token_ids),
                    prefill_seqs=self.prefill_seqs, prefill_tokens=self.prefill_tokens,
                    decode_seqs=self.decode_seqs, total_context=self.total_context,
                    admitted=tuple(self.admitted), chunk_shapes=tuple(self.shapes))
