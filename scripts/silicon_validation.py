"""tripath and aiconfigurator-core's estimator against the package's silicon sample (measured agg serving runs).

    .venv/bin/python scripts/silicon_validation.py            # simulate every covered row, print the MAPE table
    .venv/bin/python scripts/silicon_validation.py --write    # and write data/validation/silicon_rows.csv and
                                                              # the generated blocks of docs/silicon_validation.md
    .venv/bin/python scripts/silicon_validation.py --write --reuse   # simulate only the rows the CSV lacks

The method is tripath/planning/validation/silicon.py's docstring; tests/planning/validation/test_silicon.py
recomputes a sample of rows and the doc's tables and fails when either is stale. About 25 minutes on 2 processes.
``--reuse`` keeps the written line of every row whose id and profile it already holds (the answer for an unchanged
row and profile is the same: a fixed seed) and simulates the rest; the test's recomputed sample still checks it.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm import tqdm

from tripath.calibrate.aic.estimator import compiled
from tripath.planning.validation.doc_block import replace_block
from tripath.planning.validation.silicon import (
    COLUMNS,
    ROWS_CSV,
    EstimatorAnswer,
    SiliconRow,
    evaluate,
    load_rows,
    mape_table,
    not_covered_table,
    read_results,
    requests_for,
    write_results,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "silicon_validation.md"
START, END = "<!-- generated -->", "<!-- end generated -->"
UNCOVERED_START, UNCOVERED_END = "<!-- generated: not covered -->", "<!-- end generated: not covered -->"


def estimator_answer(row: SiliconRow) -> EstimatorAnswer:
    """The estimator's static answer for the row (tripath/planning/validation/silicon.py's docstring)."""
    from tripath.profile.catalog import MODELS

    est = compiled(MODELS[row.model].config_dir, row.hardware, row.backend, row.tp, row.weights, row.backend_version,
                   row.expert_parallel, row.attention_dp)
    ttft, tpot = est.static(row.concurrency, row.isl, row.osl)  # batch_size: per attention data-parallel rank
    return EstimatorAnswer(est.backend_version, ttft, tpot)


def evaluate_row(row: SiliconRow) -> dict[str, str]:
    """The row's output line: tripath's simulation beside the estimator's answer."""
    return evaluate(row, estimator_answer(row))


def cost(row: SiliconRow) -> int:
    """Output tokens simulated for the row: the longest first, so two processes finish together."""
    return requests_for(row.users) * row.osl


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {ROWS_CSV.name} and {DOC.name}'s table")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--reuse", action="store_true", help=f"keep {ROWS_CSV.name}'s line of a row it holds with "
                        "the same profile; simulate only the others")
    args = parser.parse_args(argv)
    rows = load_rows()
    done: dict[str, dict[str, str]] = {}
    if args.reuse and ROWS_CSV.is_file():
        profiles = {r.id: r.profile for r in rows}
        done = {w["id"]: w for w in read_results() if profiles.get(w["id"]) == w["profile"]
                and set(w) == set(COLUMNS)}
    order = sorted((r for r in rows if r.id not in done), key=cost, reverse=True)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        answers = tqdm(pool.map(evaluate_row, order), total=len(order), desc="silicon rows", unit="row")
        done.update(zip((r.id for r in order), answers, strict=True))
    results = [done[r.id] for r in rows]
    table, uncovered = mape_table(results), not_covered_table()
    print(table, uncovered, sep="\n\n")
    if args.write:
        write_results(results)
        text = replace_block(DOC, DOC.read_text(encoding="utf-8"), table, START, END)
        text = replace_block(DOC, text, uncovered, UNCOVERED_START, UNCOVERED_END)
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {ROWS_CSV} and {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
