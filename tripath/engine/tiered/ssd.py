"""The SSD tier: one file per page slot (files reused) in a private temp directory.

Each file carries a header with the page id and a 64-bit XXH3 checksum of the payload, so a missing,
truncated, corrupted or misplaced page is detected on read instead of being used (why XXH3, not
CRC-32: tripath/engine/tiered/tiers.py's docstring). Transfers are timed into the Tiers' shared TransferStats.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import xxhash

from tripath.engine.tiered.faults import DiskFull, PageCorrupt, PageMissing, TierUnwritable

if TYPE_CHECKING:
    from tripath.engine.tiered.tier_config import TierConfig, TransferStats

_MAGIC = b"TKV2"
_HEADER = struct.Struct("<4s4xQQQ")  # magic, page id, payload bytes, xxh3_64 of the payload


def _bytes_of(page: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's memory as a flat byte view (no copy)."""
    return memoryview(page.view(torch.uint8).numpy()).cast("B")


class SSDTier:
    """One file per page in a private temp directory, created on first use and removed by close()."""

    HEADER_BYTES = _HEADER.size

    def __init__(self, config: TierConfig, page_shape: tuple[int, ...], dtype: torch.dtype,
                 stats: TransferStats) -> None:
        self.capacity = config.ssd_pages
        self.parent = config.ssd_dir
        self.drop_page_cache = config.drop_page_cache
        self.page_shape, self.dtype, self.stats = page_shape, dtype, stats
        self.page_bytes = torch.Size(page_shape).numel() * torch.empty((), dtype=dtype).element_size()
        self.directory: Path | None = None
        self.next_page_id = 0
        self.live: set[int] = set()
        self._free_ids: list[int] = []  # slots whose files can be overwritten
        # per-page fixed costs matter beside a page's copy: files are opened relative to a directory fd by a
        # plain name (not through pathlib), and byte views of reused staging buffers are kept (docs/tiered_kv.md)
        self._dir_fd: int | None = None
        self._views: dict[tuple[int, int], memoryview] = {}

    def _dir(self) -> Path:
        if self.directory is None:
            try:
                if self.parent is not None:
                    os.makedirs(self.parent, exist_ok=True)
                self.directory = Path(tempfile.mkdtemp(prefix="tripath-kv-", dir=self.parent))
                self._dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as exc:
                raise TierUnwritable(f"SSD tier: cannot create a directory under {self.parent!r}: {exc}") from exc
        return self.directory

    def path(self, page_id: int) -> Path:
        return self._dir() / f"page-{page_id}.kv"

    def _open(self, page_id: int, flags: int) -> int:
        """os.open of the page's file, relative to the tier's directory fd."""
        if self._dir_fd is None:
            self._dir()
        return os.open(f"page-{page_id}.kv", flags, 0o600, dir_fd=self._dir_fd)

    def _view(self, page: torch.Tensor) -> memoryview:
        """The bytes of a contiguous CPU page; cached for buffers that come back (the cache's staging pages)."""
        key = (page.data_ptr(), page.nbytes)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= 8:
                self._views.clear()
            view = self._views[key] = _bytes_of(page)  # holds the tensor alive, so the key stays unique
        return view

    def write(self, page: torch.Tensor) -> int:
        """Store a CPU page; returns its id.  Raises DiskFull / TierUnwritable, leaving nothing behind.

        Slot files are reused: overwriting an existing file in place is far cheaper than creating one
        (docs/tiered_kv.md), so no temp file + rename; a torn write cannot be mistaken for a page
        because the header's size and checksum must match on read.
        Header and payload go out in one pwritev system call.
        """
        if len(self.live) >= self.capacity:
            raise DiskFull(f"SSD tier: all {self.capacity} pages in use")
        start, cpu = time.perf_counter(), time.thread_time()
        payload = _bytes_of(page.contiguous())
        if self._free_ids:
            page_id = self._free_ids.pop()
        else:
            page_id = self.next_page_id
            self.next_page_id += 1
        header = _HEADER.pack(_MAGIC, page_id, len(payload), xxhash.xxh3_64_intdigest(payload))
        try:
            fd = self._open(page_id, os.O_WRONLY | os.O_CREAT)
            try:
                written = os.pwritev(fd, [header, payload], 0)
                if written != len(header) + len(payload):
                    raise OSError(errno.EIO, f"short write: {written} of {len(header) + len(payload)} bytes")
                if self.drop_page_cache:
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        except OSError as exc:
            path = self.path(page_id)
            path.unlink(missing_ok=True)  # a torn page file is never reused
            self._free_ids.append(page_id)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(f"SSD tier: no space left writing {path}: {exc}") from exc
            raise TierUnwritable(f"SSD tier: cannot write {path}: {exc}") from exc
        self.live.add(page_id)
        self.stats.add("host->ssd", len(payload), time.perf_counter() - start, time.thread_time() - cpu)
        return page_id

    def read(self, page_id: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """The page as a CPU tensor, checked against its header; raises PageMissing / PageCorrupt.

        ``out`` (a contiguous CPU tensor of the page's shape and dtype, e.g. a reused staging buffer)
        receives the bytes; without it a new tensor is allocated.  Header, payload and one spare byte
        (a longer file shows up as a size mismatch) arrive in one preadv system call; the checksum is
        computed while the payload is still in the CPU cache.
        """
        start, cpu = time.perf_counter(), time.thread_time()
        if out is None:
            page = torch.empty(self.page_shape, dtype=self.dtype)
            payload = _bytes_of(page)
        else:
            page, payload = out, self._view(out)
        header, spare = bytearray(_HEADER.size), bytearray(1)
        try:
            fd = self._open(page_id, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise PageMissing(f"SSD tier: page file {self.path(page_id)} is missing") from exc
        except OSError as exc:
            raise PageMissing(f"SSD tier: cannot read page file {self.path(page_id)}: {exc}") from exc
        try:
            got = os.preadv(fd, [header, payload, spare], 0)
        except OSError as exc:
            raise PageMissing(f"SSD tier: cannot read page file {self.path(page_id)}: {exc}") from exc
        finally:
            os.close(fd)
        expected = self.page_bytes
        if got < _HEADER.size:
            raise PageCorrupt(f"SSD tier: page file {self.path(page_id)} is truncated ({got} bytes)")
        magic, stored_id, nbytes, digest = _HEADER.unpack(header)
        size = got - _HEADER.size
        if magic != _MAGIC or stored_id != page_id or nbytes != expected or size != expected \
                or xxhash.xxh3_64_intdigest(payload) != digest:
            raise PageCorrupt(f"SSD tier: page file {self.path(page_id)} fails its checksum "
                              f"(size {size}, expected {expected})")
        self.stats.add("ssd->host", expected, time.perf_counter() - start, time.thread_time() - cpu)
        return page

    def delete(self, page_id: int) -> None:
        """Free the page's slot; its file stays to be overwritten by a later page."""
        if page_id in self.live:
            self.live.discard(page_id)
            self._free_ids.append(page_id)

    def close(self) -> None:
        """Remove the temp directory and every page in it."""
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
        self._views.clear()
        self.live.clear()
        self._free_ids.clear()
        self.next_page_id = 0
