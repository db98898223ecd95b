"""The sequence-parallel sweep on a tiny random model: two gloo ranks, rows per (length, P), and a
sequence_parallel[2] section with positive speedups and merge times, resumable."""

from __future__ import annotations

import pytest

from tests.timing import slack
from tripath.calibrate.samples import SampleLog, read_samples
from tripath.calibrate.sweeps.seqpar import measure_seqpar, seqpar_section, speedup
from tripath.engine.model.config import PRESETS

CONFIG = PRESETS["tiny-gqa"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    path = tmp_path_factory.mktemp("sp") / "x.samples.csv"
    with SampleLog.open(path, {"t": 1}) as log:
        # 4096 does not fit the 512-position tiny model: dropped, not measured
        measured = measure_seqpar(CONFIG, 2, log, lengths=(128, 256, 4096), deadline_s=slack(40))
    return path, measured


def test_rows_and_section(swept):
    path, measured = swept
    assert measured == 2
    samples = read_samples(path)
    assert {(s.sweep, s.x1, s.x2) for s in samples} == {
        ("seqpar_prefill", n, p) for n in (128, 256) for p in (1, 2)} | {
        (sweep, n, 2) for n in (128, 256)
        for sweep in ("seqpar_merge", "seqpar_decode", "seqpar_decode_merge", "seqpar_decode_comm")}
    section = seqpar_section(samples, "test")
    sp = section[2]
    assert sp.degree == 2 and sp.source == "measured"
    assert [r.context_tokens for r in sp.rows] == [128, 256]
    for row in sp.rows:
        assert row.speedup > 0 and row.merge_ms > 0
        one = next(s for s in samples if (s.sweep, s.x1, s.x2) == ("seqpar_prefill", row.context_tokens, 1))
        two = next(s for s in samples if (s.sweep, s.x1, s.x2) == ("seqpar_prefill", row.context_tokens, 2))
        merge = next(s for s in samples if (s.sweep, s.x1, s.x2) == ("seqpar_merge", row.context_tokens, 2))
        assert row.speedup == pytest.approx(speedup(one, two, merge))  # minimums, the merge priced apart
    assert sp.merge is not None and sp.merge.evaluate(context_tokens=256) > 0
    # the decode merge: two partials of one query per layer, fitted apart from the prefill's
    assert sp.decode_merge is not None and sp.decode_merge.domain["context_tokens"] == (128.0, 256.0)
    for n in (128, 256):
        step = next(s for s in samples if s.key == ("seqpar_decode", 0, n, 2))
        merge = next(s for s in samples if s.key == ("seqpar_decode_merge", 0, n, 2))
        comm = next(s for s in samples if s.key == ("seqpar_decode_comm", 0, n, 2))
        assert 0 < merge.median_ms < step.median_ms  # the merge is a part of the step
        # so are the collectives (wall clock, mean of the ranks; both means over the steps, so per repetition too)
        assert 0 < comm.median_ms < step.median_ms
    assert sp.decode_comm is not None and sp.decode_comm.domain["context_tokens"] == (128.0, 256.0)


def test_resume_spawns_nothing(swept):
    path, _ = swept
    with SampleLog.open(path, {"t": 1}) as log:
        assert measure_seqpar(CONFIG, 2, log, lengths=(128, 256)) == 0


def test_degree_grid_adds_p4_and_reuses_p1(swept, capsys):
    """P = 4 (four ranks, allowed here although the machine may have fewer cores) joins P = 2: one new pair per
    length, the P = 1 rows reused, and a sequence_parallel[4] section labelled oversubscribed when it was."""
    path, _ = swept
    with SampleLog.open(path, {"t": 1}) as log:
        assert measure_seqpar(CONFIG, 1, log, lengths=(128,), degrees=(2, 4), max_ranks=4, deadline_s=slack(40)) == 1
    samples = read_samples(path)
    keys = [s.key for s in samples]
    assert len(keys) == len(set(keys))  # P = 1 at 128 tokens was not measured again
    assert {("seqpar_prefill", 0, 128, 4), ("seqpar_merge", 0, 128, 4)} <= set(keys)
    sections = seqpar_section(samples, "test", cpus=2)
    assert sorted(sections) == [2, 4]
    four = sections[4]
    assert [r.context_tokens for r in four.rows] == [128] and four.merge is None  # one length: no fit
    one = next(s for s in samples if s.key == ("seqpar_prefill", 0, 128, 1))
    p4 = next(s for s in samples if s.key == ("seqpar_prefill", 0, 128, 4))
    merge4 = next(s for s in samples if s.key == ("seqpar_merge", 0, 128, 4))
    assert four.rows[0].speedup == pytest.approx(speedup(one, p4, merge4))
    assert "OVERSUBSCRIBED" in four.note and "OVERSUBSCRIBED" not in sections[2].note


def test_degree_above_cpu_count_is_skipped_with_a_reason(tmp_path, capsys):
    with SampleLog.open(tmp_path / "s.samples.csv", {"t": 2}) as log:
        assert measure_seqpar(CONFIG, 1, log, lengths=(128,), degrees=(4,), max_ranks=2) == 0
        assert not log.samples
    assert "P = 4 skipped" in capsys.readouterr().err
