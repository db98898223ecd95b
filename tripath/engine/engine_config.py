"""What an Engine (tripath/engine/engine.py) is built with, and the error for a request it can never run."""

from __future__ import annotations

from dataclasses import dataclass

from tripath.engine.kv.compressed_store import STORE_MODES
from tripath.engine.tiered.tier_config import TierConfig


@dataclass(frozen=True)
class EngineConfig:
    """Settings shared by name with the simulator: max_batch_size, max_batched_tokens, block_size."""

    max_batch_size: int = 256
    max_batched_tokens: int = 8192
    block_size: int = 16
    num_blocks: int = 1024  # KV capacity = num_blocks * block_size tokens
    chunked_prefill: bool = True
    fuse_projections: bool = True  # rewrite the model in place: one q/k/v and one gate/up matmul per layer
    # KV in device / host / SSD tiers (tripath/engine/tiered/store.py); None: one paged pool of num_blocks
    tiered: TierConfig | None = None
    # KV kept compressed in the paged pool (tripath/engine/kv/compressed_store.py: "int8", "int4", "mixed-int8",
    # "mixed-int4"; "fp" = the same blockwise attention uncompressed); None: the plain full-precision pool
    kv_compression: str | None = None
    # reuse cached full prompt blocks across requests (tripath/engine/kv/prefix_cache.py); with tiered the blocks
    # are its chunks of tiered.chunk_tokens tokens, cached in device, host and SSD (tripath/engine/tiered/store.py)
    prefix_caching: bool = False

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_batched_tokens", "block_size", "num_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"EngineConfig.{name}: must be an integer >= 1, got {value!r}")
        if self.kv_compression is not None and self.kv_compression not in STORE_MODES:
            raise ValueError(f"EngineConfig.kv_compression: must be None or one of {STORE_MODES}, "
                             f"got {self.kv_compression!r}")
        if self.kv_compression is not None and self.tiered is not None:
            raise ValueError("EngineConfig.kv_compression: cannot be combined with tiered (not implemented)")
        if self.prefix_caching and self.kv_compression is not None:
            raise ValueError("EngineConfig.prefix_caching: cannot be combined with kv_compression (not implemented)")

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


class RequestRejected(ValueError):
    """The request can never run on this engine (too long for the model or for the whole KV pool)."""
