"""Sequence-parallel physics: the profile's speedup, interpolation, merge, decode split, GPUs occupied."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import SEED, TINY, shipped_scenario_dict
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.seqpar import SpPhysics
from tripath.simulator.paths.step import PathStep, TransformedStep, build_step_model, path_cost
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.strategy import SequenceParallelSpec, StrategySpec
from tripath.simulator.step_model import Decode, PrefillChunk

# SEED: P = 2: speedup 1.8 at 4K-32K, merge m0 + m_ctx C
# TINY: P = 2 measured at 512, 1024, 2048 tokens
M0, M_CTX = 3.04348, 0.000371518  # seed sequence_parallel.2.merge (sp_merge_v1)


def _step(profile, degree=2):
    return PathStep(RunCosts.from_profile(profile, StrategySpec(sequence_parallel=SequenceParallelSpec(degree)),
                                          ["dialogue"], profile.kv_capacity_bytes), np.random.default_rng(0))


def test_speedup_equals_the_profiles_rows_and_interpolates_between():
    sp = SpPhysics(TINY.sequence_parallel[2])
    rows = TINY.sequence_parallel[2].rows
    for row in rows:
        assert sp.speedup(row.context_tokens) == row.speedup
    mid = sp.speedup(768)  # halfway between the 512 and 1024 rows
    assert mid == pytest.approx((rows[0].speedup + rows[1].speedup) / 2)
    assert sp.speedup(100) == rows[0].speedup and sp.speedup(10_000) == rows[-1].speedup


def test_prefill_queries_outside_the_rows_are_counted():
    sp = SpPhysics(TINY.sequence_parallel[2])
    prefill = sp.prefill_fn(lambda tokens, context: 1.0 + tokens, 1.0)
    prefill(0, 0)  # the fixed part: no SP query
    prefill(500, 524)  # reaches 1,024: inside the rows 512-2,048
    prefill(8000, 192)  # reaches 8,192: outside
    assert (sp.queries, sp.outside) == (2, 1)


def test_prefill_time_is_work_over_speedup_plus_merge():
    cost = IterationCost.from_profile(SEED)
    step = _step(SEED)
    result = step.step([PrefillChunk(0, 0, 16_384, 0, True)], [], 0)
    fixed = 2.15916  # prefill_v1's c0 (seed)
    full = 2.15916 + 0.884316 * 16_384 + 1.68041e-05 * 16_384 * 16_385 / 2  # prefill_v1: causal pairs
    assert float(cost.prefill_ms(16_384, 0)) == pytest.approx(full, rel=1e-9)
    merge = M0 + M_CTX * 16_384
    assert result.merge_s == pytest.approx(merge / 1000, rel=1e-9)
    assert result.seconds == pytest.approx((fixed + (full - fixed) / 1.8 + merge) / 1000, rel=1e-9)
    # the one-GPU prefill over the SP prefill approaches the profile's 1.8 as the merge becomes negligible
    assert 1.75 < full / (result.seconds * 1000) < 1.8


def test_decode_splits_attention_over_ranks_and_merges_once():
    step = _step(SEED)
    result = step.step([], [Decode(0, 0, 12_000, 5), Decode(1, 0, 20_000, 5)], 32_000)
    fixed = 2.15916 + 0.884316 * 2  # decode_v1 at B = 2 without context: linear layers on every rank
    attention = 0.00964886 * 32_000
    merge = M0 + M_CTX * 32_000  # one collective for the batch, at its total context
    assert result.seconds == pytest.approx((fixed + attention / 2 + merge) / 1000, rel=1e-9)
    assert result.merge_s == pytest.approx(merge / 1000, rel=1e-9)


def test_sp_alone_is_a_transformed_cost_model():
    """build_step_model gives the baseline's iteration on the SP cost model; a decode at array contexts
    (the fast path's evaluation) equals the scalar one."""
    cost = path_cost(IterationCost.from_profile(SEED), None, SpPhysics(SEED.sequence_parallel[2]))
    contexts = np.array([4096.0, 9000.0, 30_000.0])
    assert cost.decode_s(1, contexts).tolist() == [cost.decode_s(1, np.array([c]))[0] for c in contexts]
    data = shipped_scenario_dict("quickstart")
    scenario = scenario_from_dict({**data, "strategy": {"sequence_parallel": {"degree": 2}}})
    model = build_step_model(RunCosts.for_scenario(scenario, SEED), np.random.default_rng(0))
    assert isinstance(model, TransformedStep) and model.gpus == 2
    result = model.step([], [Decode(0, 0, 16_000, 5)], 16_000)
    assert result.seconds == cost.decode_s(1, np.array([16_000]))[0]
    assert result.merge_s == pytest.approx((M0 + M_CTX * 16_000) / 1000, rel=1e-12)


def test_replica_occupies_tp_times_p_gpus_and_p_times_the_kv():
    step = _step(SEED)
    assert step.gpus == SEED.key.tp * 2
    assert step.device_kv_tokens == 2 * (SEED.kv_capacity_bytes // SEED.model.kv_bytes_per_token)


def test_degree_without_rows_is_an_input_error():
    with pytest.raises(ValueError, match=r"strategy\.sequence_parallel\.degree: no speedup rows for degree 4"):
        _step(SEED, degree=4)
