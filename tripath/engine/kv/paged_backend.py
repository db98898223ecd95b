"""The plain KV back end: one full-precision paged pool (tripath/engine/kv/paged.py) and PagedAttention over it."""

from __future__ import annotations

from typing import Any

import torch

from tripath.engine.engine_config import EngineConfig
from tripath.engine.kv.paged import KVCacheManager, KVTensors
from tripath.engine.kv.paged_attention import PagedAttention, SequenceChunk
from tripath.engine.kv.prefix_cache import PrefixCachingKVManager
from tripath.engine.model.config import ModelConfig


class PagedBackend:
    """config.num_blocks blocks of config.block_size tokens, K and V in one tensor (KVTensors); with
    config.prefix_caching the blocks are accounted by PrefixCachingKVManager (cached prefixes are reused)."""

    def __init__(self, model_config: ModelConfig, config: EngineConfig, dtype: torch.dtype,
                 device: torch.device) -> None:
        manager = PrefixCachingKVManager if config.prefix_caching else KVCacheManager
        self.manager = manager(config.num_blocks, config.block_size)
        self.kv = KVTensors.allocate(model_config, config.num_blocks, config.block_size, dtype, device)
        self.group = model_config.kv_group_size

    def prepare(self, copies: list[tuple[int, int]]) -> None:
        self.kv.copy_blocks(copies)

    def attention(self, chunks: list[SequenceChunk], request_ids: list[int]) -> PagedAttention:
        return PagedAttention(self.kv, chunks, self.group)

    def faults(self, attention: PagedAttention) -> dict[int, str]:
        return {}

    def step_fields(self) -> dict[str, Any]:
        return {}

    def kv_bytes(self) -> int:
        return self.kv.kv.untyped_storage().nbytes()

    def close(self) -> None:
        pass
