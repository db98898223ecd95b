"""The gather sweep (tripath/calibrate/sweeps/gather.py): tiered and paged Engines stepped side by side, rows per
(batch, context), resume, and the paging_v1 fit of the per-read difference recovering known coefficients."""

from __future__ import annotations

import pytest
import torch

from tripath.calibrate.samples import Sample, SampleLog, read_samples
from tripath.calibrate.sweeps.gather import GATHER, REPS_FACTOR, gather_link, measure_gather, sweep_names
from tripath.calibrate.sweeps.paging import paging_sections
from tripath.calibrate.timer import TimerConfig
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel

CONFIG = PRESETS["tiny-gqa"]  # 2 layers, 2 KV heads of 8 dims: 2 * 2 * 8 * 4 = 128 bytes per token and layer
POINTS = ((1, 40), (2, 100))
TIERED, PAGED, DIFF = sweep_names(32)
TIMER = TimerConfig(warmup=1, reps=2)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, one_torch_thread):
    model = LlamaModel(CONFIG, torch.Generator().manual_seed(0)).eval()
    path = tmp_path_factory.mktemp("gather") / "x.samples.csv"
    with SampleLog.open(path, {"t": 1}) as log:
        measured = measure_gather(model, TIMER, log, chunk_tokens=32, points=POINTS)
    return model, path, measured


def test_rows_per_point_and_mode(swept):
    _, path, measured = swept
    assert measured == 3 * len(POINTS)
    samples = read_samples(path)
    # x1 = reads per step (batch x 2 layers), x2 = one layer's prompt bytes (tokens x 128)
    keys = {(s.sweep, s.x1, s.x2) for s in samples}
    assert keys == {(sweep, b * 2, t * 128) for sweep in (TIERED, PAGED, DIFF) for b, t in POINTS}
    steps = TIMER.reps * REPS_FACTOR  # repetitions past the warm-up, one per decode step
    assert all(s.reps == steps for s in samples)
    by = {(s.sweep, s.x1): s for s in samples}
    for b, _ in POINTS:
        assert by[(TIERED, 2 * b)].min_ms > 0 and by[(PAGED, 2 * b)].min_ms > 0
        # the differences are paired step by step: their extremes are bounded by the two modes' extremes
        assert by[(DIFF, 2 * b)].max_ms <= by[(TIERED, 2 * b)].max_ms - by[(PAGED, 2 * b)].min_ms + 1e-6


def test_resume_measures_nothing_twice(swept):
    model, path, _ = swept
    before = path.read_text()
    with SampleLog.open(path, {"t": 1}) as log:
        assert measure_gather(model, TIMER, log, chunk_tokens=32, points=POINTS) == 0
    assert path.read_text() == before


def _diff(x1: int, x2: int, ms: float, chunk: int = 256) -> Sample:
    return Sample(sweep_names(chunk)[2], 0, x1, x2, ms, ms, ms, 10)


def test_fit_recovers_setup_and_bandwidth():
    """Differences made from 0.02 ms per read + bytes at 4 GB/s (4e6 bytes per ms): the fit gives both back,
    and the 2K-token figure is the bandwidth term for 2048 tokens of the model's KV."""
    setup, per_ms = 0.02, 4e6
    samples = [_diff(x1, x2, x1 * (setup + x2 / per_ms)) for x1, x2 in ((6, 131072), (6, 524288), (24, 262144))]
    link = gather_link(samples, 3072, "synthetic", 256)
    assert link is not None and link.by_chunk_tokens == {}  # one page size: no per-size fits
    coef = link.cost.coefficients
    assert coef["setup_ms"].value == pytest.approx(setup, rel=1e-4)
    assert coef["bandwidth_gbps"].value == pytest.approx(4.0, rel=1e-4)
    assert link.ms_per_2k_tokens == pytest.approx(2048 * 3072 / per_ms, rel=1e-4)


def test_no_fit_from_noise_alone():
    """A tiering that adds nothing (differences at or below zero) is not fitted: no gather key."""
    samples = [_diff(6, 131072, -0.01), _diff(6, 524288, 0.0), _diff(24, 262144, 0.3)]
    assert gather_link(samples, 3072, "synthetic", 256) is None
    assert GATHER not in paging_sections(samples, 3072, "min", "synthetic")


def test_per_page_size_fits():
    """Two page sizes: ``cost`` is the main size's fit, by_chunk_tokens holds both; smaller pages, more reads of
    chunks, a larger setup: each size's own coefficients come back."""
    rows = [(6, 131072), (6, 524288), (24, 262144)]
    samples = [_diff(x1, x2, x1 * (0.02 + x2 / 4e6), 256) for x1, x2 in rows]
    samples += [_diff(x1, x2, x1 * (0.05 + x2 / 2e6), 64) for x1, x2 in rows]
    link = gather_link(samples, 3072, "synthetic", 256)
    assert sorted(link.by_chunk_tokens) == [64, 256]
    assert link.cost.values() == link.by_chunk_tokens[256].values()
    assert link.cost_for(64).coefficients["setup_ms"].value == pytest.approx(0.05, rel=1e-4)
    assert link.cost_for(64).coefficients["bandwidth_gbps"].value == pytest.approx(2.0, rel=1e-4)
    assert GATHER in paging_sections(samples, 3072, "min", "synthetic")
