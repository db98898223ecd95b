"""Outputs are checked before the work and written whole or not at all (docs/cli_contract.md, "Output files and
folders"): a full disk leaves no temp file and names the target, every writing command refuses a bad target before
it works, SIGTERM and SIGHUP clean up like Ctrl-C, two writers of one folder never both win, and `serve` installs
its records and steps as one set.

Each case asserts the exit status, the one stderr line naming the file, and the state of the target: absent, or
the earlier set whole, with no `.NAME.*` temp file, temp folder or lock file beside it.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.inprocess import run_cli
from tests.cli.test_hardening import TINY
from tests.full_disk import full_disk, needs_dev_full
from tests.timing import slack
from tripath.core.data_dirs import REPO_ROOT

PROJECTED = "seed-llama2-70b-a100"  # a profile with a published roofline to project from

SERVED = """name = "served"
[workload]
requests = 3
[workload.arrival]
kind = "poisson"
rate_per_s = 40.0
[workload.prompt_tokens]
kind = "uniform"
low = 8
high = 24
[workload.output_tokens]
kind = "fixed"
value = 2
[batching]
max_batch_size = 4
max_batched_tokens = 256
"""


def _scenario(folder: Path, text: str = TINY) -> str:
    path = folder / "s.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _one_error_line(code: int, err: str, name: str, words: str) -> str:
    """Exit 2 and exactly one stderr line, naming ``name`` and saying ``words``; never a traceback."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tripath: error: "), err
    assert name in lines[0] and words in lines[0], err
    return lines[0]


def _listing(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder`` (hidden ones too): relative path -> bytes, None for a folder."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


def _must_not_run(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Make ``module.attr`` (the first step of a command's work) fail the command as a defect (exit 70): a
    refusal with exit 2 then shows the target was checked before the work."""
    module, _, attr = target.rpartition(".")

    def ran(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{target} ran: the output was not checked before the work")

    monkeypatch.setattr(importlib.import_module(module), attr, ran)


# --- every writing command checks its target before it works -------------------------------------------------

def _make(tmp_path: Path, spec: str) -> str:
    """``spec`` "dir:NAME" a folder, "full:NAME" a folder holding a file, "file:NAME" a file; returns its path."""
    kind, _, name = spec.partition(":")
    path = tmp_path / name
    if kind in ("dir", "full"):
        path.mkdir(parents=True)
        if kind == "full":
            (path / "kept.txt").write_text("earlier set")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("earlier file")
    return str(path)


BEFORE_WORK = [  # (id, target made first, argv with {t} the target and {s} a scenario, first step of the work,
    #              name in the error, words)
    ("calibrate-out-folder", "dir:p.json", ["calibrate", "--model-config", "tiny-mha", "--out", "{t}",
                                            "--no-progress"], "tripath.calibrate.job._measure", "p.json",
     "is a folder"),
    ("calibrate-samples-folder", "dir:p.samples.csv", ["calibrate", "--model-config", "tiny-mha", "--out",
                                                       "{d}/p.json", "--no-progress"],
     "tripath.calibrate.job._measure", "p.samples.csv", "is a folder"),
    ("simulate-out-full", "full:out", ["simulate", "{s}", "--out", "{t}"],
     "tripath.simulator.scenario.scenario.load_scenario", "out", "--replace"),
    ("serve-out-folder", "dir:r.csv", ["serve", "{s}", "--out", "{t}"],
     "tripath.simulator.scenario.scenario.load_scenario", "r.csv", "is a folder"),
    ("serve-steps-out-folder", "dir:steps", ["serve", "{s}", "--out", "{d}/r.csv", "--steps-out", "{t}"],
     "tripath.simulator.scenario.scenario.load_scenario", "steps", "is a folder"),
    ("serve-one-file-for-both", "file:r.csv", ["serve", "{s}", "--out", "{t}", "--steps-out", "{t}"],
     "tripath.simulator.scenario.scenario.load_scenario", "r.csv", "is the --out file too"),
    ("profile-project-out-folder", "dir:p.json", ["profile", "project", PROJECTED, "--to", "h200", "--out", "{t}"],
     "tripath.calibrate.published.projection.project_profile", "p.json", "is a folder"),
    ("profile-build-out-exists", "file:p.json", ["profile", "build", "--model", "llama-2-7b", "--gpu", "h200",
                                                 "--out", "{t}"],
     "tripath.calibrate.aic.estimator.installed_version", "p.json", "pass --replace"),
    ("profile-build-out-folder", "dir:p.json", ["profile", "build", "--model", "llama-2-7b", "--gpu", "h200",
                                                "--out", "{t}", "--replace"],
     "tripath.calibrate.aic.estimator.installed_version", "p.json", "is a folder"),
    ("profile-acceptance-out-folder", "dir:o.json", ["profile", "acceptance", "{d}/metrics.txt", "--task", "code",
                                                     "--out", "{t}"],
     "tripath.profile.vllm_metrics.read_acceptance", "o.json", "is a folder"),
    ("profile-plot-out-full", "full:plots", ["profile", "plot", "cpu-tiny", "--out", "{t}"],
     "tripath.profile.profile.load_profile", "plots", "--replace"),
    ("recommend-export-full", "full:exp", ["recommend", "--export", "{t}"],
     "tripath.planning.recommend.recommend", "exp", "--replace"),
    ("validate-out-full", "full:report", ["validate", "--out", "{t}"],
     "tripath.profile.profile.resolve_profile", "report", "--replace"),
]


@pytest.mark.parametrize(("made", "argv", "work", "name", "words"), [case[1:] for case in BEFORE_WORK],
                         ids=[case[0] for case in BEFORE_WORK])
def test_a_bad_output_target_is_refused_before_the_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: str,
                                                         argv: list[str], work: str, name: str, words: str) -> None:
    target = _make(tmp_path / "w", made)
    scenario = _scenario(tmp_path, SERVED if argv[0] == "serve" else TINY)
    before = _listing(tmp_path / "w")
    _must_not_run(monkeypatch, work)
    code, _, err = run_cli([a.format(t=target, s=scenario, d=tmp_path / "w") for a in argv])
    _one_error_line(code, err, name, words)
    assert _listing(tmp_path / "w") == before  # the earlier file or set, whole; nothing beside it


# --- a full disk: exit 2, one line naming the target, nothing new, an earlier set whole ----------------------------

def _simulate(scenario: str, out: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli(["simulate", scenario, "--replications", "1", "--json", "--out", str(out), *extra])


def _serve(scenario: str, out: Path, steps: Path) -> tuple[int, str, str]:
    return run_cli(["serve", scenario, "--preset", "tiny-mha", "--device", "cpu", "--threads", "1", "--seed", "1",
                    "--num-blocks", "64", "--block-size", "8", "--out", str(out), "--steps-out", str(steps)])


FULL_DISK = [  # (id, earlier outputs first, command, which target files the full disk hits, the one named)
    ("simulate-new-folder", False, "simulate", None, "out/"),
    ("simulate-replace-folder", True, "simulate", None, "out/"),
    ("serve-steps-new", False, "serve", "steps.csv", "steps.csv"),
    ("serve-steps-over-earlier", True, "serve", "steps.csv", "steps.csv"),
    ("serve-records-over-earlier", True, "serve", "records.csv", "records.csv"),
    ("profile-project", False, "project", None, "p.json"),
]


@needs_dev_full
@pytest.mark.parametrize(("earlier", "command", "hits", "named"), [case[1:] for case in FULL_DISK],
                         ids=[case[0] for case in FULL_DISK])
def test_a_full_disk_leaves_nothing_and_names_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          earlier: bool, command: str, hits: str | None,
                                                          named: str) -> None:
    work = tmp_path / "w"
    work.mkdir()
    scenario = _scenario(tmp_path, SERVED if command == "serve" else TINY)
    runs: dict[str, Callable[[], tuple[int, str, str]]] = {
        "simulate": lambda: _simulate(scenario, work / "out", "--replace"),
        "serve": lambda: _serve(scenario, work / "records.csv", work / "steps.csv"),
        "project": lambda: run_cli(["profile", "project", PROJECTED, "--to", "h200", "--out", str(work / "p.json")]),
    }
    if earlier:
        assert runs[command]()[0] == 0
    before = _listing(work)
    hit = full_disk(monkeypatch, (lambda name: True) if hits is None else (lambda name: name == hits))
    code, _, err = runs[command]()
    assert hit, "the full disk was never reached"
    line = _one_error_line(code, err, str(work / named), "the disk is full")
    assert ".tmp" not in line  # the target's name, never a temp name
    assert _listing(work) == before  # nothing new at all (not records without steps), the earlier set whole


# --- calibrate: a corrupt checkpoint leaves no samples ------------------------------------------------------------

def test_calibrate_on_a_corrupt_checkpoint_leaves_nothing(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes((REPO_ROOT / "data" / "models" / "tiny-target" / "config.json").read_bytes())
    (model / "model.safetensors").write_bytes(b"\x40\x00\x00\x00\x00\x00\x00\x00{not a header" + bytes(64))
    code, _, err = run_cli(["calibrate", "--model", str(model), "--out", str(tmp_path / "prof" / "p.json"),
                            "--no-progress"])
    _one_error_line(code, err, "model.safetensors", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no prof/, no p.samples.csv or .meta


# --- SIGTERM and SIGHUP: the same cleanup as Ctrl-C -----------------------------------------------------------------

# `tripath` with writing_dir held open once its folder is written (until the file HOLD_UNTIL appears; READY_AT
# marks the moment), so a signal lands while the temp folder beside --out exists, whatever the machine's speed
HELD = """
import os, sys, time
from contextlib import contextmanager
from pathlib import Path
from tripath.core import atomic

real = atomic.writing_dir

@contextmanager
def held(*args, **kwargs):
    with real(*args, **kwargs) as tmp:
        yield tmp
        Path(os.environ["READY_AT"] + str(os.getpid())).touch()
        while not os.path.exists(os.environ["HOLD_UNTIL"]):
            time.sleep(0.01)

atomic.writing_dir = held
from tripath.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _held(tmp_path: Path, argv: list[str], ignore_hup: bool = False) -> subprocess.Popen[str]:
    """Start HELD with the default signal actions (a shell's background job would ignore SIGINT), SIGHUP
    ignored with ``ignore_hup`` (as under nohup)."""
    def dispositions() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if ignore_hup:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), READY_AT=str(tmp_path / "ready."),
               HOLD_UNTIL=str(tmp_path / "go"))
    return subprocess.Popen([sys.executable, "-c", HELD, *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=dispositions)


def _wait_ready(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + slack(60)  # a hang guard: a tiny simulation takes seconds
    while len(list(tmp_path.glob("ready.*"))) < len(procs):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() < deadline, "the command never reached its output folder"
        time.sleep(0.02)


@pytest.mark.parametrize(("signum", "code", "words"), [
    (signal.SIGTERM, 130, "tripath: interrupted by SIGTERM"),
    (signal.SIGHUP, 130, "tripath: interrupted by SIGHUP"),
    (signal.SIGINT, 130, "tripath: interrupted"),  # Ctrl-C, for comparison
], ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_mid_write_leaves_no_folder(tmp_path: Path, signum: int, code: int, words: str) -> None:
    work = tmp_path / "w"
    work.mkdir()
    proc = _held(tmp_path, ["simulate", _scenario(tmp_path), "--replications", "1", "--out", str(work / "out")])
    _wait_ready(tmp_path, [proc])
    assert [p.name for p in work.iterdir() if p.name.startswith(".out.")], "no temp folder to clean up"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=slack(30))
    assert proc.returncode == code, err
    assert err.strip().splitlines() == [words]
    assert list(work.iterdir()) == []  # neither out nor .out.* (temp folder, lock)


def test_an_ignored_sighup_stays_ignored(tmp_path: Path) -> None:
    """Under nohup (SIGHUP ignored) the command carries on and writes its folder."""
    work = tmp_path / "w"
    work.mkdir()
    proc = _held(tmp_path, ["simulate", _scenario(tmp_path), "--replications", "1", "--out", str(work / "out")],
                 ignore_hup=True)
    _wait_ready(tmp_path, [proc])
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.2)
    (tmp_path / "go").touch()
    _, err = proc.communicate(timeout=slack(30))
    assert proc.returncode == 0, err
    assert sorted(p.name for p in work.iterdir()) == ["out"]
    assert sorted(p.name for p in (work / "out").iterdir()) == ["records.csv", "summary.json"]


# --- two writers of one --out -------------------------------------------------------------------------------------

@pytest.mark.parametrize("replace", [False, True], ids=["no-replace", "replace"])
def test_two_writers_of_one_folder(tmp_path: Path, replace: bool) -> None:
    """Both pass the check before their run (the folder is absent), both build their temp folder; released
    together, one installs and the other is refused (exit 2, one line), unless --replace: then the later
    replaces the earlier whole. Never a mix, and nothing left beside the folder."""
    work = tmp_path / "w"
    work.mkdir()
    scenario = _scenario(tmp_path)
    procs = [_held(tmp_path, ["simulate", scenario, "--replications", "1", "--seed", str(seed), "--out",
                              str(work / "out"), *(["--replace"] if replace else [])]) for seed in (1, 2)]
    _wait_ready(tmp_path, procs)
    (tmp_path / "go").touch()
    errs = [p.communicate(timeout=slack(30))[1] for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(p.name for p in work.iterdir()) == ["out"]
    assert sorted(p.name for p in (work / "out").iterdir()) == ["records.csv", "summary.json"]
    seed = json.loads((work / "out" / "summary.json").read_text())["seed"]
    if replace:
        assert codes == [0, 0], errs
        assert seed in (1, 2)
    else:
        assert sorted(codes) == [0, 2], errs
        winner = codes.index(0)
        assert seed == (1, 2)[winner]  # the set of the run that exited 0, whole
        _one_error_line(2, errs[1 - winner], str(work / "out"), "pass --replace")


def test_a_command_run_in_process_gives_the_signal_handlers_back(tmp_path: Path) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    assert run_cli(["simulate", _scenario(tmp_path), "--replications", "1", "--json"])[0] == 0
    assert {sig: signal.getsignal(sig) for sig in before} == before
