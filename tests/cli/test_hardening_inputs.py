"""Hardening, second round (docs/cli_contract.md): inputs that are not regular files, products of user-given
counts, numeric flags, scenario scale factors and partial prefix identity in a trace are each refused with exit 2
and one stderr line naming the file, flag or field, before anything is written."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.cli.inprocess import assert_clean_exit, run_cli
from tests.cli.test_hardening import TINY as BASE_TINY
from tests.cli.test_hardening import TRACED as BASE_TRACED
from tripath.core import limits
from tripath.core.errors import InputError, check_regular_file
from tripath.core.limits import MAX_REPLICAS, MAX_SWEEP_POINTS, MAX_SWEEP_REQUESTS, MAX_TIME_SCALE, MAX_WINDOWS

REPO = Path(__file__).resolve().parents[2]

# the first round's scenarios: a tiny poisson run with an SLA here, and a trace replay at a time_scale
TINY = BASE_TINY + "[sla]\nttft_p99_ms = 1000.0\ntpot_p99_ms = 100.0\n"
TRACED = BASE_TRACED.replace('trace = "{trace}"\n', 'trace = "{trace}"\ntime_scale = {scale}\n')


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _refused(code: int, err: str, *names: str) -> str:
    """Exit 2 with exactly one stderr line naming one of ``names``; the line."""
    assert code == 2, (code, err)
    assert_clean_exit(code, err, *names)
    return err.strip()


def _files(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


# --- inputs that are not regular files: refused before they are opened -----------------------------------------

def _cli_in_subprocess(argv: list[str], cwd: Path) -> tuple[int, str]:
    """(exit status, stderr) of ``tripath ARGV`` in a child process: a reader blocking on a FIFO is killed after a
    timeout and fails the test instead of hanging it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run([sys.executable, "-m", "tripath.cli.main", *argv], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tripath {' '.join(argv)} blocked on a FIFO instead of refusing it")
    return done.returncode, done.stderr


def _fifo_cases(tmp: Path) -> dict[str, tuple[list[str], Path]]:
    """Each reader's command line with a FIFO where it expects a file, and the FIFO it must name."""
    scenario = _write(tmp / "s.toml", TINY)
    checkpoint = tmp / "checkpoint"
    checkpoint.mkdir()
    profile = tmp / "p.json"
    profile.write_bytes((REPO / "data/profiles/cpu-tiny.json").read_bytes())
    fifos = {name: tmp / name for name in ("scenario.toml", "profile.json", "trace.jsonl", "metrics.txt",
                                           "prices.toml", "p.samples.csv")}
    fifos["config.json"] = checkpoint / "config.json"
    for fifo in fifos.values():
        os.mkfifo(fifo)
    traced = _write(tmp / "traced.toml", TRACED.format(trace=fifos["trace.jsonl"], scale=1.0))
    out = str(tmp / "out")
    return {
        "scenario": (["simulate", str(fifos["scenario.toml"]), "--out", out], fifos["scenario.toml"]),
        "profile": (["simulate", str(scenario), "--profile", str(fifos["profile.json"]), "--out", out],
                    fifos["profile.json"]),
        "trace": (["simulate", str(traced), "--out", out], fifos["trace.jsonl"]),
        "profile show": (["profile", "show", str(fifos["profile.json"])], fifos["profile.json"]),
        "metrics dump": (["profile", "acceptance", str(fifos["metrics.txt"]), "--task", "code", "--out",
                          str(tmp / "overlay.json")], fifos["metrics.txt"]),
        "gpu prices": (["recommend", str(scenario), "--gpu-prices", str(fifos["prices.toml"]), "--no-cache"],
                       fifos["prices.toml"]),
        "samples": (["profile", "plot", str(profile), "--out", out], fifos["p.samples.csv"]),
        "checkpoint": (["serve", str(scenario), "--checkpoint", str(checkpoint), "--out", str(tmp / "rec.csv")],
                       fifos["config.json"]),
    }


@pytest.mark.parametrize("case", ["scenario", "profile", "trace", "profile show", "metrics dump", "gpu prices",
                                  "samples", "checkpoint"])
def test_a_fifo_input_is_refused_not_waited_on(tmp_path, case):
    argv, fifo = _fifo_cases(tmp_path)[case]
    before = _files(tmp_path)
    code, err = _cli_in_subprocess(argv, tmp_path)
    assert "FIFO" in _refused(code, err, str(fifo))
    assert _files(tmp_path) == before  # nothing written


def test_a_device_a_socket_and_a_folder_are_refused_by_kind(tmp_path):
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    # a socket's path must be short (108 bytes), so it lives in a temp folder of its own
    with tempfile.TemporaryDirectory() as where, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock_path = Path(where) / "s.toml"
        sock.bind(str(sock_path))
        for path, kind in ((Path(os.devnull), "character device"), (sock_path, "socket"), (folder, "folder")):
            code, _, err = run_cli(["simulate", str(path)])
            assert kind in _refused(code, err, str(path))
    check_regular_file(_write(tmp_path / "plain.toml", TINY))  # a regular file passes
    check_regular_file(tmp_path / "absent.toml")  # so does a missing one: its reader says "not found"


def test_an_eval_prompts_fifo_is_refused(tmp_path):
    from tripath.training.corpus import load_eval_prompts

    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="prompts.jsonl: is a FIFO"):
        load_eval_prompts(fifo)


# --- products of user-given counts: checked against tripath/core/limits.py before any work --------------------

def test_a_million_what_if_points_are_refused_up_front(tmp_path):
    scenario = _write(tmp_path / "s.toml", TINY)
    values = ",".join(str(v) for v in range(1000))
    code, _, err = run_cli(["whatif", str(scenario), "--vary", f"batching.max_wait_ms={values}",
                            "--vary", f"batching.max_batch_size={','.join(str(v + 1) for v in range(1000))}",
                            "--no-cache", "--cache-dir", str(tmp_path / "cache")])
    line = _refused(code, err, "--vary")
    assert "1,000,000 what-if points" in line and f"{MAX_SWEEP_POINTS:,}" in line
    assert not (tmp_path / "cache").exists()


def test_the_requests_a_what_if_simulates_in_all_are_bounded(monkeypatch, tmp_path):
    monkeypatch.setattr(limits, "physical_memory_bytes", lambda: 1 << 50)  # the total binds, not the memory
    scenario = _write(tmp_path / "s.toml", TINY)
    code, _, err = run_cli(["whatif", str(scenario), "--vary", "workload.requests=10000000",
                            "--vary", "batching.max_wait_ms=0,1,2,3,4,5", "--no-cache"])
    line = _refused(code, err, "--vary x --replications")
    assert "120,000,000 requests" in line and f"{MAX_SWEEP_REQUESTS:,}" in line


def test_a_what_if_point_past_memory_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(limits, "physical_memory_bytes", lambda: 1 << 20)
    scenario = _write(tmp_path / "s.toml", TINY)
    code, _, err = run_cli(["whatif", str(scenario), "--vary", "workload.requests=100000", "--no-cache"])
    _refused(code, err, "workload.requests x --replications")


@pytest.mark.parametrize(("command", "requests", "flags", "field"), [
    ("recommend", 4, ["--budget-requests", "10000000", "--replications", "1000"], "--budget-requests x --replications"),
    ("plan", 4, ["--qps", "1", "--requests", "10000000", "--replications", "1000"], "--requests x --replications"),
    ("stack", 100_000, ["--replications", "1000"], "workload.requests x --replications"),
])
def test_requests_times_replications_of_a_planning_command_are_checked(monkeypatch, tmp_path, command, requests,
                                                                         flags, field):
    monkeypatch.setattr(limits, "physical_memory_bytes", lambda: 1 << 30)  # 524,288 requests fit
    scenario = _write(tmp_path / "s.toml", TINY.replace("requests = 4", f"requests = {requests}"))
    code, _, err = run_cli([command, str(scenario), *flags, "--no-cache"])
    _refused(code, err, field)


def test_a_load_step_of_too_many_windows_is_refused(tmp_path):
    scenario = _write(tmp_path / "s.toml", TINY)
    code, _, err = run_cli(["whatif", str(scenario), "--load-step", "2@1", "--window-s", "0.000001",
                            "--cache-dir", str(tmp_path / "cache")])
    assert f"{MAX_WINDOWS:,}" in _refused(code, err, "--window-s")
    assert not list((tmp_path / "cache").rglob("*.jsonl"))  # refused before the step trace is written


def test_a_billion_gpus_in_a_scenario_are_refused(tmp_path):
    scenario = _write(tmp_path / "s.toml", TINY + "[cluster]\ngpus = 1000000000\n")
    code, _, err = run_cli(["simulate", str(scenario), "--out", str(tmp_path / "out")])
    _refused(code, err, "cluster.gpus")
    assert not (tmp_path / "out").exists()


# --- every numeric flag range-checked ---------------------------------------------------------------------------

NEEDS_SCENARIO = {"simulate", "whatif", "plan", "recommend", "stack", "serve"}


@pytest.mark.parametrize(("command", "flags", "flag"), [
    ("whatif", ["--load-step", "nan@600"], "--load-step"),
    ("whatif", ["--load-step", "2@-5"], "--load-step"),
    ("whatif", ["--load-step", "inf@5"], "--load-step"),
    ("whatif", ["--load-step", "0@5"], "--load-step"),
    ("whatif", ["--load-step", "2@nan"], "--load-step"),
    ("whatif", ["--load-step", "2"], "--load-step"),
    ("whatif", ["--load-step", "2@1", "--window-s", "-1"], "--window-s"),
    ("serve", ["--threads", "-3"], "--threads"),
    ("serve", ["--requests", "-1"], "--requests"),
    ("serve", ["--rate", "nan"], "--rate"),
    ("serve", ["--num-blocks", "0"], "--num-blocks"),
    ("serve", ["--block-size", "-16"], "--block-size"),
    ("serve", ["--seed", "-1"], "--seed"),
    ("serve", ["--sink-tokens", "-1"], "--sink-tokens"),
    ("serve", ["--ssd-pages", "1e3"], "--ssd-pages"),
    ("app", ["--port", "70000"], "--port"),
    ("app", ["--port", "0"], "--port"),
    ("recommend", ["--qps", "nan"], "--qps"),
    ("recommend", ["--qps", "1e300"], "--qps"),
    ("recommend", ["--max-replicas", "1000000000"], "--max-replicas"),
    ("recommend", ["--budget-requests", "0"], "--budget-requests"),
    ("recommend", ["--requests", "100000000000"], "--requests"),
    ("recommend", ["--workers", "100000000"], "--workers"),
    ("recommend", ["--gpu-price", "h100-sxm=1e300"], "--gpu-price"),
    ("plan", ["--qps", "-1"], "--qps"),
    ("plan", ["--qps", "1", "--sla-ttft-ms", "inf"], "--sla-ttft-ms"),
    ("plan", ["--qps", "1", "--gpu-price", "1e300"], "--gpu-price"),
    ("plan", ["--qps", "1", "--max-replicas", "0"], "--max-replicas"),
    ("matrix", ["--profile", "cpu-tiny", "--requests", "-5"], "--requests"),
    ("breakeven", ["--profile", "cpu-tiny", "--k", "1000000000"], "--k"),
    ("breakeven", ["--profile", "cpu-tiny", "--batch", "0"], "--batch"),
    ("breakeven", ["--profile", "cpu-tiny", "--context-tokens", "1e300"], "--context-tokens"),
    ("calibrate", ["--model-config", "llama2-70b", "--kv-capacity-gib", "nan"], "--kv-capacity-gib"),
    ("calibrate", ["--model-config", "llama2-70b", "--threads", "-3"], "--threads"),
    ("calibrate", ["--model-config", "llama2-70b", "--max-holdout-mape", "inf"], "--max-holdout-mape"),
    ("calibrate", ["--model-config", "llama2-70b", "--layers-timed", "1"], "--layers-timed"),
    ("validate", ["--seed", "-1"], "--seed"),
])
def test_a_numeric_flag_out_of_range_is_one_line(tmp_path, command, flags, flag):
    scenario = [str(_write(tmp_path / "s.toml", TINY))] if command in NEEDS_SCENARIO else []
    before = _files(tmp_path)
    code, _, err = run_cli([command, *scenario, *flags])
    _refused(code, err, flag)
    assert _files(tmp_path) == before


def test_a_replica_bound_at_the_limit_is_accepted():
    from tripath.cli.arg_types import replica_count

    assert replica_count(str(MAX_REPLICAS)) == MAX_REPLICAS


# --- scale factors of a scenario --------------------------------------------------------------------------------

def _trace_rows(count: int, step_ms: float, with_hashes: bool = True, missing: tuple[int, ...] = ()) -> str:
    """A Mooncake trace of ``count`` rows ``step_ms`` apart; the rows numbered in ``missing`` have no hash_ids."""
    rows = []
    for i in range(count):
        row: dict[str, object] = {"timestamp": i * step_ms, "input_length": 600, "output_length": 3}
        if with_hashes and i + 1 not in missing:
            row["hash_ids"] = [0, i + 1]
        rows.append(json.dumps(row))
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize(("scale", "field"), [(1e14, "time_scale"), (1e-9, "time_scale"),
                                              (MAX_TIME_SCALE * 2, "time_scale")])
def test_a_trace_time_scale_past_its_bounds_is_refused(tmp_path, scale, field):
    trace = _write(tmp_path / "t.jsonl", _trace_rows(5, 1000.0))
    scenario = _write(tmp_path / "s.toml", TRACED.format(trace=trace, scale=scale))
    code, _, err = run_cli(["simulate", str(scenario), "--out", str(tmp_path / "out")])
    _refused(code, err, f"workload.arrival.{field}")
    assert "s.toml" in err and not (tmp_path / "out").exists()


def test_a_trace_whose_scaled_span_loses_the_milliseconds_is_refused(tmp_path):
    trace = _write(tmp_path / "t.jsonl", _trace_rows(3, 1e14))  # 2e14 ms = 2e11 s
    scenario = _write(tmp_path / "s.toml", TRACED.format(trace=trace, scale=1.0))
    code, _, err = run_cli(["simulate", str(scenario)])
    _refused(code, err, "t.jsonl")
    assert "workload.arrival.time_scale" in err


@pytest.mark.parametrize(("old", "new", "field"), [
    ("rate_per_s = 2.0", "rate_per_s = 1e-300", "workload.arrival.rate_per_s"),
    ("requests = 4", "duration_s = 1e12", "workload.duration_s"),
    ("[sla]", "[batching]\nmax_wait_ms = 1e300\n[sla]", "batching.max_wait_ms"),
    ('kind = "poisson"\nrate_per_s = 2.0', 'kind = "closed"\nusers = 2\nthink_s = 1e300', "think_s"),
    ("[sla]", "[strategy.speculative]\nk = 1000000\n[sla]", "speculative.k"),
])
def test_a_scenario_time_past_the_simulated_clock_is_refused(tmp_path, old, new, field):
    text = TINY.replace(old, new)
    if "duration_s" in new:
        text = text.replace("rate_per_s = 2.0", "rate_per_s = 1e-6")  # 1e6 requests: under the request limit
    scenario = _write(tmp_path / "s.toml", text)
    code, _, err = run_cli(["simulate", str(scenario), "--out", str(tmp_path / "out")])
    _refused(code, err, field)
    assert "s.toml" in err and not (tmp_path / "out").exists()


# --- partial prefix identity in a trace -------------------------------------------------------------------------

def test_a_trace_with_hash_ids_on_some_rows_only_is_refused(tmp_path):
    trace = _write(tmp_path / "t.jsonl", _trace_rows(60, 100.0, missing=(17, 40)))
    scenario = _write(tmp_path / "s.toml", TRACED.format(trace=trace, scale=1.0))
    code, _, err = run_cli(["simulate", str(scenario), "--out", str(tmp_path / "out")])
    line = _refused(code, err, "t.jsonl")
    assert "line 17: hash_ids" in line and "58 other rows" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("with_hashes", [True, False])
def test_a_trace_with_hash_ids_on_every_row_or_none_runs(tmp_path, with_hashes):
    trace = _write(tmp_path / "t.jsonl", _trace_rows(60, 100.0, with_hashes=with_hashes))
    scenario = _write(tmp_path / "s.toml", TRACED.format(trace=trace, scale=1.0))
    code, _, err = run_cli(["simulate", str(scenario), "--replications", "1", "--json"])
    assert code == 0, err
