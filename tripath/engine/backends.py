"""The choice among the KV back ends an Engine steps over: paged, compressed or tiered.

Above ``kv`` and ``tiered`` on purpose: the interface (tripath/engine/kv/backend.py) and the plain and compressed
back ends live in ``kv``, the tiered store in ``tiered`` (which builds on ``kv``'s paged pool), so the one function
that knows all three sits in the engine package, and ``kv`` never imports ``tiered``.
"""

from __future__ import annotations

import torch

from tripath.engine.engine_config import EngineConfig
from tripath.engine.kv.backend import KVBackend
from tripath.engine.kv.compressed_backend import CompressedBackend
from tripath.engine.kv.paged_backend import PagedBackend
from tripath.engine.model.config import ModelConfig
from tripath.engine.tiered.store import TieredStore


def make_backend(model_config: ModelConfig, config: EngineConfig, dtype: torch.dtype,
                 device: torch.device) -> KVBackend:
    """The back end config asks for: compressed (kv_compression), tiered (tiered) or the plain paged pool."""
    if config.kv_compression is not None:
        return CompressedBackend(model_config, config, dtype, device)
    if config.tiered is not None:
        return TieredStore(model_config, config.tiered, dtype, device, config.block_size, config.prefix_caching)
    return PagedBackend(model_config, config, dtype, device)
