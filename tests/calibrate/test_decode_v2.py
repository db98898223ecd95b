"""decode_v2: decode_v1 plus a fixed step from batch 2 (CPU BLAS gemv at one row, gemm from two)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import assert_fast_equals_reference, poisson_requests
from tripath.calibrate.fit import fit_formula
from tripath.calibrate.hardware import SPECS
from tripath.calibrate.published.projection import project_profile
from tripath.calibrate.sweeps.decode import DECODE
from tripath.profile.formulas import FORMULAS, decode_v1, decode_v2
from tripath.profile.profile import Coefficient, CostModel, Profile, load_profile, resolve_profile, save_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.cluster import ClusterConfig
from tripath.simulator.loop.replica import ReplicaConfig

COEF = {"d0": 3.2, "d_multi": 0.62, "d_seq": 0.35, "d_ctx": 2.5e-4}


def with_decode_v2(profile: Profile, coef: dict[str, float] = COEF) -> Profile:
    """The profile with its decode cost replaced by a decode_v2 model on the same domain."""
    dec = profile.costs["decode"]
    units = {"d0": "ms", "d_multi": "ms", "d_seq": "ms/sequence", "d_ctx": "ms/token"}
    model = CostModel("decode_v2", {k: Coefficient(v, units[k], "fitted", "test") for k, v in coef.items()},
                      dec.inputs, dec.domain, None, "test")
    return dataclasses.replace(profile, costs={**profile.costs, "decode": model})


def test_step_from_batch_two_by_hand():
    # B=1: 3.2 + 0 + 0.35 + 0.00025*1000 = 3.8; B=2: 3.2 + 0.62 + 0.70 + 0.5 = 5.02
    assert decode_v2(batch=1, total_context=1000, **COEF) == pytest.approx(3.8)
    assert decode_v2(batch=2, total_context=2000, **COEF) == pytest.approx(5.02)
    # the jump from 1 to 2 is d_multi + d_seq + d_ctx*1000; from 2 to 3 only d_seq + d_ctx*1000
    assert decode_v2(batch=3, total_context=3000, **COEF) - 5.02 == pytest.approx(0.35 + 0.25)
    # with d_multi = 0 it is decode_v1; arrays of B and S work elementwise
    v1 = {k: v for k, v in COEF.items() if k != "d_multi"}
    b, s = np.array([1.0, 2.0, 5.0]), np.array([10.0, 20.0, 50.0])
    assert np.array_equal(decode_v2(batch=b, total_context=s, **{**COEF, "d_multi": 0.0}),
                          decode_v1(batch=b, total_context=s, **v1))
    assert decode_v2(batch=b, total_context=s, **COEF) - decode_v1(batch=b, total_context=s, **v1) == \
        pytest.approx([0.0, 0.62, 0.62])


def test_fit_recovers_the_step():
    rng = np.random.default_rng(5)
    b = np.tile(np.array([1.0, 2.0, 3.0, 4.0, 8.0, 16.0]), 10)
    s = b * rng.integers(16, 1024, len(b))
    y = decode_v2(batch=b, total_context=s, **COEF) * (1 + 0.01 * rng.standard_normal(len(b)))
    fit = fit_formula("decode_v2", {"batch": b, "total_context": s}, y, data="synthetic")
    for name, value in COEF.items():
        assert fit.coefficients[name] == pytest.approx(value, rel=0.10), name
    # 1 % gaussian noise: mean |error| = 0.01 * sqrt(2/pi) = 0.8 %
    assert fit.quality.train_mape < 0.012
    # decode_v1 cannot follow the step: its error is larger on the same samples
    v1 = fit_formula("decode_v1", {"batch": b, "total_context": s}, y, data="synthetic")
    assert v1.quality.train_mape > 1.5 * fit.quality.train_mape


def test_sweep_declares_every_coefficient():
    assert DECODE.formula == "decode_v2"
    assert set(DECODE.units) == set(FORMULAS["decode_v2"].coefficients) == set(DECODE.notes)


def test_round_trip_and_hot_path_bit_for_bit(tmp_path):
    profile = with_decode_v2(resolve_profile("cpu-tiny"))
    save_profile(profile, tmp_path / "v2.json")
    loaded = load_profile(tmp_path / "v2.json")
    assert loaded.costs["decode"] == profile.costs["decode"]
    # without the host step overhead decode_s is the decode formula alone, so it must equal decode_ms
    bare = dataclasses.replace(loaded, costs={k: v for k, v in loaded.costs.items() if k != "step_overhead"})
    cost = IterationCost.from_profile(bare)
    for batch, context in [(1, 300), (2, 600), (3, 12345), (16, 8191), (1, 0)]:
        assert cost.decode_s(batch, np.array([context]))[0] == loaded.decode_ms(batch, context) / 1000.0
    assert loaded.decode_ms(2, 0) - loaded.decode_ms(1, 0) == pytest.approx(COEF["d_multi"] + COEF["d_seq"])


def test_v2_profile_fast_path_equals_reference():
    profile = with_decode_v2(resolve_profile("cpu-tiny"))
    requests = poisson_requests(np.random.default_rng(3), 120, 40.0, 600, 60)
    replica = ReplicaConfig(8, 2048, profile.kv_capacity_bytes, profile.model.kv_bytes_per_token)
    fast, _ = assert_fast_equals_reference(requests, ClusterConfig(2, replica),
                                           lambda: IterationCost.from_profile(profile))
    assert sum(r.status == "completed" for r in fast.records) > 0


def test_projection_keeps_d_multi():
    seed = with_decode_v2(resolve_profile("seed-llama2-70b-a100"))
    projected = project_profile(seed, SPECS["h100-sxm"])
    coef = projected.costs["decode"].coefficients
    assert coef["d_multi"].value == pytest.approx(COEF["d_multi"]) and coef["d_multi"].source == "projected"
    memory = 2.039 / 3.35  # A100 / H100 HBM bandwidth: d0 scales, d_multi (kernel choice) does not
    assert coef["d0"].value == pytest.approx(COEF["d0"] * memory, rel=1e-5)
