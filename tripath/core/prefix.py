"""Prefix caching's block identity and allocator policy, shared by the engine and the simulator.

A prompt is cut into full blocks of ``block_tokens`` tokens; block i's identity is a chained hash over
the parent block's hash and block i's own key, so it covers the whole prefix up to and including block i
(as vLLM's automatic prefix caching does). The engine keys a block by its token ids, the simulator by a
trace's per-block ids (Mooncake ``hash_ids``) or a generator's block ids: both go through the same chain.

``PrefixBlockIndex`` is the allocator-side policy over ``num_blocks`` physical blocks: hash -> block,
per-block reference counts, a free list of blocks holding nothing cached, and an LRU of cached blocks no
request references. A new block comes from the free list, else by evicting the least recently released
cached block. Engine and simulator drive the same class, so on the same requests they hit the same blocks.
Deterministic: insertion-ordered containers only, the LRU ordered by an integer release clock.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ROOT",
    "NoFreeBlock",
    "PrefixBlockIndex",
    "PrefixStats",
    "chain_hashes",
    "key_bytes",
    "max_hit_blocks",
    "token_block_hashes",
]

ROOT = 0
"""The parent hash of a prompt's first block."""


class NoFreeBlock(RuntimeError):
    """Every block is referenced by a request: nothing is free and nothing cached can be evicted."""


def key_bytes(key: int | bytes) -> bytes:
    """A block key as bytes: an int as 8 little-endian signed bytes, bytes as they are."""
    if isinstance(key, bytes | bytearray):
        return bytes(key)
    return int(key).to_bytes(8, "little", signed=True)


def chain_hashes(block_keys: Iterable[int | bytes], parent: int = ROOT) -> list[int]:
    """One 64-bit hash per block: blake2b (8-byte digest) over the parent's hash and the block's key bytes.

    ``parent`` continues a chain (the hash of the block before the first key); ROOT starts one.
    """
    out: list[int] = []
    for key in block_keys:
        digest = hashlib.blake2b(parent.to_bytes(8, "little") + key_bytes(key), digest_size=8).digest()
        parent = int.from_bytes(digest, "little")
        out.append(parent)
    return out


def token_block_hashes(tokens: Sequence[int], block_tokens: int, parent: int = ROOT) -> list[int]:
    """Chained hashes of the full blocks of ``tokens`` (a partial last block gets none).

    A block's key is its token ids as little-endian int64s, so a one-token block keys like the int itself.
    """
    if block_tokens < 1:
        raise ValueError(f"block_tokens: must be >= 1, got {block_tokens}")
    full = len(tokens) // block_tokens
    ids = np.asarray(tokens[: full * block_tokens], dtype="<i8").reshape(full, block_tokens)
    return chain_hashes((row.tobytes() for row in ids), parent)


def max_hit_blocks(prompt_tokens: int, block_tokens: int) -> int:
    """The most leading blocks a prompt may take from the cache: at least its last token is always computed
    (its logits give the first output token), so a prompt of exactly k full blocks can hit k - 1."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens: must be >= 1, got {block_tokens}")
    return max(prompt_tokens - 1, 0) // block_tokens


@dataclass
class PrefixStats:
    """Counters of a PrefixBlockIndex since it was made."""

    lookups: int = 0
    """acquire calls."""
    queried_blocks: int = 0
    """Blocks asked for by acquire."""
    hit_blocks: int = 0
    """Of those, blocks found cached (the leading run)."""
    evictions: int = 0
    """Cached blocks evicted to serve an allocation."""
    registered: int = 0
    """Blocks that became cached."""

    def hit_tokens(self, block_tokens: int) -> int:
        return self.hit_blocks * block_tokens

    @property
    def block_hit_rate(self) -> float:
        return self.hit_blocks / self.queried_blocks if self.queried_blocks else 0.0


class PrefixBlockIndex:
    """Blocks 0..num_blocks-1: each is referenced (refcount > 0), cached and unreferenced (in the LRU, still
    findable by hash), or free (no hash). ``on_evict(hash, block)`` is called for each evicted block, and
    ``evicted`` lists the evicted hashes in order (the tiered path moves such blocks to host and SSD)."""

    def __init__(self, num_blocks: int, on_evict: Callable[[int, int], None] | None = None) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks: must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.refcount = [0] * num_blocks
        self.on_evict = on_evict
        self.evicted: list[int] = []
        self.stats = PrefixStats()
        self._free: deque[int] = deque(range(num_blocks))
        self._block_of: dict[int, int] = {}
        self._hash_of: list[int | None] = [None] * num_blocks
        self._lru: OrderedDict[int, int] = OrderedDict()  # block -> release clock, oldest first
        self._clock = 0

    # -- queries without side effects --------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks allocate() can hand out: free ones plus evictable cached ones."""
        return len(self._free) + len(self._lru)

    @property
    def num_cached(self) -> int:
        """Blocks findable by hash (referenced or in the LRU)."""
        return len(self._block_of)

    @property
    def num_evictable(self) -> int:
        return len(self._lru)

    def lru_order(self) -> list[int]:
        """Unreferenced cached blocks, the next to be evicted first."""
        return list(self._lru)

    def block_of(self, block_hash: int) -> int | None:
        return self._block_of.get(block_hash)

    def hash_of(self, block: int) -> int | None:
        return self._hash_of[block]

    def match(self, hashes: Sequence[int]) -> int:
        """How many leading hashes are cached (no refcount, LRU or counter changes)."""
        n = 0
        for h in hashes:
            if h not in self._block_of:
                break
            n += 1
        return n

    # -- operations ---------------------------------------------------------------------------------
    def acquire(self, hashes: Sequence[int]) -> list[int]:
        """Reference the leading cached blocks of ``hashes`` (taking them off the LRU); returns those blocks."""
        hits = [self._block_of[h] for h in hashes[: self.match(hashes)]]
        for block in hits:
            if self.refcount[block] == 0:
                del self._lru[block]
            self.refcount[block] += 1
        self.stats.lookups += 1
        self.stats.queried_blocks += len(hashes)
        self.stats.hit_blocks += len(hits)
        return hits

    def allocate(self) -> int:
        """A block with refcount 1 and no hash: a free one, else the LRU's oldest cached block, evicted."""
        if self._free:
            block = self._free.popleft()
        elif self._lru:
            block, _ = self._lru.popitem(last=False)
            evicted_hash = self._hash_of[block]
            assert evicted_hash is not None
            del self._block_of[evicted_hash]
            self._hash_of[block] = None
            self.stats.evictions += 1
            self.evicted.append(evicted_hash)
            if self.on_evict is not None:
                self.on_evict(evicted_hash, block)
        else:
            raise NoFreeBlock(f"all {self.num_blocks} blocks are referenced")
        self.refcount[block] = 1
        return block

    def can_allocate(self, n: int) -> bool:
        return n <= self.num_free

    def incref(self, block: int) -> None:
        """One more reference to a referenced block (a fork shares it)."""
        if self.refcount[block] < 1:
            raise ValueError(f"block {block} is not referenced; acquire it by hash instead")
        self.refcount[block] += 1

    def register(self, block: int, block_hash: int) -> bool:
        """Make a referenced, newly filled full block findable by ``block_hash``.

        Returns False (and caches nothing) when another block already holds that hash, as when two
        requests compute the same prefix at once: the first stays cached, this one is freed on release.
        """
        if self.refcount[block] < 1:
            raise ValueError(f"block {block} is not referenced; only a block a request holds can be registered")
        if self._hash_of[block] is not None:
            raise ValueError(f"block {block} is already cached")
        if block_hash in self._block_of:
            return False
        self._block_of[block_hash] = block
        self._hash_of[block] = block_hash
        self.stats.registered += 1
        return True

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block of a sequence (given in prefix order).

        A block reaching 0 goes to the LRU tail if cached, else to the free list. The blocks are taken last
        first, so a released prefix's tail is evicted before its head (a chain is only usable from its head).
        """
        for block in reversed(blocks):
            if self.refcount[block] < 1:
                raise ValueError(f"block {block} is not referenced (double release)")
            self.refcount[block] -= 1
            if self.refcount[block] == 0:
                if self._hash_of[block] is None:
                    self._free.append(block)
                else:
                    self._clock += 1
                    self._lru[block] = self._clock

    def check(self) -> None:
        """Raise AssertionError unless every block is in exactly one state and the maps agree."""
        free, lru = set(self._free), set(self._lru)
        assert len(free) == len(self._free) and not (free & lru)
        for block in range(self.num_blocks):
            referenced = self.refcount[block] > 0
            assert self.refcount[block] >= 0
            assert referenced + (block in free) + (block in lru) == 1, block
            if block in free:
                assert self._hash_of[block] is None, block
            if block in lru:
                assert self._hash_of[block] is not None, block
        for h, block in self._block_of.items():
            assert self._hash_of[block] == h
        assert sum(h is not None for h in self._hash_of) == len(self._block_of)
        clocks = list(self._lru.values())
        assert clocks == sorted(clocks)
