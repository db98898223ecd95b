"""Peak memory of `tripath simulate --out` at a million requests, and of an overloaded run, in fresh processes.

    .venv/bin/python benchmarks/bench_memory.py [ROOT ...] [--requests 1000000] [--load 0.8]
        [--saturated 300000] [--overload 1.5] [--skip-in-memory]

Not a timed test: each row is one child process, its peak resident memory read from the kernel (os.wait4's
ru_maxrss), its CPU time (user + system) alongside for scale. Rows, per case:

- ``simulate --out``: the CLI of this checkout (records streamed to disk where the fast path serves the run:
  tripath/simulator/runner.py simulate_recording), then of each ROOT (an older checkout, e.g. one made by
  ``git archive HEAD | tar -x -C /tmp/base``; run with ROOT as working directory, so ROOT's tripath/ is imported);
- ``in memory``: this checkout's ``simulate()`` + ``summary()`` + ``write_outputs()`` (every record held, as the
  app and the planners run; what the CLI did before records were streamed), unless --skip-in-memory;
- ``streaming loop``: benchmarks/bench_simulator.py --stream N in the same checkouts (the loop alone, arrays in
  hand; it prints how much the peak RSS grew during the run).

Cases: --requests requests at --load x the saturation estimate, and --saturated requests at --overload x (the
waiting queue grows without bound). The scenario is quickstart's (Azure conversation lengths, seed profile,
1 GPU, continuous batching) with those counts, one replication, seed 0. The digests of records.csv and
summary.json show the rows wrote the same files (an older checkout's summary lacks the "overload" section, so
summaries are compared without it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

IN_MEMORY = """
import sys
from pathlib import Path
from tripath.profile.profile import resolve_profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import load_scenario
from tripath.simulator.summary import summary, write_outputs
scenario = load_scenario(sys.argv[1])
result = simulate(scenario, resolve_profile(scenario.profile), seed=0, replications=1)
write_outputs(result, Path(sys.argv[2]), summary(result))
"""


def scenario_text(requests: int, load: float) -> str:
    """quickstart.toml with ``requests`` requests at ``load`` x the saturation estimate."""
    text = (REPO / "data" / "scenarios" / "quickstart.toml").read_text(encoding="utf-8")
    text = re.sub(r"(?m)^requests = \d+$", f"requests = {requests}", text, count=1)
    return re.sub(r"(?m)^load_fraction = [0-9.]+", f"load_fraction = {load}", text, count=1)


def measured(argv: list[str], cwd: Path) -> tuple[float, float, str]:
    """(peak RSS MiB, CPU s, stdout) of one child process run in ``cwd`` with ``cwd``'s tripath first on its path,
    from wait4's usage (which reaps it)."""
    env = os.environ | {"PYTHONPATH": str(cwd)}  # a script's own folder comes first otherwise, then the install
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, problem = out.read().decode(), err.read().decode()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} (in {cwd}) exited {child.returncode}: {problem[-2000:]}")
    return usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, text  # ru_maxrss is KiB on Linux


def digests(folder: Path) -> tuple[str, str]:
    """SHA-256 (16 hex) of records.csv and of summary.json without its "overload" section. The file is read a MiB
    at a time: a child started later counts this process's peak RSS in its own (Linux keeps the high-water mark of
    the memory it replaced at exec), so this process must stay small."""
    digest = hashlib.sha256()
    with open(folder / "records.csv", "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    records = digest.hexdigest()[:16]
    report = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    report.pop("overload", None)
    return records, hashlib.sha256(json.dumps(report, sort_keys=True).encode()).hexdigest()[:16]


def overload_of(folder: Path) -> str:
    section = json.loads((folder / "summary.json").read_text(encoding="utf-8")).get("overload")
    if section is None:
        return "-"
    return (f"peak {section['peak_waiting']['mean']:,.0f} waiting, growth "
            f"{section['queue_growth_per_arrival']['mean']:.0%}")


def row(case: str, label: str, peak: float, cpu: float, files: tuple[str, str] | None, extra: str) -> None:
    shown = "" if files is None else f"{files[0]}  {files[1]}"
    print(f"{case:<26}{label:<44}{peak:>9,.0f}{cpu:>9.1f}  {shown:<36}{extra}", flush=True)


def run_case(case: str, scenario: Path, roots: list[Path], in_memory: bool, work: Path) -> None:
    python = sys.executable
    for index, root in enumerate(roots):
        out = work / f"out-{index}"
        argv = [python, "-m", "tripath.cli.main", "simulate", str(scenario), "--replications", "1", "--seed", "0",
                "--out", str(out), "--json"]
        peak, cpu, _ = measured(argv, root)
        label = "simulate --out" + (" (this checkout)" if root == REPO else f" ({root})")
        row(case, label, peak, cpu, digests(out), overload_of(out))
        shutil.rmtree(out)
        if index == 0 and in_memory:
            out = work / "out-memory"
            out.mkdir()
            peak, cpu, _ = measured([python, "-c", IN_MEMORY, str(scenario), str(out)], REPO)
            row(case, "in memory: simulate + write_outputs (this)", peak, cpu, digests(out), overload_of(out))
            shutil.rmtree(out)


def streaming_loop(case: str, requests: int, load: float, roots: list[Path]) -> None:
    for root in roots:
        argv = [sys.executable, "benchmarks/bench_simulator.py", "--sizes", "--stream", str(requests),
                "--load", str(load)]
        peak, cpu, text = measured(argv, root)
        grew = re.search(r"peak RSS grew ([0-9.,]+) MiB.*?at most ([0-9,]+) requests held", text)
        extra = "" if grew is None else f"RSS grew {grew.group(1)} MiB during the run, {grew.group(2)} held at once"
        label = "streaming loop" + (" (this checkout)" if root == REPO else f" ({root})")
        row(case, label, peak, cpu, None, extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="*", type=Path, help="older checkouts to measure beside this one")
    parser.add_argument("--requests", type=int, default=1_000_000, help="requests of the first case (0: skip)")
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--saturated", type=int, default=300_000, help="requests of the overloaded case (0: skip)")
    parser.add_argument("--overload", type=float, default=1.5, help="load of the overloaded case")
    parser.add_argument("--skip-in-memory", action="store_true", help="leave out this checkout's in-memory row")
    args = parser.parse_args()
    roots = [REPO, *(root.resolve() for root in args.roots)]
    print(f"{'case':<26}{'path':<44}{'peak MiB':>9}{'CPU s':>9}  {'records.csv       summary.json':<36}overload")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        cases = [(n, load) for n, load in ((args.requests, args.load), (args.saturated, args.overload)) if n]
        for requests, load in cases:
            scenario = work / f"bench-{requests}-{load}.toml"
            scenario.write_text(scenario_text(requests, load), encoding="utf-8")
            case = f"{requests:,} @ {load} x sat"
            run_case(case, scenario, roots, not args.skip_in_memory, work)
            if load > 1.0:
                streaming_loop(case, requests, load, roots)


if __name__ == "__main__":
    main()
