"""The seed's decision matrix recomputed on the measured-kernel A100/H100 profiles of LLaMA-2-70B and Llama-3.1-70B.

    .venv/bin/python scripts/headline_matrix.py            # print the markdown table (a few minutes on 2 cores)
    .venv/bin/python scripts/headline_matrix.py --write    # and rewrite docs/planning.md's generated block

Each column is ``tripath matrix --profile NAME`` (seed 0, one replication, the cells' own request counts); the
table lists each row's recommendation per profile and the SLA margin it has, and the seed's claim beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tripath.planning.executor import make_executor
from tripath.planning.matrix import decision_matrix
from tripath.planning.validation.doc_block import replace_block
from tripath.profile.profile import resolve_profile

DOC = Path(__file__).resolve().parents[1] / "docs" / "planning.md"
START, END = "<!-- headline -->", "<!-- end headline -->"
PROFILES = ("aic-llama2-70b-tp2-a100", "aic-llama2-70b-tp2-h100", "aic-llama3.1-70b-tp4-a100",
            "aic-llama3.1-70b-tp4-h100")


def render(workers: int) -> str:
    executor = make_executor("local", workers)
    matrices = [decision_matrix(resolve_profile(name), executor=executor) for name in PROFILES]
    header = "| row (GPUs as the seed counts them) | the seed recommends | " + " | ".join(
        f"`{name}`" for name in PROFILES) + " |"
    lines = [header, "|" + "---|" * (2 + len(PROFILES))]
    for i, cell in enumerate(matrices[0].cells):
        entries = []
        for m in matrices:
            c = m.cells[i]
            chosen = c.chosen
            margin = None if chosen is None or chosen.outcome is None else chosen.outcome.data.get("sla_margin")
            text = c.recommended or (f"none meets; closest {chosen.candidate.name}" if chosen else "none")
            entries.append(f"{text} ({c.gpus} GPUs{'' if margin is None else f', margin {margin:+.0%}'})")
        lines.append(f"| {cell.scenario} | {cell.seed_recommends} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the generated block of {DOC.name}")
    parser.add_argument("--workers", type=int, default=2, help="local pool size")
    args = parser.parse_args(argv)
    block = render(args.workers)
    print(block)
    if args.write:
        DOC.write_text(replace_block(DOC, DOC.read_text(encoding="utf-8"), block, START, END), encoding="utf-8")
        print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
