"""The three places a KV page can live: a bounded device pool, a host tier, and an SSD tier of files.

A page is one chunk of ``chunk_tokens`` tokens of ONE layer's K and V: [2, chunk_tokens, kv_heads,
head_dim].  Pages are per layer so attention can page in layer l while layer l-1 computes.
On CUDA the device pool is GPU memory and the host tier is pinned host memory (so copies can run
asynchronously on a side stream); on CPU both are RAM and the "device" pool is simply bounded.
The SSD tier writes one file per page slot (files are reused) with the slot id, a write generation
and a 64-bit XXH3 checksum of header and payload in a header, so a missing, truncated, corrupted,
misplaced or stale page is detected on read instead of being used (tripath/engine/tiered/ssd.py).
XXH3 is fast enough beside the file read not to limit SSD paging (CRC-32 is not: docs/tiered_kv.md).
Every transfer is timed per link (device<->host, host<->ssd) for the paging-cost measurements.
"""

from __future__ import annotations

import torch

from tripath.engine.tiered.ssd import SSDTier
from tripath.engine.tiered.tier_config import TierConfig, TransferStats


class PagePool:
    """A preallocated [pages, 2, chunk, kv_heads, head_dim] tensor with a free list (device or host)."""

    def __init__(self, num_pages: int, page_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                 pin: bool = False) -> None:
        self.capacity = num_pages
        self.data = torch.zeros((num_pages, *page_shape), dtype=dtype, device=device, pin_memory=pin)
        self._free = list(range(num_pages - 1, -1, -1))  # pop() hands out slot 0 first

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        return self._free.pop()

    def release(self, slot: int) -> None:
        self._free.append(slot)


class Tiers:
    """The device pool, host tier and SSD tier for pages of one shape, with shared transfer stats."""

    def __init__(self, config: TierConfig, page_shape: tuple[int, ...], dtype: torch.dtype,
                 device: torch.device) -> None:
        self.config, self.page_shape, self.dtype, self.device = config, page_shape, dtype, device
        self.stats = TransferStats()
        self.device_pool = PagePool(config.device_pages, page_shape, dtype, device)
        pin = device.type == "cuda"  # pinned host memory: asynchronous, full-bandwidth H2D/D2H copies
        self.host_pool = PagePool(config.host_pages, page_shape, dtype, torch.device("cpu"), pin=pin)
        self.ssd = SSDTier(config, page_shape, dtype, self.stats)

    @property
    def page_bytes(self) -> int:
        return self.device_pool.data[0].numel() * self.device_pool.data.element_size()

    def close(self) -> None:
        self.ssd.close()
