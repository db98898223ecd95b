"""Whole-process wall time of `tripath simulate` (interpreter start, imports, run), one or more checkouts.

    .venv/bin/python benchmarks/bench_startup.py [ROOT ...] [--requests 10000] [--replications 2] [--repeats 5]

Each ROOT is a checkout (default: this one; e.g. an older commit's ``git worktree add /tmp/base REV``):
the command runs with ROOT as its working directory, so ROOT's tripath/ is imported. The checkouts
alternate ``--repeats`` times on the same scenario (quickstart with ``--requests`` requests); reported are
the best and the median wall time, the import time of the best run's imports (``-X importtime``, a run
of its own) and a SHA-256 of the printed summary, equal across checkouts when their output is (a checkout
of the flat layout before the package regrouping cites other source paths in it).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def scenario_text(requests: int) -> str:
    text = (REPO / "data" / "scenarios" / "quickstart.toml").read_text(encoding="utf-8")
    return re.sub(r"(?m)^requests = \d+$", f"requests = {requests}", text, count=1)


def command(root: Path, scenario: Path, replications: int) -> list[str]:
    """The simulate command line in ``root``: ``tripath.cli.main``, or ``tripath.cli`` in the flat layout."""
    module = "tripath.cli.main" if (root / "tripath" / "cli" / "main.py").is_file() else "tripath.cli"
    return [sys.executable, "-m", module, "simulate", str(scenario), "--replications", str(replications), "--json"]


def timed(root: Path, argv: list[str]) -> tuple[float, str]:
    """(wall seconds, SHA-256 of stdout) of one run in ``root``."""
    start = time.perf_counter()
    out = subprocess.run(argv, cwd=root, capture_output=True, check=True).stdout
    return time.perf_counter() - start, hashlib.sha256(out).hexdigest()[:16]


def import_seconds(root: Path, argv: list[str]) -> float:
    """Total of -X importtime's top-level (cumulative) entries, in seconds."""
    err = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=root, capture_output=True, text=True,
                         check=True).stderr
    top = [int(m.group(1)) for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \| \S", err, re.M)]
    return sum(top) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="*", type=Path, default=[REPO], help="checkouts to time (default: this one)")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--replications", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tripath-startup-") as tmp:
        scenario = Path(tmp) / "startup.toml"
        scenario.write_text(scenario_text(args.requests), encoding="utf-8")
        argvs = {root: command(root.resolve(), scenario, args.replications) for root in args.roots}
        times: dict[Path, list[float]] = {root: [] for root in args.roots}
        digests: dict[Path, set[str]] = {root: set() for root in args.roots}
        for _ in range(args.repeats):
            for root in args.roots:
                seconds, digest = timed(root.resolve(), argvs[root])
                times[root].append(seconds)
                digests[root].add(digest)
        print(f"tripath simulate, quickstart with {args.requests:,} requests, {args.replications} replications, "
              f"best / median of {args.repeats} (wall s), alternating")
        for root in args.roots:
            print(f"  {root}: {min(times[root]):.3f} / {statistics.median(times[root]):.3f} s, "
                  f"imports {import_seconds(root.resolve(), argvs[root]):.3f} s, "
                  f"output {', '.join(sorted(digests[root]))}")


if __name__ == "__main__":
    main()
