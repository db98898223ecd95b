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

from tripath.engine.kv.compressed_attention import CompressedAttention
from tripath.engine.kv.compressed_store import CompressedKVStore
from tripath.engine.kv.paged import KVCacheManager


class VerifyAttention(CompressedAttention):
    """CompressedAttention that leaves sealing to ``rollback`` (a verify pass may still be rejected)."""

    def _seal(self) -> None:
        pass


def rollback(store: CompressedKVStore, manager: KVCacheManager, seq_id: int, num_tokens: int) -> None:
    """Keep seq_id's first num_tokens tokens in both the block tables and the store, then seal
    every block the store may quantize at that length (as the plain Engine's end of step would)."""
    table = list(manager.block_table(seq_id))
    store.truncate(table, num_tokens)
    manager.truncate(seq_id, num_tokens)
    for index, block in enumerate(table[: -(-num_tokens // store.config.block_size)]):
        if block in store.staged and store.sealable(index, num_tokens):
            store.seal(block)
