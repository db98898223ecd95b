"""The compressed KV back end: the paged pool's block tables over a CompressedKVStore (tripath/engine/kv/
compressed_store.py), attended by CompressedAttention, which dequantizes a chunk of blocks at a time."""

from __future__ import annotations

import math
from typing import Any

import torch

from tripath.engine.engine_config import EngineConfig
from tripath.engine.kv.compressed_attention import CompressedAttention
from tripath.engine.kv.compressed_store import CompressedKVStore, StoreConfig
from tripath.engine.kv.paged import KVCacheManager
from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.model.config import ModelConfig


class CompressedBackend:
    """config.num_blocks blocks kept as config.kv_compression asks (codes + scales, or staged full precision)."""

    def __init__(self, model_config: ModelConfig, config: EngineConfig, dtype: torch.dtype,
                 device: torch.device) -> None:
        if config.kv_compression is None:
            raise ValueError("EngineConfig.kv_compression: the compressed back end needs a mode")
        self.manager = KVCacheManager(config.num_blocks, config.block_size)
        # values grouped per token over channels: a head narrower than 32 channels is one group
        store = StoreConfig(config.kv_compression, config.block_size, math.gcd(32, int(model_config.head_dim)))
        self.store = CompressedKVStore(model_config, config.num_blocks, store, dtype, device)
        self.group = model_config.kv_group_size

    def drop_freed(self) -> None:
        """Drop the staging of blocks no live sequence holds any more (finished or preempted ones)."""
        self.store.drop_free(self.manager.pool.refcount)

    def prepare(self, copies: list[tuple[int, int]]) -> None:
        self.drop_freed()
        self.store.copy_blocks(copies)

    def attention(self, chunks: list[SequenceChunk], request_ids: list[int]) -> CompressedAttention:
        return CompressedAttention(self.store, chunks, self.group)

    def faults(self, attention: CompressedAttention) -> dict[int, str]:
        return {}

    def step_fields(self) -> dict[str, Any]:
        return {}

    def kv_bytes(self) -> int:
        return self.store.resident_bytes()["kv"]

    def close(self) -> None:
        pass
