"""One engine iteration for a chosen batch shape, without the scheduler: the unit a sweep times.

The probe owns an ``Engine`` (so the model is transformed exactly as serving transforms it, and
the KV pool is the engine's) and replays what ``Engine.step`` does for one forward: build the
step's attention (the paged back end's ``PagedAttention``) over the block tables, run the model over the packed new
tokens with logits only for each sequence's last token, and pick the next tokens. Cached context
is whatever the pool holds: attention cost does not depend on the values, only on the shapes.
Each sequence gets its own contiguous run of blocks, as a fresh pool would give it.
"""

from __future__ import annotations

import torch

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.model.model import LlamaModel


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def split_context(total_context: int, batch: int) -> list[int]:
    """Tokens attended by each of ``batch`` decoding sequences, summing to ``total_context``, as even as possible."""
    if batch < 1 or total_context < batch:
        raise ValueError(f"need total_context >= batch >= 1, got total_context={total_context}, batch={batch}")
    base, extra = divmod(total_context, batch)
    return [base + 1 if i < extra else base for i in range(batch)]


class StepProbe:
    """Times-ready forwards: ``prefill(new, cached)`` and ``decode(batch, total_context)``."""

    def __init__(self, model: LlamaModel, max_tokens: int, block_size: int = 16, max_sequences: int = 256) -> None:
        """``max_tokens``: the most KV slots any probed step needs (sum over its sequences);
        ``max_sequences``: the most sequences in one probed step."""
        # each sequence rounds its own length up to whole blocks: at most one spare block per sequence
        num_blocks = _ceil_div(max_tokens, block_size) + max_sequences
        config = EngineConfig(max_batch_size=max(1, max_tokens), max_batched_tokens=max(1, max_tokens),
                              block_size=block_size, num_blocks=num_blocks)
        self.engine = Engine(model, config)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.vocab = model.config.vocab_size

    def _tables(self, totals: list[int]) -> list[list[int]]:
        tables, nxt = [], 0
        for total in totals:
            n = _ceil_div(total, self.block_size)
            tables.append(list(range(nxt, nxt + n)))
            nxt += n
        if nxt > self.num_blocks:
            raise ValueError(f"step needs {nxt} KV blocks, the probe's pool has {self.num_blocks}")
        return tables

    def chunks_prefill(self, new_tokens: int, context_tokens: int) -> list[SequenceChunk]:
        """One sequence: ``new_tokens`` appended after ``context_tokens`` cached."""
        if new_tokens < 1 or context_tokens < 0:
            raise ValueError(f"need new_tokens >= 1 and context_tokens >= 0, got {new_tokens}, {context_tokens}")
        (table,) = self._tables([new_tokens + context_tokens])
        return [SequenceChunk(context_tokens, new_tokens, table)]

    def chunks_decode(self, batch: int, total_context: int) -> list[SequenceChunk]:
        """``batch`` sequences adding one token each; cached + 1 summed over them is ``total_context``."""
        totals = split_context(total_context, batch)
        return [SequenceChunk(total - 1, 1, table) for total, table in zip(totals, self._tables(totals), strict=True)]

    def chunks_of(self, shapes: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> list[SequenceChunk]:
        """A served step's shape, (cached, new) per sequence with the one-token chunks first (as
        StepRecord.chunk_shapes gives it), on fresh contiguous block tables."""
        tables = self._tables([cached + new for cached, new in shapes])
        return [SequenceChunk(cached, new, table) for (cached, new), table in zip(shapes, tables, strict=True)]

    @torch.inference_mode()
    def run(self, chunks: list[SequenceChunk]) -> list[int]:
        """One forward as Engine.step runs it; returns the greedy next tokens (forces the device to finish)."""
        engine = self.engine
        attention = engine.backend.attention(chunks, list(range(len(chunks))))
        n = sum(c.num_new for c in chunks)
        # token ids do not change the cost; a fixed pattern keeps runs identical
        ids = (torch.arange(n, dtype=torch.int64) % self.vocab).to(engine.device, non_blocking=True).unsqueeze(0)
        last = torch.cumsum(torch.tensor([c.num_new for c in chunks], dtype=torch.int64), 0) - 1
        rows = last.to(engine.device, non_blocking=True)
        logits = engine.model(ids, attention.positions, attention, logits_index=rows)[0]  # [S, V]
        return logits.argmax(-1).tolist()
