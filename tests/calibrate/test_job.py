"""A quick CPU calibration of tiny random models runs end to end: profile, samples, plots, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tripath.calibrate.assemble import full_depth_points
from tripath.calibrate.fit import FitRefused
from tripath.calibrate.job import run_calibration
from tripath.calibrate.job_config import CalibrationJob
from tripath.calibrate.presets import Preset
from tripath.calibrate.samples import read_samples
from tripath.calibrate.target import TargetSpec
from tripath.calibrate.timer import TimerConfig
from tripath.cli.main import main
from tripath.engine.model.config import PRESETS
from tripath.profile.profile import load_profile

GRID = Preset("test", prefill_new=(8, 32, 64), prefill_context=(0, 32), decode_batch=(1, 2, 4),
              decode_context=(16, 64), timer=TimerConfig(warmup=1, reps=2))


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "cpu-tiny-gqa.json"
    job = CalibrationJob(TargetSpec(preset="tiny-gqa"), GRID, str(out), progress=False, force=True,
                         command="test")
    return run_calibration(job)


def test_profile_is_valid_and_measured(calibrated):
    profile = load_profile(calibrated.profile_path)  # the file on disk validates
    assert profile == calibrated.profile
    assert profile.source == "measured"
    assert profile.key.hardware == "cpu" and profile.key.dtype == "fp32" and profile.key.tp == 1
    config = PRESETS["tiny-gqa"]
    # 2 (K, V) x 2 layers x 2 KV heads x 8 dims x 4 bytes = 256 bytes per token
    assert profile.model.kv_bytes_per_token == 2 * config.num_layers * config.num_kv_heads * 8 * 4 == 256
    assert profile.model.params == config.num_params()
    assert profile.provenance.torch_version is not None and profile.provenance.command == "test"


def test_domains_and_fits_cover_the_grid(calibrated):
    prefill, decode = calibrated.profile.costs["prefill"], calibrated.profile.costs["decode"]
    assert prefill.domain == {"new_tokens": (8, 64), "context_tokens": (0, 32)}
    assert decode.domain == {"batch": (1, 4), "total_context": (16, 256)}  # batch x per-sequence context
    assert prefill.fit.n_samples == decode.fit.n_samples == 6
    assert all(c.source == "fitted" for c in prefill.coefficients.values())
    # one torch thread on CPU: timed by that thread's CPU time, so the median is fitted
    assert "(median_ms)" in prefill.fit.data and "time.thread_time" in prefill.note


def test_samples_and_plots_beside_the_profile(calibrated):
    rows = read_samples(calibrated.samples_path)
    assert len(rows) == 12 and all(r.reps == 2 and r.min_ms <= r.median_ms <= r.max_ms for r in rows)
    assert {p.name for p in calibrated.plots} == {"cpu-tiny-gqa.fit-prefill.png", "cpu-tiny-gqa.fit-decode.png"}
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in calibrated.plots)
    # the fit reproduces its own samples within its stated train error
    x1, x2, ms = full_depth_points(rows, "decode", 2, "median")
    model = calibrated.profile.costs["decode"]
    predicted = np.array([model.evaluate(batch=a, total_context=b) for a, b in zip(x1, x2, strict=True)])
    assert np.mean(np.abs(predicted - ms) / ms) == pytest.approx(model.fit.train_mape, rel=1e-3)


def test_scaled_model_extrapolates_per_layer(tmp_path):
    grid = Preset("t", (16, 32, 48), (0,), (1, 2, 4, 8), (16,), TimerConfig(warmup=0, reps=1))
    job = CalibrationJob(TargetSpec(preset="tiny-target", layers_timed=2), grid, str(tmp_path / "s.json"),
                         progress=False, force=True, plots=False, statistic="median")
    result = run_calibration(job)
    rows = read_samples(result.samples_path)
    assert {r.layers for r in rows} == {1, 2}  # 2 of tiny-target's 6 layers were built
    by = {(r.sweep, r.layers, r.x1, r.x2): r.median_ms for r in rows}
    x1, _, ms = full_depth_points(rows, "prefill", 6)
    for t, total in zip(x1, ms, strict=True):
        one, two = by[("prefill", 1, int(t), 0)], by[("prefill", 2, int(t), 0)]
        assert total == pytest.approx(one + 5 * max(0.0, two - one))  # t(1) + (6 - 1) x per-layer
    assert result.profile.model.layers == 6
    assert "extrapolated per layer" in result.profile.model.note
    assert any("Scaled" in n for n in result.profile.notes)


def test_poor_fit_is_refused_and_nothing_written(tmp_path, capsys):
    out = tmp_path / "r.json"
    job = CalibrationJob(TargetSpec(preset="tiny-mha"), GRID, str(out), progress=False, plots=False,
                         max_holdout_mape=1e-9)
    with pytest.raises(FitRefused, match="exceeds the threshold") as err:
        run_calibration(job)
    assert "--force" in str(err.value)
    assert not out.exists() and (tmp_path / "r.samples.csv").exists()  # samples kept for a refit
    forced = run_calibration(CalibrationJob(TargetSpec(preset="tiny-mha"), GRID, str(out), progress=False,
                                            plots=False, max_holdout_mape=1e-9, force=True))
    assert forced.measured_points == 0 and out.exists()
    assert any(n.startswith("Written with --force despite") for n in forced.profile.notes)
    before = out.read_bytes()
    with pytest.raises(FitRefused):
        run_calibration(job)  # a refused rerun leaves the existing profile exactly as it was
    assert out.read_bytes() == before


def test_cli_calibrate_refusal_exit_code_and_show(tmp_path, capsys):
    out = tmp_path / "c.json"
    code = main(["calibrate", "--model-config", "tiny-mha", "--preset", "quick", "--out", str(out),
                 "--no-progress", "--max-holdout-mape", "1e-9"])
    assert code == 3 and not out.exists()
    assert "calibration refused" in capsys.readouterr().err
    assert main(["calibrate", "--model-config", "tiny-mha", "--out", str(out), "--no-progress",
                 "--max-holdout-mape", "1e-9", "--force", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["measured_points"] == 0 and summary["forced_despite"]
    assert main(["profile", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "source: measured" in text and "costs.decode: decode_v2" in text and "absent sections" in text
    assert main(["profile", "plot", str(out), "--out", str(tmp_path / "plots")]) == 0
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["c.decode.png", "c.prefill.png"]
    capsys.readouterr()
    # the plots folder is written as a unit: a second run is refused without --replace, replaces it whole with it
    (tmp_path / "plots" / "stale.png").write_bytes(b"old")
    assert main(["profile", "plot", str(out), "--out", str(tmp_path / "plots")]) == 2
    assert "--replace" in capsys.readouterr().err and (tmp_path / "plots" / "stale.png").exists()
    assert main(["profile", "plot", str(out), "--out", str(tmp_path / "plots"), "--replace"]) == 0
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["c.decode.png", "c.prefill.png"]
    assert f"wrote {tmp_path / 'plots' / 'c.decode.png'}" in capsys.readouterr().out


def test_gpu_memory_budget_and_override():
    from tripath.calibrate.hardware import SPECS
    from tripath.calibrate.job import _memory

    hw = SPECS["a100-80gb"].hardware()
    job = CalibrationJob(TargetSpec(preset="llama2-7b"), GRID, "x.json", device="cuda")
    weights = PRESETS["llama2-7b"].num_params() * 2
    # 80 GiB x 0.9 - 13.5 GB of fp16 weights
    assert _memory(job, hw, weights, 524288).kv_capacity_bytes == int(80 * 2**30 * 0.9) - weights
    big = PRESETS["llama2-70b"].num_params() * 2  # 138 GB: no room on one 80 GiB device
    with pytest.raises(Exception, match="--kv-capacity-gib"):
        _memory(CalibrationJob(TargetSpec(preset="llama2-70b"), GRID, "x.json", device="cuda"), hw, big, 327680)
    given = CalibrationJob(TargetSpec(preset="llama2-70b"), GRID, "x.json", device="cuda", kv_capacity_bytes=2**34)
    assert _memory(given, hw, big, 327680).kv_capacity_bytes == 2**34
