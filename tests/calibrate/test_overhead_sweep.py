"""The step-overhead sweep (tripath/calibrate/sweeps/overhead.py) on a tiny model: rows, resume, the fit, the
profile."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from tripath.calibrate.job import run_calibration
from tripath.calibrate.job_config import CalibrationJob
from tripath.calibrate.presets import Preset
from tripath.calibrate.probe import StepProbe
from tripath.calibrate.samples import Sample, SampleLog, read_samples
from tripath.calibrate.sweeps.overhead import (
    REPS_FACTOR,
    fit_overhead,
    measure_overhead,
    overhead_cost,
    overhead_points,
    overhead_rows,
)
from tripath.calibrate.target import TargetSpec
from tripath.calibrate.timer import TimerConfig
from tripath.cli.main import main
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.profile.profile import load_profile
from tripath.simulator.costs import IterationCost

GRID = Preset("test", prefill_new=(8, 32, 64, 1024), prefill_context=(0, 32), decode_batch=(1, 2, 4),
              decode_context=(16, 64), timer=TimerConfig(warmup=1, reps=2))


def test_points_cover_the_decode_grid_and_a_few_prefills() -> None:
    # decodes (B, B); prefills (1, T) for the smallest, middle and largest chunk up to 512 tokens
    assert overhead_points(GRID, 2048) == [(1, 1), (2, 2), (4, 4), (1, 8), (1, 32), (1, 64)]
    assert overhead_points(GRID, 40) == [(1, 1), (2, 2), (4, 4), (1, 8), (1, 32)]  # 64 does not fit 40 positions


def test_sweep_rows_resume_and_leave_the_engine_empty(tmp_path) -> None:
    torch.set_num_threads(1)
    config = PRESETS["tiny-mha"]
    model = LlamaModel(config, torch.Generator().manual_seed(0)).eval()
    max_len = config.max_position_embeddings
    probe = StepProbe(model, GRID.max_step_tokens(max_len), 16, max_sequences=max(GRID.decode_batch))
    points = overhead_points(GRID, max_len)
    with SampleLog.open(tmp_path / "s.samples.csv", {"t": 1}) as log:
        n = measure_overhead(probe, GRID, max_len, config.num_layers, log, time.thread_time, torch.device("cpu"))
        assert n == len(points)
        assert measure_overhead(probe, GRID, max_len, config.num_layers, log, time.thread_time,
                                torch.device("cpu")) == 0  # everything on disk: nothing measured again
    engine = probe.engine
    assert not engine.has_unfinished and engine.kv_manager.blocks_used == 0 and not engine.sequences
    rows = read_samples(tmp_path / "s.samples.csv")
    by = {(r.sweep, r.x1, r.x2): r for r in rows}
    assert len(rows) == 3 * len(points)
    for x1, x2 in points:
        step, forward, diff = by[("overhead_step", x1, x2)], by[("overhead_forward", x1, x2)], by[("overhead", x1, x2)]
        assert step.reps == forward.reps == diff.reps == REPS_FACTOR * GRID.timer.reps
        assert step.min_ms > 0 and forward.min_ms > 0 and diff.min_ms <= diff.median_ms <= diff.max_ms
        # the paired differences lie between the extreme pairs of the two sides
        assert step.min_ms - forward.max_ms - 1e-3 <= diff.median_ms <= step.max_ms - forward.min_ms + 1e-3
    result = fit_overhead(rows, data="test")
    assert result is not None and all(v >= 0 for v in result.coefficients.values())
    seqs, toks, ms, step_ms = overhead_rows(rows)
    predicted = np.array([result.coefficients["o0"] + result.coefficients["o_seq"] * s
                          + result.coefficients["o_tok"] * t for s, t in zip(seqs, toks, strict=True)])
    # host work around a forward: non-negative, and far below the step itself (it is not the forward again)
    assert np.all(predicted >= 0) and np.all(predicted < 0.5 * step_ms)


def _rows(points: list[tuple[int, int, float]]) -> list[Sample]:
    out = []
    for x1, x2, ms in points:
        out += [Sample("overhead", 6, x1, x2, ms, ms, ms, 3), Sample("overhead_step", 6, x1, x2, 10.0, 10, 10, 3)]
    return out


def test_fit_recovers_a_known_line_and_reports_error_against_the_step() -> None:
    # ms = 0.2 + 0.01 N + 0.001 T exactly: decode points (B, B) and prefills (1, T)
    pts = [(b, b, 0.2 + 0.011 * b) for b in (1, 2, 4, 8, 16, 32)] + [(1, t, 0.21 + 0.001 * t) for t in (16, 128, 512)]
    result = fit_overhead(_rows(pts), data="synthetic")
    assert result.coefficients == pytest.approx({"o0": 0.2, "o_seq": 0.01, "o_tok": 0.001}, rel=1e-4, abs=1e-7)
    assert result.quality.train_mape < 1e-5 and result.quality.n_samples == 9
    # a point 0.5 ms off moves the fit; its error is reported against the 10 ms step, not the ~0.2 ms overhead
    noisy = fit_overhead(_rows(pts[:-1] + [(1, 512, 0.722 + 0.5)]), data="synthetic")
    assert 0 < noisy.quality.max_ape <= 0.5 / 10.0 + 1e-9
    # a negative median (noise around ~0) is a valid observation, not a refusal; coefficients stay >= 0
    low = fit_overhead(_rows([(1, 1, -0.05), (2, 2, 0.02), (4, 4, 0.05), (1, 64, 0.01)]), data="synthetic")
    assert all(v >= 0 for v in low.coefficients.values())
    assert fit_overhead([Sample("decode", 6, 1, 64, 3.0, 3.0, 3.0, 3)], data="x") is None
    model, _ = overhead_cost(_rows(pts), data="synthetic", note="n")
    assert model.domain == {"sequences": (1.0, 32.0), "new_tokens": (1.0, 512.0)}
    assert all(c.source == "fitted" for c in model.coefficients.values())


def test_job_and_cli_write_a_profile_the_simulator_prices(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "cpu-tiny-mha.json"
    result = run_calibration(CalibrationJob(TargetSpec(preset="tiny-mha"), GRID, str(out), progress=False,
                                            plots=False, force=True, command="test", step_overhead=True))
    profile = load_profile(out)
    assert "step_overhead" in profile.costs and profile.costs["step_overhead"].fit.n_samples == 6
    assert any(n.startswith("costs.step_overhead:") for n in profile.notes)
    assert result.measured_points > 0
    cost = IterationCost.from_profile(profile)
    assert cost.overhead_ms(2, 2) == pytest.approx(profile.costs["step_overhead"].evaluate(sequences=2, new_tokens=2))
    # the CLI flag: the rows are on disk, so it only refits, and says so in the command line it records
    monkeypatch.setattr("tripath.calibrate.presets.PRESETS", {"quick": GRID})
    assert main(["calibrate", "--model-config", "tiny-mha", "--step-overhead", "--out", str(out), "--force",
                 "--no-progress", "--json"]) == 0
    assert '"measured_points": 0' in capsys.readouterr().out
    assert "--step-overhead" in load_profile(out).provenance.command
