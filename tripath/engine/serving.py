"""The measured records and steps of an engine replay as CSV, written atomically.

The replay itself (PromptSource, serve) lives in tripath/engine/workload_replay.py and is re-exported
here; the ``tripath serve`` command that drives both is tripath/cli/serve.py.
"""

from __future__ import annotations

import csv
import os
from dataclasses import fields
from pathlib import Path

from tripath.core.atomic import AtomicFile
from tripath.core.records import RequestRecord
from tripath.engine.step_record import StepRecord
from tripath.engine.workload_replay import EVAL_PROMPTS, PromptSource, ServeResult, serve

__all__ = ["EVAL_PROMPTS", "PromptSource", "ServeResult", "serve", "write_records_csv", "write_steps_csv"]


def _atomic_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with AtomicFile(path) as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def write_records_csv(records: list[RequestRecord], path: str | os.PathLike) -> None:
    names = [f.name for f in fields(RequestRecord)]
    _atomic_csv(Path(path), names, [[getattr(r, n) for n in names] for r in records])


def write_steps_csv(steps: list[StepRecord], path: str | os.PathLike) -> None:
    if steps:
        names = list(steps[0].to_dict())
        _atomic_csv(Path(path), names, [[s.to_dict()[n] for n in names] for s in steps])
