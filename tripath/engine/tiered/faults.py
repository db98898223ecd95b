"""Why a tier could not store or return a page: each fault fails the request that needed the page, not the engine.

The SSD tier turns every OSError of its file system calls into one of these (tripath/engine/tiered/ssd.py:
``fault_of``), so the cache and the engine only ever see a TierFault, with a message that names the file.
"""

from __future__ import annotations


class TierFault(RuntimeError):
    """A tier could not store or return a page; the request that needed the page fails, not the engine."""


class DiskFull(TierFault):
    """The SSD tier is at its capacity in pages (or, as FileSystemFull, the file system is full)."""


class FileSystemFull(DiskFull):
    """The file system under the SSD tier reported no space left (ENOSPC) or an exhausted quota (EDQUOT)."""


class PageMissing(TierFault):
    """An SSD page file that the cache wrote is gone (deleted, or its directory was)."""


class PageCorrupt(TierFault):
    """An SSD page file's header, size or checksum does not match, or it holds another slot's page."""


class PageStale(TierFault):
    """An SSD page file is intact but holds an earlier write of its slot (its generation is not the live one)."""


class PageUnreadable(TierFault):
    """An SSD page file could not be read (EIO and other read errors of the file system)."""


class TierUnwritable(TierFault):
    """The SSD directory cannot be created or written (read-only, permissions, not a directory, I/O error)."""


class OutOfFileDescriptors(TierFault):
    """The process (EMFILE) or the system (ENFILE) has no file descriptor left to open a page file."""


class DeviceFull(TierFault):
    """Every device page is pinned or in use: the request needs more device memory than the pool has."""
