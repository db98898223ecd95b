"""A speculative round at batch B > 1: the per-sequence extra w (tripath/calibrate/sweeps/spec_batch.py), the profile
field that carries it, and what PathStep charges with it; hand-computed values."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import SEED
from tripath.calibrate.samples import Sample
from tripath.calibrate.sweeps.spec_batch import BATCH_SWEEPS, batch_medians, round_per_sequence
from tripath.calibrate.sweeps.spec_sections import is_spec_sweep
from tripath.core.errors import InputError
from tripath.profile.profile import Coefficient, Speculative
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep
from tripath.simulator.scenario.strategy import SpeculativeSpec, StrategySpec
from tripath.simulator.step_model import Decode

# SEED: speculative.k = 5
W = Coefficient(0.3, "target steps", "measured", "test")


def test_fit_recovers_w_from_rounds_built_with_it() -> None:
    # decode(B) = 4, 5, 7 ms; round(1) = 10 ms; w = 0.2: round(B) = 10 d(B) / 4 + (B - 1) 0.2 x 4
    decodes = {1: 4.0, 2: 5.0, 4: 7.0}
    rounds = {1: 10.0, 2: 12.5 + 0.8, 4: 17.5 + 2.4}
    assert round_per_sequence(rounds, decodes) == pytest.approx(0.2, rel=1e-12)


def test_fit_is_zero_where_the_batch_one_ratio_already_scales_and_none_without_data() -> None:
    decodes = {1: 4.0, 2: 5.0, 4: 7.0}
    assert round_per_sequence({1: 10.0, 2: 12.5, 4: 17.5}, decodes) == 0.0
    assert round_per_sequence({1: 10.0, 2: 11.0, 4: 12.0}, decodes) == 0.0  # cheaper than scaling: clipped
    assert round_per_sequence({2: 12.0}, decodes) is None  # no B = 1
    assert round_per_sequence({1: 10.0}, decodes) is None  # no B > 1


def test_batch_rows_are_spec_rows_read_back_by_k() -> None:
    rows = [Sample(BATCH_SWEEPS[0], 6, 1, 4, 10.0, 9.0, 11.0, 5), Sample(BATCH_SWEEPS[1], 6, 1, 4, 4.0, 3.0, 5.0, 5),
            Sample(BATCH_SWEEPS[0], 6, 2, 4, 13.3, 9.0, 11.0, 5), Sample(BATCH_SWEEPS[1], 6, 2, 4, 5.0, 3.0, 5.0, 5),
            Sample(BATCH_SWEEPS[0], 6, 2, 2, 99.0, 9.0, 99.0, 5)]  # another K: not read at K = 4
    assert all(is_spec_sweep(name) for name in BATCH_SWEEPS)
    assert batch_medians(rows, 4) == ({1: 10.0, 2: 13.3}, {1: 4.0, 2: 5.0})
    assert round_per_sequence(*batch_medians(rows, 4)) == pytest.approx((13.3 - 12.5) / 4.0)


def test_profile_field_round_trips_and_is_absent_unless_measured() -> None:
    spec = dataclasses.replace(SEED.speculative, round_per_sequence=W)
    assert Speculative.parse(spec.to_dict(), None, "speculative") == spec
    assert "round_per_sequence" not in SEED.speculative.to_dict()
    with pytest.raises(InputError, match=">= 0"):  # a round never gets cheaper per sequence (the fit clips at 0)
        dataclasses.replace(SEED.speculative, round_per_sequence=Coefficient(-0.1, "target steps", "measured", "x"))


def _step(profile: object, k: int = 3, proposer: str = "draft") -> PathStep:
    return PathStep(RunCosts.from_profile(profile, StrategySpec(speculative=SpeculativeSpec(k=k, proposer=proposer)),
                                          ["code"], profile.kv_capacity_bytes), np.random.default_rng(0))


def test_a_round_of_b_sequences_adds_b_minus_1_times_w_k_over_k_profile_decode_steps() -> None:
    with_w = dataclasses.replace(SEED, speculative=dataclasses.replace(SEED.speculative, round_per_sequence=W))
    cost = IterationCost.from_profile(SEED)
    decodes = [Decode(0, 0, 1000, 100), Decode(1, 0, 2000, 100), Decode(2, 0, 3000, 100)]  # all propose K = 3
    extra = _step(with_w).step([], decodes, 6000).seconds - _step(SEED).step([], decodes, 6000).seconds
    # (B - 1) w K / k_profile batch-1 decode steps at the mean context 2000: 2 x 0.3 x 3 / 5
    assert extra == pytest.approx(2 * 0.3 * 3 / 5 * float(cost.decode_ms(1, 2000)) / 1000, rel=1e-9)
    one = [Decode(0, 0, 1000, 100)]  # batch 1: the measured batch-1 ratio alone
    assert _step(with_w).step([], one, 1000).seconds == _step(SEED).step([], one, 1000).seconds
