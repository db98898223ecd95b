"""KV compression's prefill overhead: fitted from the sweep's rows, applied to each prefill chunk's work."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import SEED
from tripath.calibrate.samples import Sample
from tripath.calibrate.sweeps.compression import REF_SWEEP, compression_section, prefill_points, prefill_ratio
from tripath.engine.kv.modes import MODES
from tripath.profile.cost_model import Coefficient
from tripath.profile.sections import CompressionMode
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.compression import CompressionPhysics
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep
from tripath.simulator.scenario.strategy import CompressionSpec, StrategySpec
from tripath.simulator.step_model import Decode, PrefillChunk

FP, INT8, WINDOW = MODES.index("fp"), MODES.index("int8"), MODES.index("window")


def _mode_rows(index: int, step_ms: float) -> list[Sample]:
    return [Sample("comp_bytes", 6, index, 0, 1000.0, 1000.0, 1000.0, 2),
            Sample("comp_step", 6, index, 0, step_ms, step_ms, step_ms, 64),
            Sample("comp_agree", 6, index, 0, 60.0, 60.0, 60.0, 64)]


def test_prefill_ratio_is_the_median_ratio_over_lengths():
    # fp 10 / 40 / 100 ms, int8 15 / 100 / 300 ms at 128 / 512 / 1024 tokens: ratios 1.5, 2.5, 3.0 -> 2.5
    rows = {(FP, 128): 10.0, (FP, 512): 40.0, (FP, 1024): 100.0,
            (INT8, 128): 15.0, (INT8, 512): 100.0, (INT8, 1024): 300.0}
    coef = prefill_ratio(rows, FP, INT8, "int8")
    assert coef.value == pytest.approx(2.5, rel=1e-12)
    assert coef.unit == "ratio" and coef.source == "measured"
    assert prefill_ratio(rows, FP, WINDOW, "window") is None  # no rows: prefill unchanged


def test_compression_section_fits_prefill_from_hand_made_rows():
    samples = _mode_rows(FP, 4.0) + _mode_rows(INT8, 6.0) + _mode_rows(WINDOW, 5.0)
    samples += [Sample("comp_prefill", 6, FP, 128, 10.0, 9.0, 11.0, 3),
                Sample("comp_prefill", 6, FP, 512, 40.0, 39.0, 41.0, 3),
                Sample("comp_prefill", 6, INT8, 128, 15.0, 14.0, 16.0, 3),
                Sample("comp_prefill", 6, INT8, 512, 100.0, 99.0, 101.0, 3)]
    section = compression_section(samples, None, "test")
    assert section["int8"].decode_overhead_ratio.value == pytest.approx(1.5)
    assert section["int8"].prefill_overhead_ratio.value == pytest.approx(2.0, rel=1e-12)  # median of 1.5, 2.5
    assert section["window"].prefill_overhead_ratio is None
    # an older sample log (no comp_prefill rows) fits as before: no prefill coefficient
    old = compression_section(_mode_rows(FP, 4.0) + _mode_rows(INT8, 6.0), None, "test")
    assert old["int8"].prefill_overhead_ratio is None


def _mode(prefill: float | None) -> CompressionMode:
    ratio = Coefficient(1.0, "ratio", "derived", "test")
    zero = Coefficient(0.0, "1", "derived", "test")
    return CompressionMode(ratio, ratio, zero, zero,
                           prefill_overhead_ratio=None if prefill is None else Coefficient(prefill, "ratio",
                                                                                          "derived", "test"))


def test_old_profiles_load_and_leave_prefill_unchanged():
    raw = _mode(None).to_dict()
    assert "prefill_overhead_ratio" not in raw  # round trip of an old profile writes what it read
    parsed = CompressionMode.parse(raw, None, "compression.old")
    assert parsed.prefill_overhead_ratio is None
    physics = CompressionPhysics("old", parsed)

    def prefill(t, c):
        return 5.0 + t

    assert physics.prefill_factor == 1.0 and physics.prefill_fn(prefill) is prefill
    new = CompressionMode.parse(_mode(2.5).to_dict(), None, "compression.new")
    assert new.prefill_overhead_ratio.value == 2.5


def test_prefill_fn_scales_the_chunk_work_not_the_fixed_cost():
    physics = CompressionPhysics("m", _mode(2.0))
    f = physics.prefill_fn(lambda t, c: 5.0 + 0.1 * t + 0.001 * t * c)
    assert f(0, 0) == 5.0
    assert f(100, 200) == pytest.approx(5.0 + 2.0 * (10.0 + 20.0))  # 65 ms by hand


def test_a_prefill_iteration_pays_the_ratio_on_its_chunk_work():
    profile = dataclasses.replace(SEED, compression={"m": _mode(1.8)})
    cost = IterationCost.from_profile(profile)

    def step(strategy: StrategySpec) -> float:
        model = PathStep(RunCosts.from_profile(profile, strategy, ["dialogue"], profile.kv_capacity_bytes),
                         np.random.default_rng(0))
        return model.step([PrefillChunk(0, 0, 2048, 0, True)], [Decode(1, 0, 1000, 4)], 3048).seconds

    plain, comp = step(StrategySpec()), step(StrategySpec(compression=CompressionSpec("m")))
    work_ms = float(cost.prefill_ms(2048, 0)) - float(cost.prefill_ms(0, 0))
    # kv_bytes_ratio and decode ratio 1: only the chunk's work changes, by (1.8 - 1) of it
    assert (comp - plain) * 1000 == pytest.approx(0.8 * work_ms, rel=1e-9)


def test_per_length_points_are_fitted_and_interpolated_at_the_chunk_length():
    rows = {(FP, 128): 10.0, (FP, 512): 40.0, (INT8, 128): 15.0, (INT8, 512): 100.0}
    assert prefill_points(rows, FP, INT8) == ((128, 1.5), (512, 2.5))
    mode = dataclasses.replace(_mode(9.0), prefill_overhead_points=((128, 1.5), (512, 2.5)))
    parsed = CompressionMode.parse(mode.to_dict(), None, "compression.m")
    assert parsed.prefill_overhead_points == ((128, 1.5), (512, 2.5))
    physics = CompressionPhysics("m", parsed)
    f = physics.prefill_fn(lambda t, c: 5.0 + 0.1 * np.add(t, c))
    # 320 tokens (200 new after 120 cached) lie halfway: ratio 2.0 (the points win over the scalar 9.0)
    assert f(200, 120) == pytest.approx(5.0 + 2.0 * 32.0)
    assert f(64, 0) == pytest.approx(5.0 + 1.5 * 6.4)  # below the first length: held at 1.5
    assert f(2000, 0) == pytest.approx(5.0 + 2.5 * 200.0)  # above the last: held at 2.5
    arr = f(np.array([200, 64]), np.array([120, 0]))  # the fast path's arrays: same numbers
    assert arr[0] == f(200, 120) and arr[1] == f(64, 0)


def test_prefill_ratio_takes_the_reference_timed_with_the_mode():
    # the fp pass timed 10 / 40 ms; fp timed alternately with int8 (comp_prefill_ref) 12 / 50 ms: the ratios
    # are 15 / 12 and 100 / 50, not 15 / 10 and 100 / 40 (the machine drifted between the passes)
    samples = _mode_rows(FP, 4.0) + _mode_rows(INT8, 6.0)
    samples += [Sample("comp_prefill", 6, FP, 128, 10.0, 9.0, 11.0, 3),
                Sample("comp_prefill", 6, FP, 512, 40.0, 39.0, 41.0, 3),
                Sample("comp_prefill", 6, INT8, 128, 15.0, 14.0, 16.0, 3),
                Sample("comp_prefill", 6, INT8, 512, 100.0, 99.0, 101.0, 3),
                Sample(REF_SWEEP, 6, INT8, 128, 12.0, 11.0, 13.0, 3),
                Sample(REF_SWEEP, 6, INT8, 512, 50.0, 49.0, 51.0, 3)]
    section = compression_section(samples, None, "test")
    assert section["int8"].prefill_overhead_points == ((128, pytest.approx(1.25)), (512, pytest.approx(2.0)))
    assert section["int8"].prefill_overhead_ratio.value == pytest.approx((1.25 + 2.0) / 2, rel=1e-12)
