"""One error type for bad user input, so the CLI can exit 2 with a message that names file and field."""

from __future__ import annotations

import errno
import os


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


def read_input_text(path: object, missing: str, unreadable: str, max_bytes: int | None = None) -> str:
    """The UTF-8 text of a user's input file; a missing or unreadable one is an InputError naming the file
    (``missing``: the message when it does not exist; ``unreadable``: the prefix of the OS or decoding error;
    ``max_bytes``: a larger file is refused without reading it whole). Newlines are translated as in text mode."""
    source = str(path)
    try:
        if os.path.isdir(source):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), source)
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
