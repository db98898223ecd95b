"""The raw samples CSV beside a profile: append-only, so an interrupted job resumes where it stopped.

Each measured point is one row, written and fsynced before the next point starts, so a job
killed at any moment loses at most the point in flight, and a restart skips every point already
on disk (no point is measured twice, none is lost). A kill in the middle of a write leaves a last
line without its newline: ``SampleLog.open`` cuts it off before appending again.

A sidecar ``NAME.samples.meta`` holds the job's fingerprint (model, device, dtype, grid,
repetitions): resuming with other settings would mix incomparable numbers, so it is refused.
A new log writes both files with its first sample, not before: a job that fails before measuring
anything (a corrupt checkpoint, a bad flag) leaves no samples behind.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tripath.core.atomic import write_text
from tripath.core.errors import InputError, check_regular_file

HEADER = ("sweep", "layers", "x1", "x2", "median_ms", "min_ms", "max_ms", "reps")


@dataclass(frozen=True)
class Sample:
    """One measured point: ``layers`` decoder layers timed at inputs (x1, x2); times in ms."""

    sweep: str
    layers: int
    x1: int
    x2: int
    median_ms: float
    min_ms: float
    max_ms: float
    reps: int

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.sweep, self.layers, self.x1, self.x2)

    @classmethod
    def of(cls, sweep: str, layers: int, x1: int, x2: int, values: Sequence[float]) -> Sample:
        """The point from its repeated measurements (median, min, max, how many): the one way a sweep turns its
        timings into a row, so every sweep summarises its repetitions alike."""
        return cls(sweep, layers, x1, x2, statistics.median(values), min(values), max(values), len(values))

    @classmethod
    def constant(cls, sweep: str, layers: int, x1: int, x2: int, value: float, reps: int) -> Sample:
        """A point that is one number over ``reps`` trials (a count, an agreement): median = min = max."""
        v = float(value)
        return cls(sweep, layers, x1, x2, v, v, v, reps)

    def row(self) -> list[object]:
        return [self.sweep, self.layers, self.x1, self.x2, f"{self.median_ms:.6g}", f"{self.min_ms:.6g}",
                f"{self.max_ms:.6g}", self.reps]


def _sig6(x: float) -> float:
    return float(f"{x:.6g}")


def samples_path_for(profile_path: str | os.PathLike[str]) -> Path:
    """``data/profiles/NAME.json`` -> ``data/profiles/NAME.samples.csv``."""
    path = Path(profile_path)
    return path.with_name(f"{path.stem}.samples.csv")


def read_samples(path: str | os.PathLike[str]) -> list[Sample]:
    """Every complete row of a samples CSV (a torn last line, without its newline, is ignored)."""
    where = str(path)
    check_regular_file(where)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(where, None, "no such samples file") from None
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = list(csv.reader(text.splitlines()))
    if not rows or tuple(rows[0]) != HEADER:
        raise InputError(where, "header", f"must be {','.join(HEADER)}")
    out = []
    for i, row in enumerate(rows[1:], start=2):
        try:
            out.append(Sample(row[0], int(row[1]), int(row[2]), int(row[3]), float(row[4]), float(row[5]),
                              float(row[6]), int(row[7])))
        except (ValueError, IndexError) as err:
            raise InputError(where, f"line {i}", f"malformed sample row: {err}") from None
    return out


def meta_path_for(samples_path: str | os.PathLike[str]) -> Path:
    """``NAME.samples.csv`` -> ``NAME.samples.meta`` (not .json: every data/profiles/*.json is taken for a profile)."""
    path = Path(samples_path)
    return path.with_name(path.name.removesuffix(".csv") + ".meta")


class SampleLog:
    """Append-only writer over a samples CSV; ``done`` holds the keys already measured. ``meta`` is the
    fingerprint sidecar's text for a log not yet on disk (written with the first sample), else None."""

    def __init__(self, path: Path, handle: Any, samples: list[Sample], meta: str | None = None) -> None:
        self.path = path
        self._handle = handle
        self._meta = meta
        self.samples = samples
        self.done = {s.key for s in samples}

    @classmethod
    def open(cls, path: str | os.PathLike[str], fingerprint: dict[str, Any]) -> SampleLog:
        """Open (resuming) the log; refuse to resume one taken with other settings. A new log is created
        on disk by its first sample."""
        path = Path(path)
        meta_path = meta_path_for(path)
        wanted = json.dumps(fingerprint, indent=2, sort_keys=True) + "\n"
        if path.exists():
            # compare as JSON sees them (tuples come back as lists)
            if not meta_path.exists() or json.loads(meta_path.read_text(encoding="utf-8")) != json.loads(wanted):
                raise InputError(str(path), None, f"these samples were taken with other settings (see "
                                 f"{meta_path.name}); delete both files or choose another --out to start afresh")
            raw = path.read_bytes()
            if raw and not raw.endswith(b"\n"):  # killed mid-write: drop the torn line
                with open(path, "r+b") as handle:
                    handle.truncate(raw.rfind(b"\n") + 1)
            samples = read_samples(path)
            return cls(path, open(path, "a", encoding="utf-8", newline=""), samples)  # noqa: SIM115 (close())
        return cls(path, None, [], wanted)

    def _create(self, meta: str) -> None:
        """Put a new log on disk: the fingerprint sidecar, then the header (each atomically), open to append."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text(meta_path_for(self.path), meta)
        try:
            write_text(self.path, ",".join(HEADER) + "\n")
        except BaseException:  # a full disk: no sidecar without its samples
            meta_path_for(self.path).unlink(missing_ok=True)
            raise
        self._handle = open(self.path, "a", encoding="utf-8", newline="")  # noqa: SIM115 (closed by close())
        self._meta = None

    def append(self, sample: Sample) -> None:
        """Write one row and push it to disk before returning: the point survives any later kill."""
        if sample.key in self.done:
            raise ValueError(f"sample {sample.key} is already in {self.path}")
        # keep in memory exactly what a resumed job will read back (6 significant digits)
        sample = replace(sample, median_ms=_sig6(sample.median_ms), min_ms=_sig6(sample.min_ms),
                         max_ms=_sig6(sample.max_ms))
        if self._meta is not None:
            self._create(self._meta)
        try:
            csv.writer(self._handle, lineterminator="\n").writerow(sample.row())
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError as err:  # a full disk names no file: name the log (a torn row is cut off on resume)
            raise OSError(err.errno, err.strerror or str(err), str(self.path)) from None
        self.samples.append(sample)
        self.done.add(sample.key)

    def drop(self, prefixes: tuple[str, ...]) -> int:
        """Remove every row whose sweep name starts with one of ``prefixes`` (so the job measures that sweep
        afresh while the other sweeps' rows are kept); the CSV is rewritten atomically. Returns rows dropped."""
        if not prefixes:
            return 0
        kept = [s for s in self.samples if not s.sweep.startswith(prefixes)]
        dropped = len(self.samples) - len(kept)
        if dropped:
            self._handle.close()
            lines = [",".join(HEADER)] + [",".join(str(v) for v in s.row()) for s in kept]
            write_text(self.path, "\n".join(lines) + "\n")
            self._handle = open(self.path, "a", encoding="utf-8", newline="")  # noqa: SIM115 (closed by close())
            self.samples = kept
            self.done = {s.key for s in kept}
        return dropped

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()

    def __enter__(self) -> SampleLog:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # closing flushes what a failed append left in the buffer: that must not hide the error raised
            self.close()
        except OSError:
            pass
