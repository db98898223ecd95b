"""Why a tier could not store or return a page: each fault fails the request that needed the page, not the engine."""

from __future__ import annotations


class TierFault(RuntimeError):
    """A tier could not store or return a page; the request that needed the page fails, not the engine."""


class DiskFull(TierFault):
    """The SSD tier is at its capacity, or the file system reported ENOSPC."""


class PageMissing(TierFault):
    """An SSD page file that the cache wrote is gone."""


class PageCorrupt(TierFault):
    """An SSD page file's header, size or checksum does not match what was written."""


class TierUnwritable(TierFault):
    """The SSD directory cannot be created or written (permissions, read-only, not a directory)."""


class DeviceFull(TierFault):
    """Every device page is pinned or in use: the request needs more device memory than the pool has."""
