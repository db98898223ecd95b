"""Automatic prefix caching over the paged KV pool: full prompt blocks found by chained hash are reused, not recomputed.

The pool's accounting is tripath.core.prefix.PrefixBlockIndex, the policy the simulator runs too: a full
prompt block, once its tokens are scheduled, is registered under the chained hash of its prefix; a sequence's
release leaves its cached blocks findable (LRU, refcount 0) until an allocation evicts them. On admission
the Scheduler asks ``cached_prefix`` how many leading prompt tokens are already in the pool; ``reserve``
then takes those blocks by reference and the sequence prefills only the rest, attending over them.

Blocks are registered when reserved, as vLLM does: their K/V are written in that step's forward before any
attention reads them, so a request admitted in the same step may already share them. Only prompt blocks are
cached, as in the simulator (which knows no generated token ids): the partial last prompt block and the blocks
generated tokens fill stay the sequence's own and go back to the free list on release, so on the same
requests the engine and the simulator keep the same cached blocks and evict the same ones. Only sequences the
Scheduler looked up (``cached_prefix``) register blocks. The speculative engine rolls back only its rejected
drafts, which lie after the prompt, so ``truncate`` never reaches a registered block (it refuses to).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tripath.core.prefix import ROOT, NoFreeBlock, PrefixBlockIndex, PrefixStats, max_hit_blocks, token_block_hashes
from tripath.engine.kv.paged import BlockTable, KVCacheManager, OutOfBlocks, TokenSource

__all__ = ["PrefixCachingKVManager", "PrefixPool"]


class PrefixPool:
    """BlockPool's interface (tripath/engine/kv/paged.py) over a PrefixBlockIndex: a block is free when
    unreferenced, whether it holds nothing or an evictable cached prefix."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"block_size: must be >= 1, got {block_size}")
        self.index = PrefixBlockIndex(num_blocks)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.refcount = self.index.refcount

    @property
    def num_free(self) -> int:
        return self.index.num_free

    def allocate(self) -> int:
        try:
            return self.index.allocate()
        except NoFreeBlock as err:
            raise OutOfBlocks(str(err)) from None

    def incref(self, block: int) -> None:
        self.index.incref(block)

    def decref(self, block: int) -> None:
        self.index.release([block])


@dataclass
class _Lookup:
    """A looked-up sequence: its token source, its full prompt blocks and their chained hashes computed so far."""

    source: TokenSource
    prompt_blocks: int
    hashes: list[int] = field(default_factory=list)
    registered: int = 0  # leading blocks of its table already offered to the index


class PrefixCachingKVManager(KVCacheManager):
    """KVCacheManager whose pool is a PrefixBlockIndex; per request, ``cached_tokens`` says how many prompt
    tokens its last admission took from the cache (its prefill saved that many tokens)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self.pool: PrefixPool = PrefixPool(num_blocks, block_size)  # type: ignore[assignment]
        self.index = self.pool.index
        self.cached_tokens: dict[int, int] = {}
        self._lookups: dict[int, _Lookup] = {}

    @property
    def prefix_stats(self) -> PrefixStats:
        return self.index.stats

    @property
    def hit_tokens(self) -> int:
        """Prompt tokens taken from the cache instead of prefilled, over all admissions."""
        return self.index.stats.hit_tokens(self.block_size)

    def _hashes(self, look: _Lookup, blocks: int) -> list[int]:
        """The chained hashes of the first ``blocks`` full blocks of the sequence (extended as it grows)."""
        have = len(look.hashes)
        if blocks > have:
            bs = self.block_size
            tokens = look.source.token_slice(have * bs, blocks * bs)
            look.hashes += token_block_hashes(tokens, bs, look.hashes[-1] if have else ROOT)
        return look.hashes[:blocks]

    def _lookup_hashes(self, seq_id: int) -> list[int]:
        look = self._lookups[seq_id]
        return self._hashes(look, min(max_hit_blocks(look.source.num_tokens, self.block_size), look.prompt_blocks))

    def cached_prefix(self, seq: TokenSource) -> int:
        """Leading tokens of a sequence without a block table that are cached (whole blocks; at least its last
        token is left to compute). No refcount or LRU change: ``reserve`` takes the blocks."""
        if seq.request_id in self.tables:
            return 0
        self._lookups[seq.request_id] = _Lookup(seq, len(seq.prompt_ids) // self.block_size)
        return self.index.match(self._lookup_hashes(seq.request_id)) * self.block_size

    def _hit_blocks(self, seq_id: int) -> list[int]:
        hashes = self._lookup_hashes(seq_id)
        return [b for b in (self.index.block_of(h) for h in hashes[: self.index.match(hashes)]) if b is not None]

    def blocks_needed(self, seq_id: int, num_tokens: int) -> int:
        if seq_id in self.tables or seq_id not in self._lookups:
            return super().blocks_needed(seq_id, num_tokens)
        hits = self._hit_blocks(seq_id)
        # a hit block now on the LRU stops being allocatable once taken: count it as needed
        idle_hits = sum(self.pool.refcount[b] == 0 for b in hits)
        return max(-(-num_tokens // self.block_size) - len(hits), 0) + idle_hits

    def reserve(self, seq_id: int, num_tokens: int) -> list[tuple[int, int]]:
        look = self._lookups.get(seq_id)
        if look is not None and seq_id not in self.tables:
            needed = self.blocks_needed(seq_id, num_tokens)
            if needed > self.pool.num_free:
                raise OutOfBlocks(f"sequence {seq_id}: needs {needed} blocks, {self.pool.num_free} free")
            hits = self.index.acquire(self._lookup_hashes(seq_id))
            self.tables[seq_id] = BlockTable(blocks=hits, num_tokens=len(hits) * self.block_size)
            self.cached_tokens[seq_id] = len(hits) * self.block_size
            look.registered = len(hits)
            self._acquired(seq_id, list(hits))
        copies = super().reserve(seq_id, num_tokens)
        if look is not None:
            self._register(seq_id, look, num_tokens)
        return copies

    def _register(self, seq_id: int, look: _Lookup, num_tokens: int) -> None:
        """Offer the prompt blocks that ``num_tokens`` scheduled tokens fill to the index."""
        full = min(num_tokens // self.block_size, look.prompt_blocks)
        if full <= look.registered:
            return
        blocks = self.tables[seq_id].blocks
        for i, h in enumerate(self._hashes(look, full)[look.registered :], start=look.registered):
            if self.index.hash_of(blocks[i]) is None and self.index.register(blocks[i], h):
                self._registered(seq_id, i, blocks[i])
        look.registered = full

    def _acquired(self, seq_id: int, blocks: list[int]) -> None:
        """A new sequence took these cached blocks as its leading ones (a back end that stores K/V per
        sequence maps them in: tripath/engine/tiered/store.py); nothing to do over one shared pool."""

    def _registered(self, seq_id: int, position: int, block: int) -> None:
        """The sequence's block at this position became cached (see _acquired)."""

    def truncate(self, seq_id: int, num_tokens: int) -> None:
        """Roll back to ``num_tokens`` (the speculative engine's rejected drafts); never into a block the index
        holds (registered prompt blocks are shared: other sequences may be reading them)."""
        look = self._lookups.get(seq_id)
        if look is not None and num_tokens < look.registered * self.block_size:
            raise ValueError(f"sequence {seq_id}: cannot roll back to {num_tokens} tokens, into its "
                             f"{look.registered} cached prompt block(s)")
        super().truncate(seq_id, num_tokens)

    def free(self, seq_id: int) -> None:
        self._lookups.pop(seq_id, None)
        table = self.tables.pop(seq_id, None)
        if table is not None:
            self.index.release(table.blocks)
