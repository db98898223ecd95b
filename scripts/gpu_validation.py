"""Recompute the GPU validation tables of docs/gpu_validation.md from the shipped profiles.

    .venv/bin/python scripts/gpu_validation.py            # print the tables
    .venv/bin/python scripts/gpu_validation.py --write    # and rewrite the generated block of the doc

The block between the doc's ``<!-- generated -->`` and ``<!-- end generated -->`` markers is this script's output;
tests/planning/validation/test_tables.py recomputes it and fails when the doc is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tripath.planning.validation.doc_block import replace_block
from tripath.planning.validation.tables import render_tables

DOC = Path(__file__).resolve().parents[1] / "docs" / "gpu_validation.md"
START, END = "<!-- generated -->", "<!-- end generated -->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the generated block of {DOC.name}")
    args = parser.parse_args(argv)
    block = render_tables()
    print(block)
    if args.write:
        DOC.write_text(replace_block(DOC, DOC.read_text(encoding="utf-8"), block, START, END), encoding="utf-8")
        print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
