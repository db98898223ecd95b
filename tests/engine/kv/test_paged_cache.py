"""Block pool and tables: refcounts stay consistent under any admit/extend/fork/finish/preempt sequence."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tripath.engine.kv.paged import BlockPool, KVCacheManager, OutOfBlocks

NUM_BLOCKS, BLOCK = 12, 4

ops = st.lists(
    st.tuples(
        st.sampled_from(["admit", "extend", "fork", "truncate", "finish", "preempt"]),
        st.integers(0, 7),  # which sequence (modulo the live ones)
        st.integers(1, 20),  # tokens
    ),
    max_size=60,
)


def check_invariants(manager: KVCacheManager, shared_ok: bool) -> None:
    pool = manager.pool
    refs = Counter(b for t in manager.tables.values() for b in t.blocks)
    for block in range(pool.num_blocks):
        assert pool.refcount[block] == refs.get(block, 0), f"block {block} refcount"
    free = set(pool._free)
    assert len(free) == pool.num_free  # no block twice in the free list
    assert free == {b for b in range(pool.num_blocks) if pool.refcount[b] == 0}  # nothing leaked
    for table in manager.tables.values():
        assert len(table.blocks) == -(-table.num_tokens // BLOCK)
        assert len(set(table.blocks)) == len(table.blocks)
    if not shared_ok:  # without fork, no block is in two live tables
        assert all(count == 1 for count in refs.values())


@settings(max_examples=150, deadline=None)
@given(ops, st.booleans())
def test_random_operations_keep_refcounts_consistent(operations, allow_fork):
    manager = KVCacheManager(NUM_BLOCKS, BLOCK)
    next_id = 0
    for op, pick, tokens in operations:
        live = sorted(manager.tables)
        if op == "admit":
            if manager.can_reserve(next_id, tokens):
                manager.reserve(next_id, tokens)
            else:
                before = list(manager.pool.refcount)
                with pytest.raises(OutOfBlocks):
                    manager.reserve(next_id, tokens)
                assert manager.pool.refcount == before  # all-or-nothing
                assert next_id not in manager.tables
            next_id += 1
        elif not live:
            continue
        elif op == "extend":
            sid = live[pick % len(live)]
            want = manager.tables[sid].num_tokens + tokens
            free_before = manager.pool.num_free
            if manager.can_reserve(sid, want):
                copies = manager.reserve(sid, want)
                for src, dst in copies:  # copy-on-write leaves the source with its other owners
                    assert manager.pool.refcount[src] >= 1 and manager.pool.refcount[dst] == 1
            else:
                with pytest.raises(OutOfBlocks):
                    manager.reserve(sid, want)
                assert manager.pool.num_free == free_before
        elif op == "truncate":  # speculative rollback: keep a prefix
            sid = live[pick % len(live)]
            keep = manager.tables[sid].num_tokens * tokens // 20
            manager.truncate(sid, keep)
            assert manager.tables[sid].num_tokens == keep
        elif op == "fork" and allow_fork:
            manager.fork(live[pick % len(live)], next_id)
            next_id += 1
        elif op in ("finish", "preempt"):  # both free every block (preempt = recompute later)
            manager.free(live[pick % len(live)])
        check_invariants(manager, shared_ok=allow_fork)
    for sid in list(manager.tables):
        manager.free(sid)
    assert manager.pool.num_free == NUM_BLOCKS


def test_copy_on_write_of_shared_partial_block():
    manager = KVCacheManager(8, BLOCK)
    manager.reserve(0, 6)  # blocks [a, b], b half full
    manager.fork(0, 1)
    a, b = manager.block_table(0)
    assert manager.pool.refcount[a] == manager.pool.refcount[b] == 2
    assert manager.blocks_needed(1, 7) == 1  # writing token 7 into the shared b needs a private copy
    copies = manager.reserve(1, 7)
    assert copies == [(b, manager.block_table(1)[1])]
    assert manager.block_table(1)[0] == a and manager.pool.refcount[a] == 2
    assert manager.pool.refcount[b] == 1


def test_pool_rejects_double_free_and_sharing_a_free_block():
    pool = BlockPool(2, BLOCK)
    block = pool.allocate()
    pool.decref(block)
    with pytest.raises(ValueError, match="double free"):
        pool.decref(block)
    with pytest.raises(ValueError, match="free"):
        pool.incref(block)
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(0, BLOCK)
