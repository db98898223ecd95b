"""--refresh: one optional sweep's rows leave the samples CSV (atomically) while every other row stays, so the
resumed job measures only that sweep; the job refuses a sweep it does not know or has switched off."""

from __future__ import annotations

import pytest

from tripath.calibrate.job_config import REFRESH_PREFIXES, CalibrationJob
from tripath.calibrate.presets import PRESETS
from tripath.calibrate.samples import Sample, SampleLog, read_samples
from tripath.calibrate.target import TargetSpec
from tripath.core.errors import InputError

ROWS = [Sample("decode", 1, 1, 64, 1.5, 1.0, 2.0, 3), Sample("comp_step", 6, 1, 0, 6.0, 5.0, 7.0, 64),
        Sample("seqpar_merge", 0, 512, 2, 3.0, 2.0, 4.0, 3), Sample("comp_bytes", 6, 1, 0, 1056.0, 1000.0, 1100.0, 2),
        Sample("paging_c64", 0, 4, 1, 0.5, 0.4, 0.6, 3)]


def test_drop_keeps_the_other_sweeps_and_a_reopened_log_resumes_them(tmp_path):
    path = tmp_path / "p.samples.csv"
    with SampleLog.open(path, {"t": 1}) as log:
        for row in ROWS:
            log.append(row)
        assert log.drop(REFRESH_PREFIXES["compression"]) == 2
        assert log.drop(()) == 0
        assert ("comp_step", 6, 1, 0) not in log.done and ("decode", 1, 1, 64) in log.done
        log.append(Sample("comp_step", 6, 1, 0, 9.0, 8.0, 10.0, 64))  # measurable again, appended after the rest
    kept = [r for r in ROWS if not r.sweep.startswith("comp_")]
    on_disk = read_samples(path)
    assert on_disk[:3] == kept and on_disk[3].key == ("comp_step", 6, 1, 0) and on_disk[3].median_ms == 9.0
    with SampleLog.open(path, {"t": 1}) as log:  # same fingerprint: resumes, nothing torn
        assert log.done == {s.key for s in on_disk}


def test_paging_prefix_drops_every_chunk_size_and_only_paging(tmp_path):
    with SampleLog.open(tmp_path / "q.samples.csv", {"t": 1}) as log:
        for row in ROWS:
            log.append(row)
        assert log.drop(REFRESH_PREFIXES["paging"]) == 1
        assert {s.sweep for s in log.samples} == {"decode", "comp_step", "seqpar_merge", "comp_bytes"}


def _job(**kwargs: object) -> CalibrationJob:
    return CalibrationJob(TargetSpec(checkpoint="data/models/tiny-target"), PRESETS["quick"], "/tmp/x.json", **kwargs)


def test_refresh_is_checked_at_construction():
    assert _job(seqpar=True, refresh=("seqpar",)).refresh == ("seqpar",)
    with pytest.raises(InputError, match="unknown sweep"):
        _job(refresh=("decode",))
    with pytest.raises(InputError, match="switched on"):
        _job(refresh=("compression",))  # --refresh compression without --compression
