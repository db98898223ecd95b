"""Paged KV cache: a pool of fixed-size blocks, per-sequence block tables, reference counts.

As in vLLM (Kwon et al. 2023, PagedAttention): the K/V of token ``pos`` of a sequence lives
in physical block ``table[pos // block_size]`` at offset ``pos % block_size``.  Blocks are
reference counted so sequences may share a prefix (``fork``); a shared, partly filled last
block is copied before it is written (copy-on-write).  This file is pure bookkeeping plus
the two cache tensors; attention.py reads them through the tables.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

import torch

from tripath.engine.model.config import ModelConfig


class OutOfBlocks(RuntimeError):
    """The pool cannot serve this allocation; nothing was changed (the caller preempts or queues)."""


class BlockPool:
    """Physical blocks 0..num_blocks-1 with reference counts; a block is free exactly when its count is 0."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks: must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size: must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.refcount = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise OutOfBlocks("no free KV block")
        block = self._free.popleft()
        self.refcount[block] = 1
        return block

    def incref(self, block: int) -> None:
        if self.refcount[block] < 1:
            raise ValueError(f"block {block} is free; cannot share it")
        self.refcount[block] += 1

    def decref(self, block: int) -> None:
        if self.refcount[block] < 1:
            raise ValueError(f"block {block} is already free (double free)")
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self._free.append(block)


class TokenSource(Protocol):
    """What a manager may read of a sequence: its id, its prompt and its tokens (prompt, then generated)."""

    request_id: int
    prompt_ids: list[int]

    @property
    def num_tokens(self) -> int: ...

    def token_slice(self, start: int, end: int) -> list[int]: ...


@dataclass
class BlockTable:
    """One sequence's logical -> physical block map and how many token slots it has reserved."""

    blocks: list[int]
    num_tokens: int = 0


class KVCacheManager:
    """Block tables of live sequences over one BlockPool."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.pool = BlockPool(num_blocks, block_size)
        self.block_size = block_size
        self.tables: dict[int, BlockTable] = {}

    def check_request(self, kv_tokens: int) -> str | None:
        """Why a sequence of kv_tokens KV slots can never fit the whole pool, or None."""
        capacity = self.pool.num_blocks * self.block_size
        if kv_tokens > capacity:
            return f"needs {kv_tokens} KV slots, the pool holds {capacity}"
        return None

    def cached_prefix(self, seq: TokenSource) -> int:
        """Leading tokens of a new sequence whose K/V the pool already holds (none here: no prefix cache)."""
        return 0

    def blocks_needed(self, seq_id: int, num_tokens: int) -> int:
        """New physical blocks for seq_id to hold num_tokens tokens in all (incl. a copy-on-write)."""
        table = self.tables.get(seq_id)
        have = len(table.blocks) if table else 0
        need = -(-num_tokens // self.block_size) - have  # ceil division
        cow = 0
        if table and table.blocks and num_tokens > table.num_tokens and table.num_tokens % self.block_size:
            cow = int(self.pool.refcount[table.blocks[-1]] > 1)  # writing into a shared partial block
        return max(need, 0) + cow

    def can_reserve(self, seq_id: int, num_tokens: int) -> bool:
        return self.blocks_needed(seq_id, num_tokens) <= self.pool.num_free

    def reserve(self, seq_id: int, num_tokens: int) -> list[tuple[int, int]]:
        """Grow seq_id (created if new) to hold num_tokens tokens; all-or-nothing.

        Returns (src, dst) block copies the caller must apply to the cache tensors (copy-on-write).
        """
        if self.blocks_needed(seq_id, num_tokens) > self.pool.num_free:
            raise OutOfBlocks(
                f"sequence {seq_id}: needs {self.blocks_needed(seq_id, num_tokens)} blocks, {self.pool.num_free} free"
            )
        table = self.tables.setdefault(seq_id, BlockTable(blocks=[]))
        copies: list[tuple[int, int]] = []
        if table.blocks and num_tokens > table.num_tokens and table.num_tokens % self.block_size:
            last = table.blocks[-1]
            if self.pool.refcount[last] > 1:
                fresh = self.pool.allocate()
                self.pool.decref(last)
                table.blocks[-1] = fresh
                copies.append((last, fresh))
        while len(table.blocks) * self.block_size < num_tokens:
            table.blocks.append(self.pool.allocate())
        table.num_tokens = max(table.num_tokens, num_tokens)
        return copies

    def fork(self, parent_id: int, child_id: int) -> None:
        """child shares all of parent's blocks (prefix sharing); writes later copy the shared last block."""
        if child_id in self.tables:
            raise ValueError(f"sequence {child_id} already has a block table")
        parent = self.tables[parent_id]
        for block in parent.blocks:
            self.pool.incref(block)
        self.tables[child_id] = BlockTable(blocks=list(parent.blocks), num_tokens=parent.num_tokens)

    def truncate(self, seq_id: int, num_tokens: int) -> None:
        """Shrink seq_id to its first num_tokens tokens (e.g. rejected speculative tokens), freeing whole blocks."""
        table = self.tables[seq_id]
        if not 0 <= num_tokens <= table.num_tokens:
            raise ValueError(f"sequence {seq_id}: cannot truncate {table.num_tokens} tokens to {num_tokens}")
        keep = -(-num_tokens // self.block_size)
        for block in table.blocks[keep:]:
            self.pool.decref(block)
        del table.blocks[keep:]
        table.num_tokens = num_tokens

    @property
    def blocks_used(self) -> int:
        return self.pool.num_blocks - self.pool.num_free

    def free(self, seq_id: int) -> None:
        table = self.tables.pop(seq_id, None)
        if table is None:
            return
        for block in table.blocks:
            self.pool.decref(block)

    def block_table(self, seq_id: int) -> list[int]:
        return self.tables[seq_id].blocks


@dataclass(frozen=True)
class KVTensors:
    """The cache memory, K and V together: [layers, 2, num_blocks, block_size, kv_heads, head_dim].

    K and V of a layer sit side by side so one index_select gathers both for a decode batch.
    """

    kv: torch.Tensor

    @classmethod
    def allocate(
        cls,
        config: ModelConfig,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> KVTensors:
        shape = (config.num_layers, 2, num_blocks, block_size, config.num_kv_heads, int(config.head_dim))
        return cls(torch.zeros(shape, dtype=dtype, device=device))

    @property
    def k(self) -> torch.Tensor:
        return self.kv[:, 0]  # [layers, num_blocks, block_size, kv_heads, head_dim]

    @property
    def v(self) -> torch.Tensor:
        return self.kv[:, 1]

    @property
    def block_size(self) -> int:
        return self.kv.shape[3]

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        """Apply copy-on-write pairs (src block -> dst block) across all layers."""
        if copies:
            src = torch.tensor([s for s, _ in copies], device=self.kv.device)
            dst = torch.tensor([d for _, d in copies], device=self.kv.device)
            self.kv[:, :, dst] = self.kv[:, :, src]

    def layer_slots(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer's k, v viewed as flat token slots: [num_blocks * block_size, kv_heads, head_dim]."""
        k, v = self.kv[layer, 0], self.kv[layer, 1]
        return k.view(-1, k.shape[-2], k.shape[-1]), v.view(-1, v.shape[-2], v.shape[-1])

    def gather_blocks(self, layer: int, blocks: torch.Tensor) -> torch.Tensor:
        """blocks [S, nb] -> K and V of those blocks: [2, S, nb * block_size, kv_heads, head_dim]."""
        s, nb = blocks.shape
        picked = self.kv[layer].index_select(1, blocks.reshape(-1))  # [2, S*nb, bs, Hkv, D]
        return picked.view(2, s, nb * self.block_size, *picked.shape[-2:])
