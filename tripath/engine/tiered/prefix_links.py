"""Which live sequences hold which prefix blocks of the tiered cache by reference, and which blocks are broken.

A prefix block's pages are keyed ``(shared_owner(block), layer, chunk)`` in tripath/engine/tiered/cache.py
(TieredKVCache, which moves the pages); this is the bookkeeping beside them: per sequence, the chunk indices it
reads from a prefix block; per block, its chunk index and its readers; the blocks whose pages cannot be trusted;
and, for the hit counters, the hit pages each sequence has not asked for yet.
"""

from __future__ import annotations

PageKey = tuple[int, int, int]  # (owner, layer, chunk index); owner: a sequence id, or shared_owner(block)
TIERS = ("device", "host", "ssd")


def shared_owner(block: int) -> int:
    """The page-key owner of prefix block ``block``'s pages: negative, so it never equals a sequence id (its
    own inverse: shared_owner(owner) is the block of a negative owner)."""
    return -1 - block


class PrefixLinks:
    """Sequences' references to prefix blocks, the blocks' chunk indices, broken blocks, and hit-load counts."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.links: dict[int, dict[int, int]] = {}  # seq -> {chunk index: prefix block it holds by reference}
        self.block_refs: dict[int, set[int]] = {}  # prefix block -> the live sequences linking it
        self.block_chunk: dict[int, int] = {}  # prefix block -> its chunk index (its position in any prompt)
        self.broken: set[int] = set()  # prefix blocks whose pages cannot be trusted (a fault, a failed writer)
        self.hit_loads = dict.fromkeys(TIERS, 0)  # hit pages by the tier each sat in when its reader needed it
        self._unseen: dict[int, set[PageKey]] = {}  # seq -> hit pages it has not asked for yet

    def key(self, seq: int, layer: int, chunk: int) -> PageKey:
        """The key of seq's page of this chunk: the prefix block's when seq holds that chunk by reference."""
        links = self.links.get(seq)
        block = links.get(chunk) if links else None
        return (seq, layer, chunk) if block is None else (shared_owner(block), layer, chunk)

    def readers(self, owner: int) -> set[int]:
        """The live sequences linking the block whose pages have this (negative) owner."""
        return self.block_refs.get(shared_owner(owner), set())

    def attach(self, seq: int, blocks: list[int]) -> None:
        """seq, a new sequence, takes these blocks by reference as its leading chunks (a hit)."""
        if seq in self.links:
            raise ValueError(f"sequence {seq}: already has pages; a hit attaches only to a new sequence")
        for chunk, block in enumerate(blocks):
            if self.block_chunk.get(block) != chunk:
                raise ValueError(f"prefix block {block}: cached at chunk {self.block_chunk.get(block)}, "
                                 f"not {chunk}")
        self.links[seq] = dict(enumerate(blocks))
        for block in blocks:
            self.block_refs[block].add(seq)
        self._unseen[seq] = {(shared_owner(b), layer, c) for c, b in enumerate(blocks)
                             for layer in range(self.num_layers)}

    def share(self, seq: int, chunk: int, block: int) -> None:
        """seq's chunk became prefix block ``block`` (seq its first reader)."""
        if block in self.block_chunk:
            raise ValueError(f"prefix block {block}: already holds pages")
        self.links.setdefault(seq, {})[chunk] = block
        self.block_refs[block] = {seq}
        self.block_chunk[block] = chunk

    def unlink(self, seq: int) -> list[tuple[int, int]]:
        """seq no longer reads its prefix blocks; returns the (chunk, block) pairs it linked."""
        self._unseen.pop(seq, None)
        pairs = list(self.links.pop(seq, {}).items())
        for _, block in pairs:
            self.block_refs[block].discard(seq)
        return pairs

    def evict(self, block: int) -> int | None:
        """Forget an evicted block (no reader may link it); returns its chunk index, None if it held no pages."""
        chunk = self.block_chunk.pop(block, None)
        if chunk is None:
            return None
        assert not self.block_refs.pop(block), f"prefix block {block}: evicted while a sequence links it"
        self.broken.discard(block)
        return chunk

    def first_read(self, seq: int, key: PageKey) -> bool:
        """Whether this is seq's first request for a hit page (each is counted once, in hit_loads)."""
        unseen = self._unseen.get(seq)
        if unseen is None or key not in unseen:
            return False
        unseen.discard(key)
        return True
