"""One error type for bad user input, so the CLI can exit 2 with a message that names file and field."""

from __future__ import annotations

import errno
import os
import stat


class InputError(ValueError):
    """A scenario, profile, trace or checkpoint is malformed or missing.

    The message always names the file (when there is one) and the field, e.g.
    ``data/scenarios/x.toml: workload.arrival.rate_per_s: must be > 0, got -1``.
    """

    def __init__(self, source: str | None, field: str | None, problem: str) -> None:
        # args are the three parts, so a copy made as type(err)(*err.args) (SimPy re-raising a process's
        # error, pickling across a process pool) is the same error
        super().__init__(source, field, problem)
        self.source = source
        self.field = field
        self.problem = problem

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.source, self.field) if part)
        return f"{where}: {self.problem}" if where else self.problem


def shown(value: object, limit: int = 40) -> str:
    """A user's value for a one-line message: its repr cut to ``limit`` characters (a string may be a megabyte
    long, an integer thousands of digits; past Python's 4,300-digit limit even repr refuses one)."""
    try:
        text = repr(value)
    except ValueError:
        return "an integer of more than 4,300 digits"
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


# strerror is terse ("No space left on device"); these say what the user can do about it
_OS_HINTS = {
    errno.ENOSPC: "the disk is full",
    errno.EROFS: "the filesystem is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "is a folder, not a file",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.EEXIST: "already exists",
    errno.ENOTEMPTY: "folder is not empty",
    errno.EMFILE: "too many open files",
    errno.ENOENT: "not found",
    errno.EDQUOT: "disk quota exceeded",
}


def describe_os_error(err: OSError) -> str:
    """One line for an OSError: the path(s) it names, then what went wrong (errno's plain meaning)."""
    paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
    reason = _OS_HINTS.get(err.errno or -1) or err.strerror or str(err) or type(err).__name__
    detail = err.strerror or ""
    if err.errno is not None and detail.startswith(os.strerror(err.errno)):  # keep only what it adds
        detail = detail[len(os.strerror(err.errno)):].strip().removeprefix("(").removesuffix(")")
    text = f"{reason} ({detail})" if detail and detail.lower() != reason.lower() else reason
    return f"{' -> '.join(paths)}: {text}" if paths else text


# what a path is, when it is not a regular file (stat's file type bits)
_NOT_REGULAR = ((stat.S_ISDIR, "is a folder, not a file"),
                (stat.S_ISFIFO, "is a FIFO (named pipe), not a regular file"),
                (stat.S_ISCHR, "is a character device, not a regular file"),
                (stat.S_ISBLK, "is a block device, not a regular file"),
                (stat.S_ISSOCK, "is a socket, not a regular file"))


def check_regular_file(path: object, field: str | None = None) -> None:
    """Refuse ``path`` unless it is a regular file (or a link to one), before anything opens it for reading.

    Opening a FIFO blocks until a writer comes, a character device (/dev/zero, /dev/stdin) may never end and a
    folder or socket cannot be read: each is one InputError naming the file (and ``field``), never a hang. A path
    that cannot be looked at (missing, no permission) passes: the caller's open reports it in the caller's words.
    """
    source = str(path)
    try:
        mode = os.stat(source).st_mode
    except (OSError, ValueError):  # ValueError: a NUL byte in the path, which open refuses too
        return
    if not stat.S_ISREG(mode):
        problem = next((text for test, text in _NOT_REGULAR if test(mode)), "is not a regular file")
        raise InputError(source, field, f"{problem}: refused without reading it")


def read_input_text(path: object, missing: str, unreadable: str, max_bytes: int | None = None) -> str:
    """The UTF-8 text of a user's input file; a missing or unreadable one is an InputError naming the file
    (``missing``: the message when it does not exist; ``unreadable``: the prefix of the OS or decoding error;
    ``max_bytes``: a larger file is refused without reading it whole). Newlines are translated as in text mode."""
    source = str(path)
    check_regular_file(source)
    try:
        with open(source, "rb") as handle:
            data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise InputError(source, None, missing) from None
    except OSError as err:
        raise InputError(source, None, f"{unreadable}: {describe_os_error(err).removeprefix(source + ': ')}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise InputError(source, None, f"{unreadable}: larger than the limit of {max_bytes:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(source, None, f"{unreadable}: not UTF-8 text (byte {err.start}: "
                                       f"{data[err.start:err.start + 1]!r})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")
