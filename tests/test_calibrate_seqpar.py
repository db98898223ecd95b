"""The sequence-parallel sweep on a tiny random model: two gloo ranks, rows per (length, P), and a
sequence_parallel[2] section with positive speedups and merge times, resumable."""

from __future__ import annotations

import pytest

from calibrate.samples import SampleLog, read_samples
from calibrate.sweep_seqpar import measure_seqpar, seqpar_section
from real_engine.config import PRESETS

CONFIG = PRESETS["tiny-gqa"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    path = tmp_path_factory.mktemp("sp") / "x.samples.csv"
    with SampleLog.open(path, {"t": 1}) as log:
        # 4096 does not fit the 512-position tiny model: dropped, not measured
        measured = measure_seqpar(CONFIG, 2, log, lengths=(128, 256, 4096), deadline_s=120)
    return path, measured


def test_rows_and_section(swept):
    path, measured = swept
    assert measured == 2
    samples = read_samples(path)
    assert {(s.sweep, s.x1, s.x2) for s in samples} == {
        ("seqpar_prefill", n, p) for n in (128, 256) for p in (1, 2)} | {("seqpar_merge", n, 2) for n in (128, 256)}
    section = seqpar_section(samples, "test")
    sp = section[2]
    assert sp.degree == 2 and sp.source == "measured"
    assert [r.context_tokens for r in sp.rows] == [128, 256]
    for row in sp.rows:
        assert row.speedup > 0 and row.merge_ms > 0
        one = next(s for s in samples if (s.sweep, s.x1, s.x2) == ("seqpar_prefill", row.context_tokens, 1))
        two = next(s for s in samples if (s.sweep, s.x1, s.x2) == ("seqpar_prefill", row.context_tokens, 2))
        assert row.speedup == pytest.approx(one.median_ms / two.median_ms)
    assert sp.merge is not None and sp.merge.evaluate(context_tokens=256) > 0


def test_resume_spawns_nothing(swept):
    path, _ = swept
    with SampleLog.open(path, {"t": 1}) as log:
        assert measure_seqpar(CONFIG, 2, log, lengths=(128, 256)) == 0
