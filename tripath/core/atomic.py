"""Atomic file writes: a temp file beside the target, flushed to disk, then renamed over it.

Readers (and a run killed mid-write) see the old file or the whole new one, never half a file, and no
temp file is left behind on failure. The new file keeps an existing file's permissions, else 0644
(mkstemp's 0600 would hide shared data from other users). A folder that cannot take the temp file
raises OSError naming the target, not the temp name.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from tripath.core.errors import InputError

__all__ = ["AtomicFile", "check_dir_target", "replacing", "replacing_dir", "write_bytes", "write_text", "writing_dir"]


def _temp_beside(path: Path, suffix: str) -> tuple[int, str]:
    try:
        return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    except OSError as err:
        raise type(err)(err.errno, f"{err.strerror} (cannot create a file in {path.parent})", str(path)) from None


def _install(tmp: str, path: Path) -> None:
    """Give ``tmp`` the target's mode and rename it over ``path``."""
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
    os.replace(tmp, path)


class AtomicFile:
    """An open temp file beside ``path``: commit() flushes, fsyncs and renames it over ``path``, discard()
    removes it. As a context manager it yields the handle and commits on success, discards on an exception."""

    def __init__(self, path: str | os.PathLike[str], *, binary: bool = False, encoding: str = "utf-8",
                 suffix: str = ".tmp") -> None:
        self.path = Path(path)
        fd, self.tmp = _temp_beside(self.path, suffix)
        self.handle: IO[Any] = (os.fdopen(fd, "wb") if binary
                                else os.fdopen(fd, "w", encoding=encoding, newline=""))

    def commit(self) -> None:
        try:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.handle.close()
            _install(self.tmp, self.path)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        self.handle.close()
        Path(self.tmp).unlink(missing_ok=True)

    def __enter__(self) -> IO[Any]:
        return self.handle

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (no newline translation)."""
    with AtomicFile(path, encoding=encoding) as handle:
        handle.write(text)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with AtomicFile(path, binary=True) as handle:
        handle.write(data)


@contextmanager
def replacing(path: str | os.PathLike[str], suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temp path beside ``path`` for a writer that wants a file name (safetensors, torch.save,
    savefig: give ``suffix`` the target's extension where the writer reads the format from it); on success
    it is fsynced and renamed over ``path``, on an exception removed."""
    target = Path(path)
    fd, tmp = _temp_beside(target, suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        _install(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename is durable once its folder is synced); best effort."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def replacing_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temp folder beside ``path``; on success it replaces ``path`` (an old folder is moved
    aside, then deleted; put back if the new one cannot take its place), on an exception it is deleted."""
    dest = Path(path)
    try:
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    except OSError as err:
        raise type(err)(err.errno, f"{err.strerror} (cannot create a folder in {dest.parent})", str(dest)) from None
    try:
        yield tmp
        for entry in tmp.rglob("*"):  # the writer's files reach the disk before the folder is renamed
            if entry.is_file():
                with open(entry, "rb") as handle:
                    os.fsync(handle.fileno())
        _fsync_dir(tmp)
        tmp.chmod(dest.stat().st_mode & 0o777 if dest.exists() else 0o755)
        old = None
        if dest.exists():
            old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old-"))
            os.replace(dest, old)
        try:
            os.replace(tmp, dest)
        except BaseException:
            if old is not None:
                os.replace(old, dest)
            raise
        _fsync_dir(dest.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_dir_target(path: str | os.PathLike[str], replace: bool, field: str = "--out") -> Path:
    """``path`` as a folder a command may write whole: absent, an empty folder, or (with ``replace``) a
    folder to replace. A file there, or a non-empty folder without ``replace``, is an InputError naming
    ``field``. Commands call it before their work, so a refusal costs nothing."""
    dest = Path(path)
    if dest.is_symlink():
        raise InputError(str(dest), field, "is a symbolic link; give the folder itself")
    if dest.exists() and not dest.is_dir():
        raise InputError(str(dest), field, "exists and is not a folder")
    if dest.is_dir() and not replace and any(dest.iterdir()):
        raise InputError(str(dest), field, "folder exists and is not empty; pass --replace to replace it whole")
    parent = dest.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent  # the folder its missing parents would be created in
    if not parent.is_dir():
        raise InputError(str(dest), field, f"{parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        problem = "the filesystem is read-only" if _read_only(parent) else "permission denied"
        raise InputError(str(dest), field, f"cannot write in {parent}: {problem}")
    return dest


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):
        return False


@contextmanager
def writing_dir(path: str | os.PathLike[str], replace: bool = False, field: str = "--out") -> Iterator[Path]:
    """Write a folder as a unit: yield an empty temp folder beside ``path`` (missing parents are created);
    on success it takes ``path``'s place whole, on any exception (a full disk) nothing is left and an old
    folder is untouched. ``replace`` and ``field`` as in check_dir_target."""
    dest = check_dir_target(path, replace, field)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with replacing_dir(dest) as tmp:
        yield tmp
