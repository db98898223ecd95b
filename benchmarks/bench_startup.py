"""Whole-process wall time of `tripath simulate` (interpreter start, imports, run), one or more checkouts.

    .venv/bin/python benchmarks/bench_startup.py [ROOT ...] [--requests 10000] [--replications 2] [--repeats 5]
    .venv/bin/python benchmarks/bench_startup.py [ROOT ...] --scenario benchmarks/arxiv-10k.toml --replications 1

Each ROOT is a checkout (default: this one; e.g. an older commit's ``git worktree add /tmp/base REV``):
the command runs with ROOT as its working directory, so ROOT's tripath/ is imported. The checkouts
alternate ``--repeats`` times on the same scenario (quickstart with ``--requests`` requests, or ``--scenario``:
benchmarks/arxiv-10k.toml is the 10,000-request arXiv replay); reported are the best and the median wall
time, the import time of the best run's imports (``-X importtime``, a run of its own), its ``--top`` slowest
top-level imports (cumulative: what the command's own imports pulled in) and a SHA-256 of the printed summary,
equal across checkouts when their output is (a checkout of the flat layout before the package regrouping cites
other source paths in it).

Byte-code caching is on, as for a user (an installed package has its .pyc files): the children run without
PYTHONDONTWRITEBYTECODE, their .pyc files under a temporary PYTHONPYCACHEPREFIX (not in the checkouts), after
one untimed run per checkout that writes them. (Without them every import compiles its source: tripath's own
80 modules took ~0.36 s instead of ~0.14 s on the 2-core machine.)

A checkout that does not ship the ``vidur-arxiv`` trace (before it was added) reads the same lengths from an
Azure-format copy made here (every timestamp equal; bootstrapped lengths ignore arrivals), so every checkout
draws the same requests: the digests say so.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


VIDUR_ARXIV = "vidur-arxiv"


def scenario_text(requests: int) -> str:
    text = (REPO / "data" / "scenarios" / "quickstart.toml").read_text(encoding="utf-8")
    return re.sub(r"(?m)^requests = \d+$", f"requests = {requests}", text, count=1)


def scenario_for(root: Path, text: str, tmp: Path) -> Path:
    """The scenario file ``root`` runs: ``text``, with the arXiv lengths as an Azure-format copy where ``root``
    does not ship the vidur-arxiv trace (module docstring)."""
    traces = root / "tripath" / "simulator" / "scenario" / "traces.py"
    name = "scenario.toml"
    if f'"{VIDUR_ARXIV}"' in text and f'"{VIDUR_ARXIV}"' not in traces.read_text(encoding="utf-8"):
        copy = tmp / "arxiv-azure-format.csv"
        if not copy.exists():
            source = next((REPO / "data" / "traces" / VIDUR_ARXIV).glob("*.csv"))
            with source.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.reader(fh))[1:]
            lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
            lines += [f"2023-11-16 18:15:46.6805900,{row[0]},{row[1]}" for row in rows if row]
            copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
        text = text.replace(f'"{VIDUR_ARXIV}"', json.dumps(str(copy)))
        name = "scenario-azure-format.toml"
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return path


def command(root: Path, scenario: Path, replications: int) -> list[str]:
    """The simulate command line in ``root``: ``tripath.cli.main``, or ``tripath.cli`` in the flat layout."""
    module = "tripath.cli.main" if (root / "tripath" / "cli" / "main.py").is_file() else "tripath.cli"
    return [sys.executable, "-m", module, "simulate", str(scenario), "--replications", str(replications), "--json"]


def child_env(tmp: Path) -> dict[str, str]:
    """The children's environment: byte-code cached under ``tmp`` (module docstring)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


def timed(root: Path, argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """(wall seconds, SHA-256 of stdout) of one run in ``root``."""
    start = time.perf_counter()
    out = subprocess.run(argv, cwd=root, capture_output=True, check=True, env=env).stdout
    return time.perf_counter() - start, hashlib.sha256(out).hexdigest()[:16]


def import_seconds(root: Path, argv: list[str], env: dict[str, str]) -> tuple[float, list[tuple[float, str]]]:
    """Total of -X importtime's top-level (cumulative) entries, in seconds, and those entries, slowest first."""
    err = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=root, capture_output=True, text=True,
                         check=True, env=env).stderr
    top = [(int(m.group(1)) / 1e6, m.group(2))
           for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \| (\S+)", err, re.M)]
    return sum(seconds for seconds, _ in top), sorted(top, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="*", type=Path, default=[REPO], help="checkouts to time (default: this one)")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--replications", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scenario", type=Path, default=None,
                        help="a scenario TOML to run instead of quickstart with --requests requests")
    parser.add_argument("--top", type=int, default=8, help="slowest top-level imports shown per checkout")
    args = parser.parse_args()
    text = scenario_text(args.requests) if args.scenario is None else args.scenario.read_text(encoding="utf-8")
    what = f"quickstart with {args.requests:,} requests" if args.scenario is None else str(args.scenario)
    with tempfile.TemporaryDirectory(prefix="tripath-startup-") as tmp:
        argvs = {root: command(root.resolve(), scenario_for(root.resolve(), text, Path(tmp)), args.replications)
                 for root in args.roots}
        times: dict[Path, list[float]] = {root: [] for root in args.roots}
        digests: dict[Path, set[str]] = {root: set() for root in args.roots}
        env = child_env(Path(tmp))
        for root in args.roots:  # writes the byte-code caches
            timed(root.resolve(), argvs[root], env)
        for _ in range(args.repeats):
            for root in args.roots:
                seconds, digest = timed(root.resolve(), argvs[root], env)
                times[root].append(seconds)
                digests[root].add(digest)
        print(f"tripath simulate, {what}, {args.replications} replications, "
              f"best / median of {args.repeats} (wall s), alternating")
        first = min(times[args.roots[0]])
        for root in args.roots:
            imports, slowest = import_seconds(root.resolve(), argvs[root], env)
            print(f"  {root}: {min(times[root]):.3f} / {statistics.median(times[root]):.3f} s "
                  f"({min(times[root]) / first:.2f} x the first's best), imports {imports:.3f} s, "
                  f"output {', '.join(sorted(digests[root]))}")
            if args.top > 0:
                print("    slowest imports: " + ", ".join(f"{name} {seconds:.3f}" for seconds, name in
                                                          slowest[:args.top]))


if __name__ == "__main__":
    main()
