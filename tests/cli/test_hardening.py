"""Every input and environment error of `tripath simulate` / `validate` is one stderr line with exit 2; a defect
is exit 70 with its traceback saved; output folders are written whole or not at all (docs/cli_contract.md)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from tests.cli.inprocess import assert_clean_exit, run_cli
from tripath.cli.main import EXIT_INTERNAL
from tripath.core import atomic, limits
from tripath.core.errors import InputError, describe_os_error, read_input_text

TINY = """name = "tiny"
profile = "cpu-tiny"
[workload]
requests = 4
[workload.arrival]
kind = "poisson"
rate_per_s = 2.0
[workload.prompt_tokens]
kind = "fixed"
value = 8
[workload.output_tokens]
kind = "fixed"
value = 4
"""

TRACED = """name = "traced"
profile = "cpu-tiny"
[workload.arrival]
kind = "trace"
trace = "{trace}"
[workload.prompt_tokens]
kind = "trace"
[workload.output_tokens]
kind = "trace"
"""

DEEP = 10_000


def _write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _simulate(*argv: str) -> tuple[int, str, str]:
    return run_cli(["simulate", *argv, "--replications", "1", "--json"])


def _refused(code: int, err: str, *names: str) -> str:
    assert code == 2, err
    assert_clean_exit(code, err, *names)
    return err.strip()


def _traced(tmp_path: Path, name: str, body: str | bytes) -> Path:
    trace = _write(tmp_path, name, body)
    return _write(tmp_path, "s.toml", TRACED.format(trace=trace))


# --- overflow: a token count past int64 -----------------------------------------------------------------------

@pytest.mark.parametrize(("name", "body", "field"), [
    ("t.jsonl", '{"timestamp": 0, "input_length": 99999999999999999999, "output_length": 3}\n', "input_length"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 3, "output_length": 99999999999999999999}\n', "output_length"),
    ("t.jsonl", '{"timestamp": 1e400, "input_length": 3, "output_length": 3}\n', "line 1"),
    ("t.jsonl", '{"timestamp": 99999999999999999999999, "input_length": 3, "output_length": 3}\n', "timestamp"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 3, "output_length": 3, "hash_ids": [99999999999999999999]}\n',
     "hash_ids"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,99999999999999999999,3\n",
     "ContextTokens"),
])
def test_huge_trace_numbers_are_refused_by_line_and_field(tmp_path, name, body, field):
    code, _, err = _simulate(str(_traced(tmp_path, name, body)))
    line = _refused(code, err, field)
    assert str(tmp_path / name) in line


def test_huge_scenario_integers_are_refused_by_field(tmp_path):
    for old, new, field in (("value = 8", "value = 99999999999999999999", "workload.prompt_tokens.value"),
                            ("value = 8", "value = " + "9" * 5000, "tiny.toml"),
                            ("rate_per_s = 2.0", "rate_per_s = inf", "workload.arrival.rate_per_s"),
                            ("requests = 4", "requests = 4\n[cluster]\ngpus = 99999999999999999999", "cluster.gpus")):
        code, _, err = _simulate(str(_write(tmp_path, "tiny.toml", TINY.replace(old, new))))
        _refused(code, err, field)


# --- decoding: binary files -------------------------------------------------------------------------------------

BINARY = b"\xff\xfe\x00\x80\x81garbage\xc3\x28"


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl"])
def test_binary_traces_are_refused(tmp_path, name):
    code, _, err = _simulate(str(_traced(tmp_path, name, BINARY)))
    assert "not UTF-8" in _refused(code, err, str(tmp_path / name))


def test_binary_scenario_and_profile_are_refused(tmp_path):
    code, _, err = _simulate(str(_write(tmp_path, "b.toml", BINARY)))
    assert "not UTF-8" in _refused(code, err, "b.toml")
    profile = _write(tmp_path, "p.json", BINARY)
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY)), "--profile", str(profile))
    assert "not UTF-8" in _refused(code, err, "p.json")


# --- nesting depth ----------------------------------------------------------------------------------------------

def test_ten_thousand_deep_files_are_refused(tmp_path):
    deep_json = "[" * DEEP + "]" * DEEP
    code, _, err = _simulate(str(_write(tmp_path, "d.toml", "x = " + deep_json + "\n")))
    assert "nested" in _refused(code, err, "d.toml")
    code, _, err = _simulate(str(_write(tmp_path, "d2.toml", "".join(f"[{'a.' * i}a]\n" for i in range(40)))))
    _refused(code, err, "d2.toml")
    code, _, err = _simulate(str(_traced(tmp_path, "d.jsonl", deep_json + "\n")))
    assert "nested" in _refused(code, err, "line 1")
    profile = _write(tmp_path, "p.json", deep_json)
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY)), "--profile", str(profile))
    assert "nested" in _refused(code, err, "p.json")


def test_nesting_depth_is_counted_without_recursion():
    value: object = 1
    for _ in range(DEEP):
        value = [value]
    assert limits.nesting_depth({"a": [1, {"b": 2}]}) == 3
    assert limits.nesting_depth(7) == 0
    assert limits.nesting_depth(value) == limits.MAX_NESTING_DEPTH + 1  # stops counting past the limit
    with pytest.raises(InputError, match="more than 32 levels"):
        limits.check_depth(value, "f.json")


# --- OSError of each kind ---------------------------------------------------------------------------------------

def test_a_folder_given_as_a_file_is_refused(tmp_path):
    folder = tmp_path / "adir.toml"
    folder.mkdir()
    code, _, err = _simulate(str(folder))
    assert "is a folder" in _refused(code, err, "adir.toml")
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY)), "--profile", str(folder) + "/")
    _refused(code, err, "adir.toml")


@pytest.mark.parametrize(("number", "words"), [
    (errno.EACCES, "permission denied"), (errno.EROFS, "read-only"), (errno.ENOSPC, "disk is full"),
    (errno.EIO, "Input/output error"), (errno.EMFILE, "too many open files"),
])
def test_read_errors_of_every_kind_name_the_file(monkeypatch, tmp_path, number, words):
    import tripath.core.errors as errors_module

    def failing_open(path, mode="r", *args, **kwargs):
        raise OSError(number, os.strerror(number), str(path))

    monkeypatch.setattr(errors_module, "open", failing_open, raising=False)
    target = _write(tmp_path, "p.json", "{}")
    with pytest.raises(InputError) as caught:
        read_input_text(target, "missing", "cannot read profile")
    assert str(target) in str(caught.value) and words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_os_errors_are_described_in_one_line():
    assert describe_os_error(OSError(errno.ENOSPC, "No space left on device", "/x/f")) == "/x/f: the disk is full"
    assert describe_os_error(OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b")) == (
        "/a -> /b: Invalid cross-device link")
    wrapped = OSError(errno.EROFS, f"{os.strerror(errno.EROFS)} (cannot create a folder in /ro)", "/ro/out")
    assert describe_os_error(wrapped) == "/ro/out: the filesystem is read-only (cannot create a folder in /ro)"
    assert describe_os_error(OSError("plain")) == "plain"


def test_out_on_an_existing_file_is_refused_before_the_run(tmp_path):
    existing = _write(tmp_path, "file_out", "keep me")
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY)), "--out", str(existing))
    assert "not a folder" in _refused(code, err, "--out")
    assert existing.read_text() == "keep me"


def test_out_on_a_read_only_filesystem_is_refused_before_the_run(monkeypatch, tmp_path):
    monkeypatch.setattr(atomic.os, "access", lambda path, mode: False)
    monkeypatch.setattr(atomic, "_read_only", lambda path: True)
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY)), "--out", str(tmp_path / "out"))
    assert "read-only" in _refused(code, err, "--out")
    assert not (tmp_path / "out").exists()


def test_out_becoming_read_only_mid_run_is_one_line(monkeypatch, tmp_path):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), kwargs.get("dir"))

    monkeypatch.setattr(atomic.tempfile, "mkdtemp", read_only)
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY)), "--out", str(tmp_path / "out"))
    assert "read-only" in _refused(code, err, str(tmp_path))
    assert not (tmp_path / "out").exists()


# --- memory: absurd sizes from a user-given count ---------------------------------------------------------------

def test_a_billion_requests_is_refused_up_front(tmp_path):
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY.replace("requests = 4", "requests = 1000000000"))))
    assert "10,000,000" in _refused(code, err, "workload.requests")


def test_a_duration_that_implies_too_many_requests_is_refused(tmp_path):
    text = TINY.replace("requests = 4", "duration_s = 1e9")
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", text)))
    _refused(code, err, "workload.duration_s")
    loaded = TINY.replace("requests = 4", "duration_s = 1e12").replace("rate_per_s = 2.0", "load_fraction = 0.5")
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", loaded)))  # the rate is known only once resolved
    _refused(code, err, "workload.duration_s")


def test_requests_times_replications_are_checked_against_memory(monkeypatch, tmp_path):
    monkeypatch.setattr(limits, "physical_memory_bytes", lambda: 1 << 20)  # 1 MiB: 512 requests fit
    code, _, err = run_cli(["simulate", str(_write(tmp_path, "s.toml", TINY.replace("requests = 4",
                                                                                     "requests = 200"))),
                            "--replications", "3"])
    assert "requests x --replications" in _refused(code, err, "s.toml")


def test_out_of_memory_is_one_line(monkeypatch, tmp_path):
    import tripath.simulator.runner as runner

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(runner, "simulate_recording", no_memory)  # what `simulate` runs
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY)))
    assert "out of memory" in _refused(code, err)


def test_absurd_flags_are_refused_in_one_line(tmp_path):
    scenario = str(_write(tmp_path, "s.toml", TINY))
    for flags, field in ((["--replications", "1000000000"], "--replications"), (["--seed", "-1"], "--seed"),
                         (["--seed", "9" * 50], "--seed"), (["--timeseries-interval", "nan"], "--timeseries"),
                         (["--timeseries-interval", "-1"], "--timeseries"), (["--bogus"], "--bogus")):
        code, _, err = run_cli(["simulate", scenario, *flags])
        _refused(code, err, field)


# --- missing required key ---------------------------------------------------------------------------------------

def test_a_missing_required_key_names_its_table(tmp_path):
    text = TINY.replace('[workload.prompt_tokens]\nkind = "fixed"\n', "[workload.prompt_tokens]\n")
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", text)))
    line = _refused(code, err, "workload.prompt_tokens.kind")
    assert "missing required field" in line and "__init__" not in line
    no_arrival_kind = TINY.replace('kind = "poisson"\n', "")
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", no_arrival_kind)))
    _refused(code, err, "workload.arrival.kind")


# --- bounds: time series ----------------------------------------------------------------------------------------

def test_a_vanishing_timeseries_interval_is_refused_not_a_hang(tmp_path):
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY)), "--timeseries-interval", "1e-300")
    assert f"{limits.MAX_TIMESERIES_ROWS:,}" in _refused(code, err, "--timeseries-interval")


# --- output folders as a unit -----------------------------------------------------------------------------------

def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_an_existing_out_folder_is_refused_then_replaced_whole(tmp_path):
    scenario = str(_write(tmp_path, "s.toml", TINY))
    out = tmp_path / "out"
    assert _simulate(scenario, "--out", str(out), "--timeseries-interval", "0.5")[0] == 0
    assert _names(out) == {"records.csv", "summary.json", "timeseries.csv"}
    before = (out / "summary.json").read_bytes()
    code, _, err = _simulate(scenario, "--out", str(out), "--seed", "3")
    assert "--replace" in _refused(code, err, "--out")
    assert (out / "summary.json").read_bytes() == before  # refused: untouched
    assert _simulate(scenario, "--out", str(out), "--seed", "3", "--replace")[0] == 0
    assert _names(out) == {"records.csv", "summary.json"}  # the old run's time series went with it
    assert json.loads((out / "summary.json").read_text())["seed"] == 3
    assert _names(tmp_path) == {"s.toml", "out"}  # no temp or old folder left beside it


def test_an_empty_out_folder_is_used_without_replace(tmp_path):
    (tmp_path / "out").mkdir()
    assert _simulate(str(_write(tmp_path, "s.toml", TINY)), "--out", str(tmp_path / "out"))[0] == 0
    assert _names(tmp_path / "out") == {"records.csv", "summary.json"}


def test_a_full_disk_mid_write_leaves_nothing_half_written(monkeypatch, tmp_path):
    import tripath.simulator.summary as summary

    scenario = str(_write(tmp_path, "s.toml", TINY))
    out = tmp_path / "out"
    assert _simulate(scenario, "--out", str(out))[0] == 0
    before = {name: (out / name).read_bytes() for name in _names(out)}
    real = summary.write_text
    records_written = []

    def full_at_the_summary(path, text, *args):  # records.csv is written (streamed) by then: the disk fills after
        if Path(path).name == "summary.json":
            records_written.append((Path(path).parent / "records.csv").stat().st_size > 0)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text, *args)

    monkeypatch.setattr(summary, "write_text", full_at_the_summary)
    for target, extra in ((tmp_path / "new", []), (out, ["--replace", "--seed", "5"])):
        code, _, err = _simulate(scenario, "--out", str(target), *extra)
        assert "disk is full" in _refused(code, err, "summary.json")
    assert records_written == [True, True]
    assert not (tmp_path / "new").exists()  # nothing at all rather than records.csv alone
    assert {name: (out / name).read_bytes() for name in _names(out)} == before  # the old folder, whole
    assert _names(tmp_path) == {"s.toml", "out"}


def test_writing_dir_puts_the_old_folder_back_when_the_swap_fails(monkeypatch, tmp_path):
    dest = tmp_path / "report"
    dest.mkdir()
    (dest / "a.txt").write_text("old")
    real = os.replace

    def failing(src, dst):
        if Path(src).name.startswith(".report.") and "old-" not in Path(src).name and Path(dst) == dest:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(dst))
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", failing)
    with pytest.raises(OSError), atomic.writing_dir(dest, replace=True) as tmp:
        (tmp / "b.txt").write_text("new")
    assert _names(dest) == {"a.txt"} and _names(tmp_path) == {"report"}


def test_check_dir_target_refuses_links_files_and_full_folders(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "full")
    (tmp_path / "file").write_text("f")
    for name, words in (("full", "not empty"), ("link", "symbolic link"), ("file", "not a folder")):
        with pytest.raises(InputError, match=words):
            atomic.check_dir_target(tmp_path / name, replace=False)
    assert atomic.check_dir_target(tmp_path / "full", replace=True) == tmp_path / "full"
    assert atomic.check_dir_target(tmp_path / "a" / "b" / "c", replace=False) == tmp_path / "a" / "b" / "c"


# --- validate: a partial run never writes over the shipped report ----------------------------------------------

def test_quick_validation_is_refused_over_the_shipped_report():
    from tripath.fidelity.validate import DEFAULT_OUT

    before = sorted(p.name for p in DEFAULT_OUT.iterdir())
    for flags in (["--quick"], ["--only", "baseline-light"]):
        code, _, err = run_cli(["validate", *flags, "--out", str(DEFAULT_OUT), "--replace"])
        assert "shipped full report" in _refused(code, err, "--out")
    assert sorted(p.name for p in DEFAULT_OUT.iterdir()) == before


def test_partial_validation_goes_to_the_users_folder(monkeypatch, tmp_path):
    import tripath.fidelity.validate as validate

    monkeypatch.setattr(validate, "PARTIAL_OUT", tmp_path / "partial")
    assert validate.ValidateConfig(quick=True).out_folder() == tmp_path / "partial"
    assert validate.ValidateConfig(only=("kv-int8",)).out_folder() == tmp_path / "partial"
    assert validate.ValidateConfig().out_folder() == validate.DEFAULT_OUT
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep").write_text("k")
    with pytest.raises(InputError, match="--replace"):
        validate.ValidateConfig(quick=True, out=str(tmp_path / "mine")).out_folder()
    assert validate.ValidateConfig(quick=True, out=str(tmp_path / "mine"), replace=True).out_folder() == (
        tmp_path / "mine")


# --- a defect in tripath ----------------------------------------------------------------------------------------

def test_an_internal_error_is_one_line_with_the_traceback_saved(monkeypatch, tmp_path):
    import tripath.simulator.runner as runner

    def broken(*args, **kwargs):
        raise TypeError("unsupported operand\nsecond line")

    monkeypatch.setattr(runner, "simulate_recording", broken)  # what `simulate` runs
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, _, err = _simulate(str(_write(tmp_path, "s.toml", TINY)))
    assert code == EXIT_INTERNAL == 70
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tripath: internal error: TypeError: unsupported operand second")
    saved = Path(lines[0].split("traceback saved to ")[1].split(";")[0])
    assert saved.parent == tmp_path / "cache" / "tripath"
    text = saved.read_text()
    assert text.startswith("tripath simulate ") and "Traceback" in text and "in broken" in text
