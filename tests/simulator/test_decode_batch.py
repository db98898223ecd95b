"""The loop -> model contract's batch view (DecodeBatch) and the scalar decode cost: same results, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import SEED, TINY
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep, TransformedStep, Transforms
from tripath.simulator.scenario.strategy import (
    CompressionSpec,
    SequenceParallelSpec,
    SpeculativeSpec,
    StrategySpec,
    TieredSpec,
)
from tripath.simulator.step_model import BaselineStep, Decode, DecodeBatch, PrefillChunk, ones

DECODES = [Decode(0, 0, 1200, 40), Decode(7, 1, 300, 1), Decode(3, 0, 9000, 5)]


def test_batch_of_decodes_round_trips():
    batch = DecodeBatch.of(DECODES)
    assert len(batch) == 3 and batch.total_context == 10_500
    assert list(batch) == DECODES and batch[1] == DECODES[1]
    assert (batch.requests, batch.tasks, batch.contexts, batch.remaining) == (
        [0, 7, 3], [0, 1, 0], [1200, 300, 9000], [40, 1, 5])


def _path_step(seed: int) -> PathStep:
    strategy = StrategySpec(speculative=SpeculativeSpec(k=4, adaptive=True), tiered=TieredSpec(chunk_tokens=64),
                            compression=CompressionSpec("int8"))
    return PathStep(RunCosts.from_profile(TINY, strategy, ("dialogue", "code"), TINY.kv_capacity_bytes),
                    np.random.default_rng(seed))


def test_path_step_gives_the_same_result_for_a_batch_and_for_decode_objects():
    a, b = _path_step(5), _path_step(5)
    prefills = [PrefillChunk(9, 1, 700, 0, True)]
    for r in range(30):  # adaptive K and tier state evolve: every iteration must agree
        decodes = [Decode(i, i % 2, 2000 + 37 * r + i, 50 - r) for i in range(6)]
        live = sum(d.context for d in decodes) + 700
        x = a.step(prefills if r % 7 == 0 else [], decodes, live)
        y = b.step(prefills if r % 7 == 0 else [], DecodeBatch.of(decodes), live)
        assert x.seconds == y.seconds and x.paging_s == y.paging_s and x.paging_bytes == y.paging_bytes
        assert x.emitted.tolist() == y.emitted.tolist() and x.accepted.tolist() == y.accepted.tolist()
        assert x.rounds.tolist() == y.rounds.tolist()


@pytest.mark.parametrize(("profile", "strategy"), [
    (SEED, StrategySpec()),
    (TINY, StrategySpec()),
    (SEED, StrategySpec(sequence_parallel=SequenceParallelSpec(2))),
    (TINY, StrategySpec(compression=CompressionSpec("int8"), sequence_parallel=SequenceParallelSpec(2))),
])
def test_scalar_decode_cost_equals_the_array_one_bit_for_bit(profile, strategy):
    """BaselineStep prices a decode-only iteration on a scalar; replica.py's reference and fast path on arrays."""
    cost = Transforms(RunCosts.from_profile(profile, strategy, (), profile.kv_capacity_bytes)).cost
    rng = np.random.default_rng(1)
    for batch in (1, 2, 7, 64, 300):
        contexts = np.concatenate([rng.integers(1, 2_000_000, 200), [1, 4096, 8191, 32_768, 10**7]])
        array = cost.decode_s(batch, contexts)
        assert [cost.decode_one_s(batch, int(c)).hex() for c in contexts] == [float(v).hex() for v in array]


def test_baseline_and_transformed_steps_accept_either_form():
    base = BaselineStep(IterationCost.from_profile(SEED), 327_680, SEED.kv_capacity_bytes)
    x, y = base.step([], DECODES, 10_500), base.step([], DecodeBatch.of(DECODES), 10_500)
    assert (x.seconds, x.emitted.tolist()) == (y.seconds, y.emitted.tolist()) == (x.seconds, [1, 1, 1])
    on = StrategySpec(sequence_parallel=SequenceParallelSpec(2))
    step = TransformedStep(Transforms(RunCosts.from_profile(SEED, on, (), SEED.kv_capacity_bytes)))
    x, y = step.step([], DECODES, 10_500), step.step([], DecodeBatch.of(DECODES), 10_500)
    assert (x.seconds, x.merge_s, x.emitted.tolist()) == (y.seconds, y.merge_s, y.emitted.tolist())


def test_ones_is_a_read_only_view_of_the_right_length():
    assert ones(0).tolist() == [] and ones(3).tolist() == [1, 1, 1]
    big = ones(1000)
    assert len(big) == 1000 and big.dtype == np.int64 and (big == 1).all()
    with pytest.raises(ValueError):
        big[0] = 2
