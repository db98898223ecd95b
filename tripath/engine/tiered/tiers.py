"""The three places a KV page can live: a bounded device pool, a host tier, and an SSD tier of files.

A page is one chunk of ``chunk_tokens`` tokens of ONE layer's K and V: [2, chunk_tokens, kv_heads,
head_dim].  Pages are per layer so attention can page in layer l while layer l-1 computes.
On CUDA the device pool is GPU memory and the host tier is pinned host memory (so copies can run
asynchronously on a side stream); on CPU both are RAM and the "device" pool is simply bounded.
The SSD tier writes one file per page slot (files are reused) with a 64-bit XXH3 checksum of the
payload and the page id in a header, so a missing, truncated, corrupted or misplaced page is detected
on read instead of being used.  XXH3 is fast enough beside the file read not to limit SSD paging
(CRC-32 is not: docs/tiered_kv.md).
Every transfer is timed per link (device<->host, host<->ssd) for the paging-cost measurements.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from tripath.engine.tiered.faults import DeviceFull, DiskFull, PageCorrupt, PageMissing, TierFault, TierUnwritable
from tripath.engine.tiered.ssd import SSDTier

__all__ = ["DeviceFull", "DiskFull", "LinkStats", "PageCorrupt", "PageMissing", "PagePool", "SSDTier", "TierConfig",
           "TierFault", "TierUnwritable", "Tiers", "TransferStats"]


@dataclass(frozen=True)
class TierConfig:
    """Capacities in pages (one page = chunk_tokens tokens of one layer's K and V)."""

    chunk_tokens: int = 256
    device_pages: int = 64
    host_pages: int = 256
    ssd_pages: int = 4096
    ssd_dir: str | None = None  # parent of the cache's temp directory; None: the system temp dir
    drop_page_cache: bool = False  # fsync + POSIX_FADV_DONTNEED after a write, so reads come from the disk
    # policy knobs read by the continuous-batching Engine (TieredKVCache takes them as arguments)
    sink_tokens: int = 4  # attention sinks kept on the device (StreamingLLM)
    window_tokens: int = 256  # the recent window kept on the device
    prefetch: bool = True  # fetch the next layer's pages ahead on a background thread

    def __post_init__(self) -> None:
        for name in ("sink_tokens", "window_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TierConfig.{name}: must be an integer >= 0, got {value!r}")
        for name in ("chunk_tokens", "device_pages"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TierConfig.{name}: must be an integer >= 1, got {value!r}")
        for name in ("host_pages", "ssd_pages"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TierConfig.{name}: must be an integer >= 0, got {value!r}")


@dataclass
class LinkStats:
    """Bytes and seconds moved over one link in one direction."""

    pages: int = 0
    bytes: int = 0
    seconds: float = 0.0  # wall time (perf_counter) inside the transfers
    cpu_seconds: float = 0.0  # the transferring thread's CPU time (user + system): robust to a shared CPU

    def add(self, nbytes: int, seconds: float, cpu_seconds: float = 0.0) -> None:
        self.pages += 1
        self.bytes += nbytes
        self.seconds += seconds
        self.cpu_seconds += cpu_seconds

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else float("nan")


@dataclass
class TransferStats:
    """Per-link counters; updated from the prefetch thread too, hence the lock."""

    links: dict[str, LinkStats] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, link: str, nbytes: int, seconds: float, cpu_seconds: float = 0.0) -> None:
        with self.lock:
            self.links.setdefault(link, LinkStats()).add(nbytes, seconds, cpu_seconds)

    def get(self, link: str) -> LinkStats:
        return self.links.get(link, LinkStats())


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
