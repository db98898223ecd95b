"""Prefix caching's chained block hashes and the shared allocator policy (PrefixBlockIndex)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tripath.core.prefix import (
    ROOT,
    NoFreeBlock,
    PrefixBlockIndex,
    chain_hashes,
    max_hit_blocks,
    token_block_hashes,
)


def _blake(parent: int, key: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(parent.to_bytes(8, "little") + key, digest_size=8).digest(), "little")


# -- hashes ---------------------------------------------------------------------------------------------
def test_hashes_are_pinned_literal_values() -> None:
    # Fixed across runs, machines and Python's hash randomisation: profiles and traces may store them.
    assert chain_hashes([1, 2, 3]) == [8118103383084794603, 407906414916149308, 12841665177089666908]
    assert token_block_hashes([1, 2, 3, 4, 5], 2) == [8901564848246840783, 5144891096145841010]


def test_hash_is_blake2b_of_parent_and_key_bytes() -> None:
    first = _blake(ROOT, (7).to_bytes(8, "little", signed=True))
    second = _blake(first, (9).to_bytes(8, "little", signed=True))
    assert chain_hashes([7, 9]) == [first, second]
    tokens = [5, 6, 7]
    assert token_block_hashes(tokens, 3) == [_blake(ROOT, np.asarray(tokens, dtype="<i8").tobytes())]


def test_the_same_block_under_a_different_prefix_hashes_differently() -> None:
    a = chain_hashes([10, 42])
    b = chain_hashes([11, 42])
    assert a[1] != b[1]
    assert chain_hashes([42]) != [a[1]]
    # Same prefix, same hashes; a continued chain equals the whole chain.
    assert chain_hashes([10, 42, 5])[:2] == a
    assert chain_hashes([5], parent=a[1]) == chain_hashes([10, 42, 5])[2:]
    t1 = token_block_hashes([1, 2, 9, 9], 2)
    t2 = token_block_hashes([3, 4, 9, 9], 2)
    assert t1[0] != t2[0] and t1[1] != t2[1]


def test_token_blocks_cover_full_blocks_only_and_key_as_ints() -> None:
    assert token_block_hashes([1, 2, 3], 4) == []
    assert len(token_block_hashes(list(range(9)), 4)) == 2
    assert token_block_hashes([1, 2, 3, 4, 99], 2) == token_block_hashes([1, 2, 3, 4], 2)
    assert token_block_hashes([7, 9], 1) == chain_hashes([7, 9])  # a one-token block keys like the int
    with pytest.raises(ValueError, match="block_tokens"):
        token_block_hashes([1], 0)


def test_max_hit_blocks_always_leaves_the_last_token_to_compute() -> None:
    assert [max_hit_blocks(n, 4) for n in (0, 1, 4, 5, 8, 9, 12)] == [0, 0, 0, 1, 1, 2, 2]


# -- index: hand-computed sequences ------------------------------------------------------------------------
def _fill(index: PrefixBlockIndex, hashes: list[int]) -> list[int]:
    """A request that misses everything: allocate and register one block per hash."""
    blocks = [index.allocate() for _ in hashes]
    for block, h in zip(blocks, hashes, strict=True):
        assert index.register(block, h)
    return blocks


def test_acquire_hits_the_leading_cached_run_and_counts() -> None:
    index = PrefixBlockIndex(4)
    blocks = _fill(index, [100, 101, 102])
    assert blocks == [0, 1, 2]
    assert index.match([100, 101, 999, 102]) == 2
    assert index.stats.lookups == 0  # match has no side effect
    hits = index.acquire([100, 101, 999, 102])
    assert hits == [0, 1]
    assert index.refcount == [2, 2, 1, 0]
    assert (index.stats.lookups, index.stats.queried_blocks, index.stats.hit_blocks) == (1, 4, 2)
    assert index.stats.hit_tokens(16) == 32
    assert index.stats.block_hit_rate == 0.5
    index.check()


def test_lru_evicts_the_oldest_released_and_a_prefix_tail_first() -> None:
    index = PrefixBlockIndex(4)
    a = _fill(index, [1, 2])  # blocks 0, 1
    b = _fill(index, [3, 4])  # blocks 2, 3
    index.release(a)  # tail first: 1 then 0
    index.release(b)  # 3 then 2
    assert index.lru_order() == [1, 0, 3, 2]
    assert index.num_free == 4 and index.num_cached == 4
    # Re-using A's head takes block 0 off the LRU; its release puts it at the tail.
    assert index.acquire([1]) == [0]
    assert index.lru_order() == [1, 3, 2]
    index.release([0])
    assert index.lru_order() == [1, 3, 2, 0]
    # Allocation pressure evicts in LRU order: block 1 (hash 2), then block 3 (hash 4).
    assert index.allocate() == 1
    assert index.allocate() == 3
    assert index.evicted == [2, 4]
    assert index.stats.evictions == 2
    assert index.match([1, 2]) == 1 and index.match([3, 4]) == 1
    assert index.hash_of(1) is None and index.block_of(2) is None
    index.check()


def test_free_blocks_are_used_before_any_cached_block_is_evicted() -> None:
    seen: list[tuple[int, int]] = []
    index = PrefixBlockIndex(3, on_evict=lambda h, b: seen.append((h, b)))
    blocks = _fill(index, [7])
    index.release(blocks)
    assert index.allocate() == 1
    assert index.allocate() == 2
    assert seen == [] and index.num_cached == 1
    assert index.allocate() == 0
    assert seen == [(7, 0)] and index.evicted == [7]
    with pytest.raises(NoFreeBlock):
        index.allocate()
    index.check()


def test_unhashed_blocks_return_to_the_free_list_and_duplicates_stay_unhashed() -> None:
    index = PrefixBlockIndex(3)
    first = _fill(index, [5])
    dup = index.allocate()
    assert index.register(dup, 5) is False  # the same prefix computed twice at once: first one stays cached
    assert index.block_of(5) == first[0] and index.hash_of(dup) is None
    plain = index.allocate()
    index.release([dup, plain])
    assert index.lru_order() == []
    index.release(first)
    assert index.lru_order() == first
    assert index.num_free == 3 and index.num_cached == 1
    index.check()


def test_shared_blocks_stay_referenced_until_the_last_release() -> None:
    index = PrefixBlockIndex(2)
    blocks = _fill(index, [1, 2])
    assert index.acquire([1, 2]) == blocks
    index.incref(blocks[0])
    assert index.refcount == [3, 2]
    index.release(blocks)
    assert index.lru_order() == [] and index.num_free == 0
    index.release(blocks)
    assert index.lru_order() == [1]
    index.release([blocks[0]])
    assert index.lru_order() == [1, 0]
    index.check()


def test_misuse_is_refused() -> None:
    index = PrefixBlockIndex(2)
    with pytest.raises(ValueError, match="not referenced"):
        index.register(0, 1)
    with pytest.raises(ValueError, match="double release"):
        index.release([0])
    with pytest.raises(ValueError, match="not referenced"):
        index.incref(1)
    block = index.allocate()
    index.register(block, 9)
    with pytest.raises(ValueError, match="already cached"):
        index.register(block, 10)
    with pytest.raises(ValueError, match="num_blocks"):
        PrefixBlockIndex(0)


def test_random_operations_keep_the_invariants_and_are_deterministic() -> None:
    def run(seed: int) -> tuple[list[int], list[int], int]:
        rng = np.random.default_rng(seed)
        index = PrefixBlockIndex(16)
        held: list[list[int]] = []
        prompts = [chain_hashes(rng.integers(0, 3, size=6).tolist()) for _ in range(8)]
        for _ in range(300):
            if held and (rng.random() < 0.4 or index.num_free < 6):
                index.release(held.pop(int(rng.integers(len(held)))))
            else:
                hashes = prompts[int(rng.integers(len(prompts)))]
                blocks = index.acquire(hashes)
                for h in hashes[len(blocks):]:
                    block = index.allocate()
                    index.register(block, h)
                    blocks.append(block)
                held.append(blocks)
            index.check()
            total_refs = sum(len(b) for b in held)
            assert sum(index.refcount) == total_refs
        return index.evicted, index.lru_order(), index.stats.hit_blocks

    first = run(3)
    assert first == run(3)
    assert first[2] > 0 and first[0]  # the run exercised hits and evictions
