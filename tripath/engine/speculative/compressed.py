"""The speculative target's KV in a CompressedKVStore: verify passes, rollback, deferred sealing.

The plain Engine seals (quantizes) every block that is full at the end of a step.  A verify pass
writes K+1 tokens of which only the accepted prefix stays, and a sealed block cannot give back a
rejected token (its codes and scales mix all its tokens).  So the verify pass does not seal;
after verification the store is truncated to the accepted prefix (CompressedKVStore.truncate) and
only then are the blocks wholly inside it sealed.  The blocks the store holds afterwards are the
ones plain decoding would hold for the same tokens: sealed = every full block, staged = the tail.

One difference from plain decoding remains, inside a verify pass: a row past a block boundary the
same pass completed sees that block still at full precision, where plain decoding (one token per
step) would already read it quantized.  It affects at most the rows after one boundary per round,
by at most one block's quantization error; tests/engine/speculative/test_compressed.py measures the agreement.
The draft keeps its own full-precision cache (tripath/engine/speculative/proposers.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tripath.engine.kv.compressed_attention import CompressedAttention
from tripath.engine.kv.compressed_store import CompressedKVStore
from tripath.engine.kv.paged import KVCacheManager
from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.model.model import LlamaModel
from tripath.engine.speculative.proposers import SPLIT_MAX_TOKENS, PagedChunk


class VerifyAttention(CompressedAttention):
    """CompressedAttention that leaves sealing to ``rollback`` (a verify pass may still be rejected)."""

    def _seal(self) -> None:
        pass


def compressed_forward(model: LlamaModel, store: CompressedKVStore, manager: KVCacheManager,
                       chunks: list[PagedChunk]) -> list[Tensor]:
    """paged_forward (tripath/engine/speculative/proposers.py) on the compressed store: each chunk's logits
    [num_logits, V]; a short continuation (a verification of K+1 tokens) becomes one-token rows,
    which CompressedAttention attends in its batched decode (each row masked past its position)."""
    store.drop_free(manager.pool.refcount)  # staging of finished sequences' blocks
    pieces: list[tuple[int, int, list[int]]] = []  # (chunk, num_cached, tokens)
    for i, ch in enumerate(chunks):
        store.copy_blocks(manager.reserve(ch.seq_id, ch.num_cached + len(ch.tokens)))
        if ch.num_cached > 0 and len(ch.tokens) <= SPLIT_MAX_TOKENS:
            pieces += [(i, ch.num_cached + j, [t]) for j, t in enumerate(ch.tokens)]
        else:
            pieces.append((i, ch.num_cached, ch.tokens))
    token_ids: list[int] = []
    seq_chunks: list[SequenceChunk] = []
    last_row: dict[int, list[int]] = {}
    for i, cached, toks in pieces:  # a sequence's rows in position order: its blocks open before they fill
        token_ids += toks
        seq_chunks.append(SequenceChunk(cached, len(toks), manager.block_table(chunks[i].seq_id)))
        last_row.setdefault(i, []).extend(range(len(token_ids) - len(toks), len(token_ids)))
    rows: list[int] = []
    spans: list[tuple[int, int]] = []
    for i, ch in enumerate(chunks):
        want = last_row[i][-ch.num_logits :]
        spans.append((len(rows), len(rows) + len(want)))
        rows += want
    attention = VerifyAttention(store, seq_chunks, model.config.kv_group_size)
    ids = torch.tensor(token_ids, dtype=torch.int64, device=store.device).unsqueeze(0)  # [1, N]
    index = torch.tensor(rows, dtype=torch.int64, device=store.device)
    logits = model(ids, attention.positions, attention, logits_index=index)[0]  # [R, V]
    return [logits[a:b] for a, b in spans]


def rollback(store: CompressedKVStore, manager: KVCacheManager, seq_id: int, num_tokens: int) -> None:
    """Keep seq_id's first num_tokens tokens in both the block tables and the store, then seal
    every block the store may quantize at that length (as the plain Engine's end of step would)."""
    table = list(manager.block_table(seq_id))
    store.truncate(table, num_tokens)
    manager.truncate(seq_id, num_tokens)
    for index, block in enumerate(table[: -(-num_tokens // store.config.block_size)]):
        if block in store.staged and store.sealable(index, num_tokens):
            store.seal(block)
