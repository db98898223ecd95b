"""The measured records and steps of an engine replay as CSV, written atomically.

``write_serve_outputs`` writes the records and the steps of one replay as one set (both or neither).
The replay itself (PromptSource, serve) is tripath/engine/workload_replay.py; the ``tripath serve`` command
that drives both is tripath/cli/serve.py.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import IO

from tripath.core.atomic import AtomicFile, commit_all
from tripath.core.records import RequestRecord, write_records
from tripath.engine.step_record import StepRecord

Table = tuple[list[str], list[list[object]]]


def _records_csv(records: list[RequestRecord]) -> Callable[[IO[str]], None]:
    """The replay's records as the simulator's records.csv (core.records.write_records, one replication: 0), so a
    served and a simulated run are read and compared by the same columns."""
    return lambda handle: write_records(handle, [records])


def _table_csv(table: Table) -> Callable[[IO[str]], None]:
    """``table`` (a header, then its rows) as CSV."""
    def write(handle: IO[str]) -> None:
        writer = csv.writer(handle)
        writer.writerow(table[0])
        writer.writerows(table[1])
    return write


def _steps_table(steps: list[StepRecord]) -> Table:
    """One row per step; with no steps, the header of a plain StepRecord (its per-request tuples left out)."""
    names = (list(steps[0].to_dict()) if steps
             else [f.name for f in fields(StepRecord) if not str(f.type).startswith("tuple")])
    return names, [[s.to_dict()[n] for n in names] for s in steps]


def _unwritten_csv(path: Path, write: Callable[[IO[str]], None]) -> AtomicFile:
    """``write`` run onto a temp file beside ``path`` (missing folders created), not yet committed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    file = AtomicFile(path)
    with file.writing() as handle:
        write(handle)
    return file


def write_records_csv(records: list[RequestRecord], path: str | os.PathLike) -> None:
    """The records of a replay as one CSV file, written atomically."""
    commit_all([_unwritten_csv(Path(path), _records_csv(records))])


def write_serve_outputs(records: list[RequestRecord], out: str | os.PathLike, steps: list[StepRecord],
                        steps_out: str | os.PathLike | None) -> None:
    """The records CSV at ``out`` and (when ``steps_out`` is given) the steps CSV as one set: both written to
    temp files, then installed together (core.atomic.commit_all). A full disk or any other failure leaves
    neither new file, and old files at both paths as they were: never new records beside stale steps."""
    files = [_unwritten_csv(Path(out), _records_csv(records))]
    try:
        if steps_out is not None:
            files.append(_unwritten_csv(Path(steps_out), _table_csv(_steps_table(steps))))
    except BaseException:
        files[0].discard()
        raise
    commit_all(files)
