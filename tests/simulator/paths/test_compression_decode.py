"""A compressed decode step priced per (batch, context): decode_extra in the profile, the simulator's use of it,
its fit from the calibration rows, and the grid sweep on a small model."""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest
import torch

from tests.helpers import TINY
from tripath.calibrate.samples import Sample, SampleLog
from tripath.calibrate.sweeps.compression_decode import PREFIX, decode_extra, measure_decode_grid
from tripath.core.errors import InputError
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.profile.cost_model import Coefficient
from tripath.profile.dequant import COEFFICIENTS, UNITS, DecodeDequant
from tripath.profile.profile import CompressionMode
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.compression import CompressionPhysics
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep
from tripath.simulator.scenario.strategy import CompressionSpec, SpeculativeSpec, StrategySpec
from tripath.simulator.step_model import Decode

Q = {"q0": 1.0, "q_seq": 0.5, "q_ctx": 0.002, "q_len": 0.004}


def _extra(q: dict[str, float] = Q) -> DecodeDequant:
    return DecodeDequant({n: Coefficient(v, UNITS[n], "fitted", "test") for n, v in q.items()},
                         ((1, 128, 3.0, 4.5), (4, 512, 4.0, 7.0)))


def _profile(extra: DecodeDequant | None, ratio: float | None = None):
    """cpu-tiny whose int8 mode has ``extra`` (and decode_overhead_ratio ``ratio`` when given)."""
    mode = dataclasses.replace(TINY.compression["int8"], decode_extra=extra)
    if ratio is not None:
        mode = dataclasses.replace(mode, decode_overhead_ratio=Coefficient(ratio, "ratio", "derived", "test"))
    return dataclasses.replace(TINY, compression={**TINY.compression, "int8": mode})


def _step_s(profile, decodes: list[Decode]) -> float:
    step = PathStep(RunCosts.from_profile(profile, StrategySpec(compression=CompressionSpec("int8")), ["dialogue"],
                                          profile.kv_capacity_bytes), np.random.default_rng(0))
    return step.step([], decodes, sum(d.context for d in decodes)).seconds


def test_extra_is_added_to_the_decode_step_by_hand():
    decodes = [Decode(0, 0, 1000, 4), Decode(1, 0, 3000, 4)]
    # cpu-tiny is measured: real_engine's attention reads the longest context in whole 16-token blocks
    # (engine_rules.decode_block_tokens), so B = 2, S = 2 x 3008 = 6016, S / B = 3008
    extra = 1.0 + 0.5 * 2 + 0.002 * 6016 + 0.004 * 3008  # = 26.064 ms
    with_extra = _step_s(_profile(_extra()), decodes)
    plain = _step_s(_profile(None, ratio=1.0), decodes)  # ratio 1, no extra: the full-precision step
    assert with_extra - plain == pytest.approx(extra / 1000, rel=1e-9)
    # the batch-1 ratio is then only a summary: changing it does not change the price
    assert _step_s(_profile(_extra(), ratio=7.0), decodes) == with_extra


def test_decode_fn_takes_arrays_and_matches_scalars():
    physics = CompressionPhysics("int8", _profile(_extra()).compression["int8"])
    fn = physics.decode_fn(lambda b, s: 2.0 + 0.1 * b + 0.001 * np.asarray(s))
    contexts = np.array([64.0, 900.0, 5000.0])
    assert fn(3, contexts).tolist() == [fn(3, float(s)) for s in contexts]
    assert fn(3, 900.0) == pytest.approx(2.0 + 0.3 + 0.9 + 1.0 + 1.5 + 0.002 * 900 + 0.004 * 300, rel=1e-12)


def test_absent_field_prices_exactly_as_the_ratio():
    base = _profile(None)
    physics = CompressionPhysics("int8", base.compression["int8"])
    r = base.compression["int8"].decode_overhead_ratio.value
    cost = IterationCost.from_profile(base)
    fn = physics.decode_fn(cost.decode_ms)
    contexts = np.array([100.0, 2000.0, 30000.0])
    assert np.array_equal(fn(4, contexts), r * cost.decode_ms(4, contexts))  # bit for bit
    raw = base.compression["int8"].to_dict()
    assert "decode_extra" not in raw  # an old profile round-trips without the field
    assert CompressionMode.parse(json.loads(json.dumps(raw)), None, "compression.int8") == base.compression["int8"]


def test_round_trip_and_bad_input():
    mode = _profile(_extra()).compression["int8"]
    raw = json.loads(json.dumps(mode.to_dict()))
    assert CompressionMode.parse(raw, None, "compression.int8") == mode
    bad = json.loads(json.dumps(raw))
    del bad["decode_extra"]["coefficients"]["q_len"]
    with pytest.raises(InputError, match=r"compression\.int8\.decode_extra\.coefficients: must name exactly"):
        CompressionMode.parse(bad, "p.json", "compression.int8")
    bad = json.loads(json.dumps(raw))
    bad["decode_extra"]["coefficients"]["q_ctx"]["value"] = -0.1
    with pytest.raises(InputError, match=r"decode_extra\.coefficients\.q_ctx"):
        CompressionMode.parse(bad, "p.json", "compression.int8")
    bad = json.loads(json.dumps(raw))
    bad["decode_extra"]["typo"] = 1
    with pytest.raises(InputError, match=r"decode_extra\.typo: unknown field"):
        CompressionMode.parse(bad, "p.json", "compression.int8")


def _rows(q: dict[str, float]) -> list[Sample]:
    """A 3 x 3 grid whose compressed step is the full-precision one plus exactly q's formula."""
    rows = []
    for b in (1, 4, 8):
        for c in (128, 512, 1024):
            s = b * c
            fp = 3.0 + 0.1 * b + 0.0005 * s
            mode = fp + q["q0"] + q["q_seq"] * b + q["q_ctx"] * s + q["q_len"] * c
            rows += [Sample(PREFIX + "fp", 6, b, s, fp, fp, fp, 16),
                     Sample(PREFIX + "int8", 6, b, s, mode, mode, mode, 16)]
    return rows


def test_fit_recovers_known_coefficients():
    q = {"q0": 0.9, "q_seq": 0.18, "q_ctx": 0.001, "q_len": 0.0037}
    got = decode_extra(_rows(q), "int8", "synthetic")
    assert got is not None and got.fit is not None
    for name in COEFFICIENTS:
        assert got.coefficients[name].value == pytest.approx(q[name], rel=1e-6, abs=1e-9)
    assert got.fit.max_ape < 1e-9 and got.fit.n_samples == 9 and len(got.points) == 9
    assert decode_extra(_rows(q)[:8], "int8", "too few") is None  # 4 points on both sides: not identifiable


@pytest.fixture(scope="module")
def small_model(one_torch_thread) -> LlamaModel:
    return LlamaModel(dataclasses.replace(PRESETS["tiny-gqa"], vocab_size=264), torch.Generator().manual_seed(0))


def test_grid_sweep_on_a_small_model_and_resume(small_model, tmp_path):
    points = [(1, 32), (1, 96), (2, 32), (2, 96), (4, 32), (4, 96)]
    with SampleLog.open(tmp_path / "s.samples.csv", {"test": 1}) as log:
        assert measure_decode_grid(small_model, ("int8",), log, time.thread_time, points) == 12
        assert measure_decode_grid(small_model, ("int8",), log, time.thread_time, points) == 0  # resumes
        rows = {(s.sweep, s.x1, s.x2): s for s in log.samples}
    assert set(rows) == {(PREFIX + m, b, b * c) for m in ("fp", "int8") for b, c in points}
    assert all(s.reps == 16 and 0 < s.min_ms <= s.median_ms <= s.max_ms for s in rows.values())
    got = decode_extra(list(rows.values()), "int8", "small model")
    assert got is not None and len(got.points) == 6
    assert all(c.value >= 0 and c.source == "fitted" for c in got.coefficients.values())
    # dequantizing 4 x 96 cached tokens per layer is work the paged pool does not do
    assert rows[(PREFIX + "int8", 4, 384)].median_ms > rows[(PREFIX + "fp", 4, 384)].median_ms


def _round_s(profile, decodes: list[Decode]) -> float:
    # without the per-sequence round cost (round_per_sequence, priced in compressed batch-1 steps): the verify's
    # dequantization alone is what the test computes
    profile = dataclasses.replace(profile, speculative=dataclasses.replace(profile.speculative,
                                                                           round_per_sequence=None))
    strategy = StrategySpec(speculative=SpeculativeSpec(k=4), compression=CompressionSpec("int8"))
    step = PathStep(RunCosts.from_profile(profile, strategy, ["code"], profile.kv_capacity_bytes),
                    np.random.default_rng(0))
    return step.step([], decodes, sum(d.context for d in decodes)).seconds


def test_speculative_round_dequantizes_in_the_verify_rows_only():
    # B = 2, K = 4: 10 verify rows; cpu-tiny is measured, so S = 2 x 3008 = 6016 (the longest in 16-token blocks)
    decodes = [Decode(0, 0, 1000, 100), Decode(1, 0, 3000, 100)]
    # the verify reads 2 x 5 rows' contexts (5 x 6016 tokens), the chunk loop over the longest once (S / B = 3008)
    extra = 1.0 + 0.5 * 10 + 0.002 * 30_080 + 0.004 * 3008  # = 78.192 ms; the draft's 4 passes add none
    plain = _round_s(_profile(None, ratio=1.0), decodes)  # same rng seed: the same K and acceptance draws
    assert _round_s(_profile(_extra()), decodes) - plain == pytest.approx(extra / 1000, rel=1e-9)
