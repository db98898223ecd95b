"""Atomic file writes: a temp file beside the target, flushed to disk, then renamed over it.

Readers (and a run killed mid-write) see the old file or the whole new one, never half a file, and no
temp file is left behind on any failure: not on a full disk either, where closing the temp file (which
flushes its buffer) fails a second time. An OSError names the target the user asked for (a file in a folder
being written names that file in the target folder), never the temp name; a write or flush error, which
names no file, gets the target's name. The new file keeps an existing file's permissions, else 0644
(mkstemp's 0600 would hide shared data from other users).

Several files that belong together (`tripath serve --out --steps-out`) go in with ``commit_all``: all or none.
A folder (``writing_dir``) is built in a temp folder and swapped in under a lock file ``.NAME.lock`` beside it,
which also settles two commands writing one folder at once: the later one is refused unless it may replace.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from tripath.core.errors import InputError

__all__ = ["AtomicFile", "check_dir_target", "check_file_target", "commit_all", "replacing", "replacing_dir",
           "write_bytes", "write_text", "writing_dir"]


def _temp_beside(path: Path, suffix: str) -> tuple[int, str]:
    try:
        return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    except OSError as err:
        raise type(err)(err.errno, f"{err.strerror} (cannot create a file in {path.parent})", str(path)) from None


def _install(tmp: str, path: Path) -> None:
    """Give ``tmp`` the target's mode and rename it over ``path``."""
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
    os.replace(tmp, path)


def _naming(err: OSError, temp: str | os.PathLike[str], target: Path) -> OSError:
    """``err`` as the user should see it: where it names ``temp`` (or a file inside a temp folder) or no file
    at all (a write or flush on a full disk), the same error naming ``target`` (or that file in it). An error
    about some other file is returned as it is."""
    temp_name = os.fspath(temp)
    if err.filename is None:
        where = str(target)
    else:
        named = os.fsdecode(err.filename) if isinstance(err.filename, (str, bytes)) else str(err.filename)
        if named == temp_name:
            where = str(target)
        elif named.startswith(temp_name + os.sep):
            where = str(target) + named[len(temp_name):]
        else:
            return err
    if err.errno is None:
        return OSError(None, str(err) or type(err).__name__, where)
    # OSError(errno, ...) builds the errno's own subclass (FileNotFoundError, PermissionError, ...)
    return OSError(err.errno, err.strerror or os.strerror(err.errno), where)


@contextmanager
def _undone_on_failure(undo: Callable[[], None], temp: str | os.PathLike[str], target: Path) -> Iterator[None]:
    """On any exception (Ctrl-C and SIGTERM too) run ``undo`` (remove the temp file or folder) and raise it
    again; an OSError as ``_naming`` has it, so the one line the user sees names ``target``."""
    try:
        yield
    except OSError as err:
        undo()
        raise _naming(err, temp, target) from None
    except BaseException:
        undo()
        raise


def _unlink_quietly(path: str | os.PathLike[str]) -> None:
    """Remove a temp file if it is there; a failure to remove it must not hide the error being raised."""
    with contextlib.suppress(OSError):
        os.unlink(path)


class AtomicFile:
    """An open temp file beside ``path``: commit() flushes, fsyncs and renames it over ``path``, discard()
    removes it. As a context manager it yields the handle and commits on success, discards on an exception."""

    def __init__(self, path: str | os.PathLike[str], *, binary: bool = False, encoding: str = "utf-8",
                 suffix: str = ".tmp") -> None:
        self.path = Path(path)
        fd, self.tmp = _temp_beside(self.path, suffix)
        try:
            self.handle: IO[Any] = (os.fdopen(fd, "wb") if binary
                                    else os.fdopen(fd, "w", encoding=encoding, newline=""))
        except BaseException:  # an unknown encoding: the temp file must not stay behind
            with contextlib.suppress(OSError):  # fdopen's own file object may have closed it already
                os.close(fd)
            _unlink_quietly(self.tmp)
            raise

    def finish(self) -> None:
        """Flush the buffer, fsync and close the temp file: where a full disk fails, before any rename."""
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()

    @contextmanager
    def writing(self) -> Iterator[IO[Any]]:
        """The handle, for a writer whose file is committed later with others (commit_all): on an exception the
        temp file is removed and an OSError names the target."""
        with _undone_on_failure(self.discard, self.tmp, self.path):
            yield self.handle

    def commit(self) -> None:
        """Rename the whole temp file over the target; on failure it is removed and the OSError names the target."""
        with _undone_on_failure(self.discard, self.tmp, self.path):
            self.finish()
            _install(self.tmp, self.path)

    def discard(self) -> None:
        """Close and remove the temp file. Closing flushes the buffer, which fails again on a full disk: the
        file is closed all the same (the raw file closes after a failed flush), so that error is dropped."""
        try:
            self.handle.close()
        except OSError:
            pass
        finally:
            _unlink_quietly(self.tmp)

    def __enter__(self) -> IO[Any]:
        return self.handle

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.commit()
            return
        self.discard()
        if isinstance(exc, OSError):
            named = _naming(exc, self.tmp, self.path)
            if named is not exc:
                raise named from None


def commit_all(files: Sequence[AtomicFile]) -> None:
    """Install ``files`` as one set: every temp file is flushed, synced and closed first (a full disk fails
    there, before any target changes), then each is renamed over its target. If any step fails, the targets
    already replaced get their old file back (kept as a hard link until the set is in), new ones are removed,
    every temp file goes, and the OSError names the target it was about: the set is all new or all old."""
    installed: list[tuple[AtomicFile, Path | None]] = []
    current: AtomicFile | None = None
    try:
        for current in files:
            current.finish()
        for current in files:
            installed.append((current, _kept_aside(current.path)))
            _install(current.tmp, current.path)
    except BaseException as err:
        for file, aside in reversed(installed):
            _put_back(file.path, aside)
        for file in files:
            file.discard()
        if isinstance(err, OSError) and current is not None:
            raise _naming(err, current.tmp, current.path) from None
        raise
    for _, aside in installed:
        if aside is not None:
            shutil.rmtree(aside.parent, ignore_errors=True)


def _kept_aside(path: Path) -> Path | None:
    """A second name for ``path``'s current file (a hard link in a temp folder beside it, a copy where the
    filesystem has no links), so it can be put back; None when there is no file."""
    if not path.is_file():
        return None
    folder = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.old-"))
    kept = folder / path.name
    try:
        try:
            os.link(path, kept)
        except OSError:
            shutil.copy2(path, kept)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return kept


def _put_back(path: Path, kept: Path | None) -> None:
    """Undo one install of ``commit_all``: the old file back at ``path``, or no file where there was none."""
    with contextlib.suppress(OSError):
        if kept is None:
            path.unlink(missing_ok=True)
        else:
            os.replace(kept, path)
            shutil.rmtree(kept.parent, ignore_errors=True)


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
    it is fsynced and renamed over ``path``, on an exception removed (an OSError then names ``path``)."""
    target = Path(path)
    fd, tmp = _temp_beside(target, suffix)
    os.close(fd)
    with _undone_on_failure(lambda: _unlink_quietly(tmp), tmp, target):
        yield Path(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        _install(tmp, target)


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
def _install_lock(dest: Path) -> Iterator[None]:
    """Hold ``.NAME.lock`` beside ``dest`` (an exclusive flock) while a folder is checked and swapped in, so two
    commands finishing at once take turns: the second sees the first's folder instead of both passing their
    checks and the later silently replacing the earlier. The file is removed afterwards; one a killed process
    left is harmless (a flock dies with its process). A holder that removed the file before we got the lock
    leaves us locking a name that is gone: then the lock is taken afresh."""
    lock = dest.parent / f".{dest.name}.lock"
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                break
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        _unlink_quietly(lock)
        os.close(fd)


def _swap_in(tmp: Path, dest: Path) -> Path | None:
    """Rename ``tmp`` to ``dest``; an existing ``dest`` is moved aside first (put back if the rename fails).
    Returns where the old folder went, for the caller to delete."""
    tmp.chmod(dest.stat().st_mode & 0o777 if dest.exists() else 0o755)
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old-"))
        try:
            os.replace(dest, old)
        except BaseException:
            old.rmdir()
            raise
    try:
        os.replace(tmp, dest)
    except BaseException:
        if old is not None:
            os.replace(old, dest)
        raise
    return old


@contextmanager
def replacing_dir(path: str | os.PathLike[str], replace: bool = True, field: str = "--out") -> Iterator[Path]:
    """Yield an empty temp folder beside ``path``; on success it takes ``path``'s place (an old folder is moved
    aside, then deleted; put back if the new one cannot take its place), on an exception it is deleted (an
    OSError about a file in it names that file under ``path``). The swap runs under ``_install_lock`` after
    check_dir_target(path, replace, field) again: a folder another command wrote meanwhile is refused
    without ``replace``."""
    dest = Path(path)
    try:
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    except OSError as err:
        raise type(err)(err.errno, f"{err.strerror} (cannot create a folder in {dest.parent})", str(dest)) from None
    old: Path | None = None
    with _undone_on_failure(lambda: shutil.rmtree(tmp, ignore_errors=True), tmp, dest):
        yield tmp
        for entry in tmp.rglob("*"):  # the writer's files reach the disk before the folder is renamed
            if entry.is_file():
                with open(entry, "rb") as handle:
                    os.fsync(handle.fileno())
        _fsync_dir(tmp)
        with _install_lock(dest):
            check_dir_target(dest, replace, field)
            old = _swap_in(tmp, dest)
        _fsync_dir(dest.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _check_parent(dest: Path, field: str) -> None:
    """The folder ``dest`` (or its missing parents) would be created in must be a writable folder."""
    missing = _missing_parents(dest)
    parent = missing[0].parent if missing else dest.absolute().parent  # where its missing parents would go
    if not parent.is_dir():
        raise InputError(str(dest), field, f"{parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        problem = "the filesystem is read-only" if _read_only(parent) else "permission denied"
        raise InputError(str(dest), field, f"cannot write in {parent}: {problem}")


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
    _check_parent(dest, field)
    return dest


def check_file_target(path: str | os.PathLike[str], field: str, replace: bool | None = None) -> Path:
    """``path`` as a file a command may write: absent, or an existing regular file, which is overwritten where
    ``replace`` is None (the command has no --replace: overwriting is what it does) and refused where it is
    False. A folder, a symbolic link, a FIFO or device there, or a place that cannot take a new file, is an
    InputError naming ``field``. Commands call it before their work, so a refusal costs nothing."""
    dest = Path(path)
    if dest.is_symlink():
        raise InputError(str(dest), field, "is a symbolic link; give the file itself")
    if dest.is_dir():
        raise InputError(str(dest), field, "is a folder; give a file path")
    if dest.exists() and not dest.is_file():
        raise InputError(str(dest), field, "exists and is not a regular file")
    if dest.exists() and replace is False:
        raise InputError(str(dest), field, "exists; pass --replace to overwrite it")
    _check_parent(dest, field)
    return dest


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):
        return False


def _missing_parents(path: Path) -> list[Path]:
    """The folders above ``path`` that do not exist yet, outermost first."""
    missing = []
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    return missing[::-1]


@contextmanager
def writing_dir(path: str | os.PathLike[str], replace: bool = False, field: str = "--out") -> Iterator[Path]:
    """Write a folder as a unit: yield an empty temp folder beside ``path`` (missing parents are created);
    on success it takes ``path``'s place whole, on any exception (a full disk, Ctrl-C, SIGTERM) nothing is
    left, not even the parents it created, and an old folder is untouched. ``replace`` and ``field`` as in
    check_dir_target, checked again when the folder is swapped in (replacing_dir)."""
    dest = check_dir_target(path, replace, field)
    created = _missing_parents(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with replacing_dir(dest, replace, field) as tmp:
            yield tmp
    except BaseException:
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
