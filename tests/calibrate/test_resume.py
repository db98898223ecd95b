"""A calibration killed midway resumes without repeating or losing points; the profile is never half-written."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.full_disk import needs_dev_full
from tests.timing import slack
from tripath.calibrate.job import run_calibration
from tripath.calibrate.job_config import CalibrationJob
from tripath.calibrate.presets import Preset
from tripath.calibrate.samples import HEADER, Sample, SampleLog, read_samples
from tripath.calibrate.target import TargetSpec
from tripath.calibrate.timer import TimerConfig
from tripath.core.data_dirs import REPO_ROOT
from tripath.core.errors import InputError

GRID = Preset("test", prefill_new=(8, 16, 32), prefill_context=(0, 16), decode_batch=(1, 2, 4),
              decode_context=(8, 32), timer=TimerConfig(warmup=0, reps=1))
N_POINTS = 6 + 6  # 3 x 2 prefill + 3 x 2 decode, all within the preset model's 512 positions


class Interrupted(Exception):
    pass


def _job(out, **kw):
    return CalibrationJob(TargetSpec(preset="tiny-mha"), GRID, str(out), progress=False, plots=False,
                          force=True, **kw)


def test_log_appends_and_cuts_a_torn_line(tmp_path):
    path = tmp_path / "x.samples.csv"
    with SampleLog.open(path, {"a": 1}) as log:
        log.append(Sample("decode", 2, 1, 8, 1.5, 1.0, 2.0, 3))
        with pytest.raises(ValueError, match="already"):
            log.append(Sample("decode", 2, 1, 8, 9.0, 9.0, 9.0, 3))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("decode,2,2,16,1.7")  # a kill in the middle of a write: no newline
    with SampleLog.open(path, {"a": 1}) as log:
        assert log.done == {("decode", 2, 1, 8)}
        log.append(Sample("decode", 2, 2, 16, 1.25, 1.0, 2.0, 3))
    lines = path.read_text().splitlines()
    assert lines == [",".join(HEADER), "decode,2,1,8,1.5,1,2,3", "decode,2,2,16,1.25,1,2,3"]


def test_resuming_with_other_settings_is_refused(tmp_path):
    path = tmp_path / "x.samples.csv"
    with SampleLog.open(path, {"reps": 3}) as log:
        log.append(Sample("decode", 2, 1, 8, 1.5, 1.0, 2.0, 3))
    with pytest.raises(InputError, match="other settings"):
        SampleLog.open(path, {"reps": 5})


def test_a_log_without_samples_leaves_no_files(tmp_path):
    """A job that fails before its first point (a corrupt checkpoint) must not leave an empty log and its
    sidecar: the log reaches the disk with its first sample (the meta file, then the header and the row)."""
    path = tmp_path / "new" / "x.samples.csv"
    with SampleLog.open(path, {"reps": 3}) as log:
        assert log.drop(("decode",)) == 0
    assert not (tmp_path / "new").exists()
    with SampleLog.open(path, {"reps": 3}) as log:
        log.append(Sample("decode", 2, 1, 8, 1.5, 1.0, 2.0, 3))
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.samples.csv", "x.samples.meta"]
    assert read_samples(path) == [Sample("decode", 2, 1, 8, 1.5, 1.0, 2.0, 3)]


def test_interrupted_job_resumes_exactly(tmp_path):
    out = tmp_path / "p.json"

    def stop_after_5(count):
        if count == 5:
            raise Interrupted

    with pytest.raises(Interrupted):
        run_calibration(_job(out), after_point=stop_after_5)
    assert not out.exists()  # nothing half-done is ever a profile
    first = read_samples(tmp_path / "p.samples.csv")
    assert len(first) == 5
    result = run_calibration(_job(out))
    assert result.measured_points == N_POINTS - 5
    rows = read_samples(tmp_path / "p.samples.csv")
    keys = [s.key for s in rows]
    assert len(keys) == len(set(keys)) == N_POINTS  # none repeated, none lost
    assert rows[:5] == first  # the earlier points are kept as they were
    assert result.profile.costs["prefill"].fit.n_samples == 6
    again = run_calibration(_job(out))  # everything on disk: nothing measured, same fit
    assert again.measured_points == 0
    assert again.profile.costs == result.profile.costs


SCRIPT = """
import sys
from tripath.calibrate.job import run_calibration
from tripath.calibrate.job_config import CalibrationJob
from tripath.calibrate.presets import Preset
from tripath.calibrate.target import TargetSpec
from tripath.calibrate.timer import TimerConfig
grid = Preset("kill", prefill_new=(32, 64, 128), prefill_context=(0, 64), decode_batch=(1, 2, 4),
              decode_context=(8, 32), timer=TimerConfig(warmup=0, reps=int(sys.argv[2])))
run_calibration(CalibrationJob(TargetSpec(preset="tiny-mha"), grid, sys.argv[1], progress=False, plots=False,
                               force=True))
"""


@pytest.mark.slow
def test_killed_process_resumes(tmp_path):
    out = tmp_path / "k.json"
    csv_path = tmp_path / "k.samples.csv"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), "10"], env=env)
    deadline = time.monotonic() + slack(20)  # a hang guard: two points take seconds
    while time.monotonic() < deadline:
        if csv_path.exists() and len(csv_path.read_text().splitlines()) >= 3:  # header + 2 points
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    before = read_samples(csv_path)
    assert 2 <= len(before) < 12
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(out), "10"], env=env, timeout=slack(40))
    assert done.returncode == 0
    rows = read_samples(csv_path)
    assert len({s.key for s in rows}) == len(rows) == 12
    assert rows[: len(before)] == before
    assert out.exists()


def test_k_sweep_interrupted_mid_grid_resumes_exactly(tmp_path):
    """The speculative sweep stopped after 2 of its (task, K) runs, and again with one run's rows half on disk
    (a kill between two appends), finishes with every row once and the earlier rows untouched."""
    import torch

    from tripath.calibrate.sweeps.spec_batch import BATCH_SWEEPS, BATCHES
    from tripath.calibrate.sweeps.speculative import SpecSettings, measure_speculative, unit_keys
    from tripath.engine.model.config import PRESETS
    from tripath.engine.model.model import LlamaModel
    from tripath.training.corpus import TASKS

    torch.set_num_threads(1)
    model = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()
    prompts = {"code": [[1, 5, 9, 13, 2, 7]], "math": [[1, 4, 4, 6, 6, 10]]}
    settings = SpecSettings(k=2, prompts=1, new_tokens=8, ks=(1, 3))  # grid 1, 2, 3: 6 runs
    path = tmp_path / "s.samples.csv"
    layers = model.config.num_layers
    tasks = (TASKS.index("code"), TASKS.index("math"))
    expected = {key for task in tasks for k in (1, 2, 3) for key in unit_keys(layers, task, k)}
    # and once, after the (task, K) grid, the rounds at batch B > 1 at the sweep's K (sweep_spec_batch.py)
    expected |= {(name, layers, b, settings.k) for b in BATCHES for name in BATCH_SWEEPS}

    def stop_after(n):
        seen = []

        def progress(what):
            seen.append(what)
            if len(seen) == n:
                raise Interrupted
        return progress

    with SampleLog.open(path, {"s": 1}) as log, pytest.raises(Interrupted):
        measure_speculative(model, model, prompts, settings, log, progress=stop_after(2))
    first = read_samples(path)
    assert {s.key for s in first} == set(unit_keys(layers, tasks[0], 1)) | set(unit_keys(layers, tasks[0], 2))
    # a kill in the middle of the third run: only its first two rows reached the disk
    with SampleLog.open(path, {"s": 1}) as log:
        for key in unit_keys(layers, tasks[0], 3)[:2]:
            log.append(Sample(*key, 1.0, 1.0, 1.0, 1))
    partial = read_samples(path)
    with SampleLog.open(path, {"s": 1}) as log:
        assert measure_speculative(model, model, prompts, settings, log) == 6 - 2
    rows = read_samples(path)
    keys = [s.key for s in rows]
    assert len(keys) == len(set(keys)) and set(keys) == expected  # none repeated, none lost
    assert rows[: len(partial)] == partial  # rows on disk are kept as they were
    with SampleLog.open(path, {"s": 1}) as log:
        assert measure_speculative(model, model, prompts, settings, log) == 0


@needs_dev_full
def test_a_full_disk_while_logging_names_the_samples_file(tmp_path):
    path = tmp_path / "x.samples.csv"
    first = Sample("decode", 2, 1, 8, 1.5, 1.0, 2.0, 3)
    with SampleLog.open(path, {"a": 1}) as log:
        log.append(first)
    with pytest.raises(OSError) as info, SampleLog.open(path, {"a": 1}) as log:
        log._handle.close()
        log._handle = open("/dev/full", "a", encoding="utf-8", newline="")  # noqa: SIM115 (closed by the log)
        log.append(Sample("decode", 2, 2, 16, 1.25, 1.0, 2.0, 3))
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)  # not hidden by the close
    assert read_samples(path) == [first]
