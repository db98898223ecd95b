"""Sequence-parallel physics: the profile's speedup, interpolation, merge, decode split, GPUs occupied."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.costs import IterationCost
from simulator.path_step import PathStep
from simulator.profile import resolve_profile
from simulator.sp_physics import SpPhysics
from simulator.step_model import Decode, PrefillChunk
from simulator.strategy import SequenceParallelSpec, StrategySpec

SEED = resolve_profile("seed-llama2-70b-a100")  # P = 2: speedup 1.8 at 4K-32K, merge m0 + m_ctx C
TINY = resolve_profile("cpu-tiny")  # P = 2 measured at 512, 1024, 2048 tokens
M0, M_CTX = 3.04348, 0.000371518  # seed sequence_parallel.2.merge (sp_merge_v1)


def _step(profile, degree=2):
    return PathStep(IterationCost.from_profile(profile), profile,
                    StrategySpec(sequence_parallel=SequenceParallelSpec(degree)), ["dialogue"],
                    profile.kv_capacity_bytes, np.random.default_rng(0))


def test_speedup_equals_the_profiles_rows_and_interpolates_between():
    sp = SpPhysics(TINY, 2)
    rows = TINY.sequence_parallel[2].rows
    for row in rows:
        assert sp.speedup(row.context_tokens) == row.speedup
    mid = sp.speedup(768)  # halfway between the 512 and 1024 rows
    assert mid == pytest.approx((rows[0].speedup + rows[1].speedup) / 2)
    assert sp.speedup(100) == rows[0].speedup and sp.speedup(10_000) == rows[-1].speedup


def test_queries_outside_the_rows_are_counted():
    sp = SpPhysics(TINY, 2)
    sp.prefill_ms(10.0, 1024)
    sp.prefill_ms(10.0, 8192)
    sp.decode_ms(1.0, 100)
    assert (sp.queries, sp.outside) == (3, 2)


def test_prefill_time_is_work_over_speedup_plus_merge():
    cost = IterationCost.from_profile(SEED)
    step = _step(SEED)
    result = step.step([PrefillChunk(0, 0, 16_384, 0, True)], [], 0)
    fixed = 2.15916  # prefill_v1's c0 (seed)
    full = 2.15916 + 0.884316 * 16_384 + 1.68041e-05 * 16_384 * 16_385 / 2  # prefill_v1: causal pairs
    assert float(cost._prefill_ms(16_384, 0)) == pytest.approx(full, rel=1e-9)
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
    merge = M0 + M_CTX * 20_000  # at the longest decoding context
    assert result.seconds == pytest.approx((fixed + attention / 2 + merge) / 1000, rel=1e-9)
    assert result.merge_s == pytest.approx(merge / 1000, rel=1e-9)


def test_replica_occupies_tp_times_p_gpus_and_p_times_the_kv():
    step = _step(SEED)
    assert step.gpus == SEED.key.tp * 2
    assert step.device_kv_tokens == 2 * (SEED.kv_capacity_bytes // SEED.model.kv_bytes_per_token)


def test_degree_without_rows_is_an_input_error():
    with pytest.raises(ValueError, match=r"strategy\.sequence_parallel\.degree: no speedup rows for degree 4"):
        _step(SEED, degree=4)
