"""The generated block of a validation doc: the part between two marker lines that a script rewrites whole.

scripts/gpu_validation.py, scripts/silicon_validation.py and scripts/headline_matrix.py write their tables into a
doc between ``<!-- generated -->``-style markers; the tests read the same block back to find a stale doc.
"""

from __future__ import annotations

from pathlib import Path


def replace_block(doc: Path, text: str, block: str, start: str, end: str) -> str:
    """``text`` (the doc's) with the part between ``start`` and ``end`` replaced by ``block``; a SystemExit naming
    the doc when a marker is missing (a script's error, before anything is written)."""
    head, found, rest = text.partition(start)
    _, found_end, tail = rest.partition(end)
    if not (found and found_end):
        raise SystemExit(f"{doc}: markers {start!r} and {end!r} not found")
    return f"{head}{start}\n{block}\n{end}{tail}"
