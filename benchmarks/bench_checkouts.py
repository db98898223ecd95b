"""The simulator's fast path in two checkouts, timed in one run: is this checkout slower than another?

    .venv/bin/python benchmarks/bench_checkouts.py BASE [--sizes 10000 100000] [--repeats 3]

BASE is another checkout (e.g. ``git worktree add /tmp/base REV``). Each side runs its own
``benchmarks/bench_simulator.py --no-reference`` in a fresh process with its own tree first on
``sys.path``, the two sides alternating ``--repeats`` times; the best wall time per size is reported with
the ratio BASE / this checkout (above 1: this checkout is faster).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def fast_seconds(root: Path, sizes: list[int]) -> dict[int, float]:
    """{size: fast-path wall seconds} from one run of ``root``'s bench_simulator.py."""
    argv = [sys.executable, str(root / "benchmarks" / "bench_simulator.py"), "--no-reference",
            "--sizes", *map(str, sizes)]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=True).stdout
    found = re.findall(r"^([\d,]+) requests .*?\n\s+fast\s+([\d.]+) s", out, re.M)
    return {int(n.replace(",", "")): float(s) for n, s in found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="the other checkout")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "this": REPO}
    best: dict[str, dict[int, float]] = {name: {} for name in sides}
    for i in range(args.repeats):
        for name, root in sides.items():
            for size, seconds in fast_seconds(root, args.sizes).items():
                best[name][size] = min(seconds, best[name].get(size, float("inf")))
        print(f"\r{i + 1}/{args.repeats} rounds", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(f"fast path, best of {args.repeats} alternating runs (wall s): base {sides['base']}, this {REPO}")
    for size in args.sizes:
        b, t = best["base"][size], best["this"][size]
        print(f"  {size:>9,} requests: base {b:.3f} s, this {t:.3f} s, ratio base/this {b / t:.2f}")


if __name__ == "__main__":
    main()
