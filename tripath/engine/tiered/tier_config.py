"""What a tiered KV cache is built with (capacities in pages, placement policy) and what its links moved.

Plain data shared by the tiers, the SSD tier and the cache, so none of them imports another for it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


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
