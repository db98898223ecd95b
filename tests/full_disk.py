"""A full disk for the atomic writers, without root: their temp files write into /dev/full.

``full_disk(monkeypatch, only)`` makes every temp file an AtomicFile opens (``.NAME.*.tmp``, created on disk by
mkstemp as usual) write into /dev/full instead, where ``only(target name)`` says so: the buffer's flush, and the
flush inside close, fail with ENOSPC as they do on a full disk, while the temp file itself stays on disk for the
writer to remove. Linux only (/proc/self/fd names what an fd is open on).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tripath.core import atomic

needs_dev_full = pytest.mark.skipif(not (os.path.exists("/dev/full") and os.path.isdir("/proc/self/fd")),
                                    reason="needs /dev/full and /proc (Linux)")


def full_disk(monkeypatch: pytest.MonkeyPatch, only: Callable[[str], bool] = lambda name: True) -> list[str]:
    """Route matching temp files to /dev/full; returns the list of target names that were, as they open."""
    real = os.fdopen
    hit: list[str] = []

    def fdopen(fd: int, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        name = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        if name.startswith(".") and name.endswith(".tmp"):
            target = name[1:].rsplit(".", 2)[0]  # .records.csv.abc123.tmp -> records.csv
            if only(target):
                hit.append(target)
                full = os.open("/dev/full", os.O_WRONLY)
                os.dup2(full, fd)  # the same fd now writes into /dev/full
                os.close(full)
        return real(fd, *args, **kwargs)

    monkeypatch.setattr(atomic.os, "fdopen", fdopen)
    return hit
