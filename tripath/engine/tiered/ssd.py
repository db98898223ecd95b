"""The SSD tier: one file per page slot (files reused) in a private temp directory.

Each file starts with a v3 header: magic, slot id, write generation, payload size and a 64-bit XXH3
checksum over those header fields and the payload (why XXH3, not CRC-32: tripath/engine/tiered/tiers.py's
docstring).  The generation comes from a counter of the tier and is kept in memory for every live page,
so a missing, truncated, corrupted, misplaced (another slot's) or stale (an earlier write of the same
slot) page file is detected on read and never served.

Every file system call goes through ``fs`` (the ``os`` module unless a test passes a stand-in that
injects faults), and every OSError it raises becomes a TierFault (``fault_of``) naming the file, so a
fault ends only the requests that needed the page; the tier's own state is left as it was before the
failed call.  A deleted directory is recreated on the next write.  The promises per fault:
docs/contracts.md, "SSD tier".  Transfers are timed into the Tiers' shared TransferStats.
"""

from __future__ import annotations

import errno
import os
import secrets
import struct
import tempfile
import time
import warnings
from contextlib import suppress
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
import xxhash

from tripath.engine.tiered.faults import (
    DiskFull,
    FileSystemFull,
    OutOfFileDescriptors,
    PageCorrupt,
    PageMissing,
    PageStale,
    PageUnreadable,
    TierFault,
    TierUnwritable,
)

if TYPE_CHECKING:
    from tripath.engine.tiered.tier_config import TierConfig, TransferStats

_MAGIC = b"TKV3"
_FIELDS = struct.Struct("<4s4xQQQ")  # magic, slot id, write generation, payload bytes
_DIGEST = struct.Struct("<Q")  # xxh3_64 of the fields and the payload
_HEADER_BYTES = _FIELDS.size + _DIGEST.size

_EXPLAINED = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EMFILE: "out of file descriptors (this process's limit, ulimit -n)",
    errno.ENFILE: "out of file descriptors (the system's limit)",
}


def fault_of(exc: OSError, action: str, path: Path | str, reading: bool = False) -> TierFault:
    """The TierFault an OSError of ``action`` on ``path`` is: one line naming the file and the reason.

    Full disk or quota -> FileSystemFull; no file descriptor left -> OutOfFileDescriptors; on a read, a
    missing file -> PageMissing and any other error -> PageUnreadable; on a write -> TierUnwritable.
    """
    code = exc.errno
    reason = exc.strerror or str(exc)
    detail = f"{_EXPLAINED[code]} ({reason})" if code in _EXPLAINED else reason
    message = f"SSD tier: cannot {action} {path}: {detail}"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return FileSystemFull(message)
    if code in (errno.EMFILE, errno.ENFILE):
        return OutOfFileDescriptors(message)
    if reading:
        return PageMissing(message) if code == errno.ENOENT else PageUnreadable(message)
    return TierUnwritable(message)


def _bytes_of(page: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's memory as a flat byte view (no copy)."""
    return memoryview(page.view(torch.uint8).numpy()).cast("B")


def _tail(buffers: list[Any], skip: int) -> list[memoryview]:
    """The buffers less their first ``skip`` bytes together (what a short write left to write)."""
    rest = []
    for buffer in buffers:
        view = memoryview(buffer)
        if skip >= len(view):
            skip -= len(view)
            continue
        rest.append(view[skip:])
        skip = 0
    return rest


class SSDTier:
    """One file per page in a private temp directory, created on first use and removed by close().

    ``fs`` is the object whose functions the tier calls (open, close, pwritev, preadv, fsync,
    posix_fadvise, unlink, mkdir, makedirs, rmdir, listdir: the ``os`` module by default); a test passes
    a stand-in that fails some of them on a real directory (tests/helpers.py: FaultyFS).
    """

    HEADER_BYTES = _HEADER_BYTES

    def __init__(self, config: TierConfig, page_shape: tuple[int, ...], dtype: torch.dtype,
                 stats: TransferStats, fs: ModuleType | Any = os) -> None:
        self.capacity = config.ssd_pages
        self.parent = config.ssd_dir
        self.drop_page_cache = config.drop_page_cache
        self.page_shape, self.dtype, self.stats = page_shape, dtype, stats
        self.fs = fs
        self.page_bytes = torch.Size(page_shape).numel() * torch.empty((), dtype=dtype).element_size()
        self.directory: Path | None = None
        self.next_page_id = 0
        self.live: dict[int, int] = {}  # slot id -> write generation of the page it holds
        self.generation = 0  # the last write's generation: one counter for the tier's lifetime
        self._free_ids: list[int] = []  # slots whose files can be overwritten
        # per-page fixed costs matter beside a page's copy: files are opened relative to a directory fd by a
        # plain name (not through pathlib), and byte views of reused staging buffers are kept (docs/tiered_kv.md)
        self._dir_fd: int | None = None
        self._retired_fds: list[int] = []  # fds of a deleted directory: a read on the prefetch thread may hold one
        self._views: dict[tuple[int, int], memoryview] = {}

    # ---- the directory -------------------------------------------------------------------------
    def _directory_fd(self) -> int:
        """The directory's fd, creating the directory (first use) or recreating it (deleted under the tier)."""
        if self._dir_fd is not None:
            return self._dir_fd
        fs = self.fs
        where = self.parent if self.parent is not None else tempfile.gettempdir()
        action = "create a directory under"
        try:
            if self.directory is None:
                fs.makedirs(where, exist_ok=True)
                self.directory = self._new_directory(where)
            else:
                action, where = "recreate the directory", str(self.directory)
                fs.makedirs(self.directory, 0o700, exist_ok=True)
            self._dir_fd = fs.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise fault_of(exc, action, where) from exc
        return self._dir_fd

    def _new_directory(self, parent: str) -> Path:
        """A fresh private directory tripath-kv-<random> under parent (tempfile.mkdtemp, through fs)."""
        for _ in range(100):
            path = Path(parent) / f"tripath-kv-{secrets.token_hex(6)}"
            try:
                self.fs.mkdir(path, 0o700)
            except FileExistsError:
                continue
            return path
        raise OSError(errno.EEXIST, f"no free directory name under {parent}")

    def _retire_directory(self) -> None:
        """Forget the directory's fd (it was deleted): the next write recreates it at the same path."""
        if self._dir_fd is not None:
            self._retired_fds.append(self._dir_fd)
            self._dir_fd = None

    def _file(self, page_id: int) -> Path | str:
        """The page's file name for messages (no directory is created for it)."""
        name = f"page-{page_id}.kv"
        return self.directory / name if self.directory is not None else name

    def path(self, page_id: int) -> Path:
        """The page's file (the directory is created if it is not there yet)."""
        self._directory_fd()
        assert self.directory is not None
        return self.directory / f"page-{page_id}.kv"

    def _open_for_write(self, page_id: int) -> int:
        """os.open of the page's file for writing, relative to the directory fd; a deleted directory is
        recreated (its pages are lost: reading them is PageMissing) and the open retried once."""
        name = f"page-{page_id}.kv"
        flags = os.O_WRONLY | os.O_CREAT
        try:
            return self.fs.open(name, flags, 0o600, dir_fd=self._directory_fd())
        except FileNotFoundError:
            self._retire_directory()
        return self.fs.open(name, flags, 0o600, dir_fd=self._directory_fd())

    def _view(self, page: torch.Tensor) -> memoryview:
        """The bytes of a contiguous CPU page; cached for buffers that come back (the cache's staging pages)."""
        key = (page.data_ptr(), page.nbytes)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= 8:
                self._views.clear()
            view = self._views[key] = _bytes_of(page)  # holds the tensor alive, so the key stays unique
        return view

    def _write_all(self, fd: int, buffers: list[Any]) -> None:
        """pwritev until every byte is out: a short write (a disk filling up) continues where it stopped,
        so a full disk surfaces as the ENOSPC of the next call, not as a short write."""
        total = sum(len(b) for b in buffers)
        done = self.fs.pwritev(fd, buffers, 0)
        while done < total:
            written = self.fs.pwritev(fd, _tail(buffers, done), done)
            if written <= 0:
                raise OSError(errno.EIO, f"short write: {done} of {total} bytes, then no progress")
            done += written

    # ---- pages ---------------------------------------------------------------------------------
    def write(self, page: torch.Tensor) -> int:
        """Store a CPU page; returns its id.  Raises DiskFull or a fault of fault_of, leaving the tier as it was.

        Slot files are reused: overwriting an existing file in place is far cheaper than creating one
        (docs/tiered_kv.md), so no temp file + rename; a torn write cannot be mistaken for a page
        because the header's size and checksum must match on read, nor an older page of the slot
        because its generation must be the live one.  Header and payload go out in one pwritev call.
        """
        if len(self.live) >= self.capacity:
            raise DiskFull(f"SSD tier: all {self.capacity} pages in use")
        start, cpu = time.perf_counter(), time.thread_time()
        payload = _bytes_of(page.contiguous())
        page_id = self._free_ids.pop() if self._free_ids else self.next_page_id
        generation = self.generation + 1
        fields = _FIELDS.pack(_MAGIC, page_id, generation, len(payload))
        digest = xxhash.xxh3_64(fields)
        digest.update(payload)
        header = fields + _DIGEST.pack(digest.intdigest())
        fs, fd, action = self.fs, None, "open"
        try:
            fd = self._open_for_write(page_id)
            action = "write"
            self._write_all(fd, [header, payload])
            if self.drop_page_cache:
                action = "sync"
                fs.fsync(fd)
                action = "drop the page cache of"
                fs.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            action, closing, fd = "close", fd, None
            fs.close(closing)
        except (OSError, TierFault) as exc:
            if action != "open":  # a torn page file: remove it (if that fails too, no live page points at it)
                if fd is not None:
                    with suppress(OSError):
                        fs.close(fd)
                with suppress(OSError):
                    fs.unlink(f"page-{page_id}.kv", dir_fd=self._dir_fd)
            if page_id != self.next_page_id:  # a new slot's id is simply not taken: the counter stays
                self._free_ids.append(page_id)
            if isinstance(exc, TierFault):
                raise
            raise fault_of(exc, action, self._file(page_id)) from exc
        if page_id == self.next_page_id:
            self.next_page_id += 1
        self.generation = generation
        self.live[page_id] = generation
        self.stats.add("host->ssd", len(payload), time.perf_counter() - start, time.thread_time() - cpu)
        return page_id

    def read(self, page_id: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """The page as a CPU tensor, checked against its header and live generation.

        Raises PageMissing (no such live page, or its file is gone), PageCorrupt (truncated, damaged, or
        another slot's page), PageStale (an earlier write of this slot), PageUnreadable (the read failed)
        or OutOfFileDescriptors.  ``out`` (a contiguous CPU tensor of the page's shape and dtype, e.g. a
        reused staging buffer) receives the bytes; without it a new tensor is allocated.  Header, payload
        and one spare byte (a longer file shows up as a size mismatch) arrive in one preadv system call;
        the checksum is computed while the payload is still in the CPU cache.
        """
        start, cpu = time.perf_counter(), time.thread_time()
        fs, path, dir_fd = self.fs, self._file(page_id), self._dir_fd
        live = self.live.get(page_id)
        if live is None:
            raise PageMissing(f"SSD tier: cannot read {path}: the tier holds no page {page_id}")
        if dir_fd is None:
            raise PageMissing(f"SSD tier: cannot read {path}: its directory was deleted")
        if out is None:
            page = torch.empty(self.page_shape, dtype=self.dtype)
            payload = _bytes_of(page)
        else:
            page, payload = out, self._view(out)
        header, spare = bytearray(_HEADER_BYTES), bytearray(1)
        try:
            fd = fs.open(f"page-{page_id}.kv", os.O_RDONLY, dir_fd=dir_fd)
        except OSError as exc:
            raise fault_of(exc, "open", path, reading=True) from exc
        try:
            got = fs.preadv(fd, [header, payload, spare], 0)
        except OSError as exc:
            with suppress(OSError):
                fs.close(fd)
            raise fault_of(exc, "read", path, reading=True) from exc
        try:
            fs.close(fd)
        except OSError as exc:
            raise fault_of(exc, "close", path, reading=True) from exc
        self._check(page_id, live, header, payload, got, path)
        self.stats.add("ssd->host", self.page_bytes, time.perf_counter() - start, time.thread_time() - cpu)
        return page

    def _check(self, page_id: int, live: int, header: bytearray, payload: memoryview, got: int,
               path: Path | str) -> None:
        """Raise PageCorrupt / PageStale unless the bytes read are the live page of this slot."""
        expected = self.page_bytes
        if got < _HEADER_BYTES:
            raise PageCorrupt(f"SSD tier: page file {path} is truncated ({got} bytes)")
        magic, stored_id, generation, nbytes = _FIELDS.unpack_from(header)
        size = got - _HEADER_BYTES
        digest = xxhash.xxh3_64(memoryview(header)[: _FIELDS.size])
        digest.update(payload)
        if magic != _MAGIC or nbytes != expected or size != expected \
                or digest.intdigest() != _DIGEST.unpack_from(header, _FIELDS.size)[0]:
            raise PageCorrupt(f"SSD tier: page file {path} fails its checksum "
                              f"(size {size}, expected {expected})")
        if stored_id != page_id:
            raise PageCorrupt(f"SSD tier: page file {path} holds page {stored_id}, not {page_id} (a misplaced file)")
        if generation != live:
            raise PageStale(f"SSD tier: page file {path} is write {generation} of its slot, the live page is "
                            f"write {live} (a stale file)")

    def delete(self, page_id: int) -> None:
        """Free the page's slot; its file stays to be overwritten by a later page."""
        if self.live.pop(page_id, None) is not None:
            self._free_ids.append(page_id)

    def close(self) -> None:
        """Remove the temp directory and every page in it, and forget every page.

        Never raises: a directory that cannot be removed (a read-only file system) is reported as a
        RuntimeWarning carrying the TierUnwritable that names it, so a finished run still writes its results.
        """
        fs, directory = self.fs, self.directory
        fds = [*self._retired_fds, *([self._dir_fd] if self._dir_fd is not None else [])]
        self._dir_fd, self._retired_fds, self.directory = None, [], None
        self._views.clear()
        self.live.clear()
        self._free_ids.clear()
        self.next_page_id = 0
        for fd in fds:
            with suppress(OSError):
                fs.close(fd)
        if directory is None:
            return
        action, path = "list", directory
        try:
            names = fs.listdir(directory)
            action = "remove"
            for name in names:
                path = directory / name
                with suppress(FileNotFoundError):
                    fs.unlink(path)
            path = directory
            fs.rmdir(directory)
        except FileNotFoundError:
            pass  # deleted under the tier: nothing is left to remove
        except OSError as exc:
            fault = fault_of(exc, action, path)
            warnings.warn(f"{type(fault).__name__}: {fault}", RuntimeWarning, stacklevel=2)
