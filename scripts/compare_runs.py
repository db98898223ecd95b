"""Run every shipped scenario on every shipped profile and compare the outputs with another checkout's.

A refactor that moves code must not move a number: same seed, same ``records.csv`` and
``summary.json``, byte for byte. ``--write DIR`` runs the grid through this checkout's CLI and
writes one folder per (scenario, profile) pair (a pair the CLI refuses keeps its exit status and
error line instead); ``--compare A B`` lists every pair whose files differ.

    python scripts/compare_runs.py --write /tmp/before            # in the old checkout
    python scripts/compare_runs.py --write /tmp/after             # in this one
    python scripts/compare_runs.py --compare /tmp/before /tmp/after --renames docs/module_moves.md

``--renames`` applies a table of moved source paths (``| `old.py` | `new.py` |`` rows) to the first
folder's text before comparing: a summary cites the code path of an estimate, and a move renames it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ("records.csv", "summary.json", "exit.txt")


def grid(root: Path) -> list[tuple[Path, str]]:
    """Every (scenario file, profile key) pair shipped under ``root/data``."""
    scenarios = sorted((root / "data" / "scenarios").rglob("*.toml"))
    profiles = sorted(p.stem for p in (root / "data" / "profiles").glob("*.json"))
    return [(s, p) for s in scenarios for p in profiles]


def pair_name(root: Path, scenario: Path, profile: str) -> str:
    rel = scenario.relative_to(root / "data" / "scenarios").with_suffix("")
    return f"{str(rel).replace('/', '--')}@{profile}"


def run_pair(root: Path, scenario: Path, profile: str, out: Path, replications: int) -> None:
    """Simulate one pair through the CLI in a fresh process; keep its outputs and exit status."""
    target = out / pair_name(root, scenario, profile)
    target.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "tripath.cli.main", "simulate", str(scenario), "--profile", profile,
           "--seed", "0", "--replications", str(replications), "--out", str(target)]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    # The checkout's own path is in file-naming errors: two checkouts differ there and nowhere else.
    last = proc.stderr.strip().splitlines()[-1:] if proc.returncode else []
    err = [line.replace(str(root), "<root>") for line in last]
    (target / "exit.txt").write_text(f"{proc.returncode}\n" + "".join(line + "\n" for line in err))


def write(out: Path, replications: int, workers: int) -> int:
    pairs = grid(ROOT)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i, _ in enumerate(pool.map(lambda sp: run_pair(ROOT, sp[0], sp[1], out, replications), pairs), 1):
            print(f"\r{i}/{len(pairs)} pairs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return 0


def read_renames(table: Path | None) -> list[tuple[str, str]]:
    """The ``| `old` | `new` |`` rows of a markdown table, longest old path first."""
    if table is None:
        return []
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", table.read_text(encoding="utf-8"), re.M)
    return sorted(rows, key=lambda r: -len(r[0]))


def renamed(data: bytes, renames: list[tuple[str, str]]) -> bytes:
    if not renames:
        return data
    pattern = re.compile("|".join(re.escape(old) for old, _ in renames).encode())
    lookup = {old.encode(): new.encode() for old, new in renames}
    return pattern.sub(lambda m: lookup[m.group(0)], data)


def compare(a: Path, b: Path, renames: list[tuple[str, str]]) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    differ = []
    for name in names:
        for f in OUTPUTS:
            fa, fb = a / name / f, b / name / f
            if fa.exists() != fb.exists() or (fa.exists() and renamed(fa.read_bytes(), renames) != fb.read_bytes()):
                differ.append(f"{name}/{f}")
    ran = sum((a / n / "records.csv").exists() for n in names)
    print(f"{len(names)} pairs ({ran} simulated, {len(names) - ran} refused with the same error); "
          f"{len(differ)} files differ")
    for d in differ:
        print(f"  differs: {d}")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, metavar="DIR", help="run the grid here and write DIR/<pair>/")
    group.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="compare two --write folders")
    parser.add_argument("--renames", type=Path, metavar="TABLE",
                        help="with --compare: a markdown table of moved source paths applied to A first")
    parser.add_argument("--replications", type=int, default=2, help="seeded replications per pair (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="pairs run at once (default 2)")
    args = parser.parse_args(argv)
    if args.write:
        return write(args.write, args.replications, args.workers)
    return compare(*args.compare, read_renames(args.renames))


if __name__ == "__main__":
    sys.exit(main())
