"""Padded decode attention (real_engine's rule): a decode step is priced at B x the longest context rounded up
to whole KV blocks on measured profiles, at the sum of contexts on others; every loop agrees bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import bits, poisson_requests
from tripath.core.data_dirs import PROFILES_DIR
from tripath.profile.engine_rules import REAL_ENGINE_BLOCK_TOKENS, decode_block_tokens
from tripath.profile.profile import resolve_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.batching import Continuous
from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.loop.stepper import StepperSetup
from tripath.simulator.step_model import BaselineStep, Decode, PrefillChunk


def linear(block: int | None) -> IterationCost:
    """prefill ms = 0.5 + 0.1 T; decode ms = 1 + 0.5 B + 0.01 S: hand-computable."""

    def prefill(tokens, context):
        return 0.5 + 0.1 * tokens

    def decode(batch, total_context):
        return 1.0 + 0.5 * batch + 0.01 * total_context

    return IterationCost(prefill, decode, block_tokens=block)


def tick_costs(block: int | None = 16) -> IterationCost:
    """Whole multiples of 1/1024 s, so boundaries and arrivals collide exactly (the hard cases)."""

    def prefill(tokens, context):
        return 0.9765625 * (10 + tokens // 64)

    def decode(batch, total_context):
        return 0.9765625 * (4 + batch + total_context // 64)

    return IterationCost(prefill, decode, block_tokens=block)


def test_two_sequences_by_hand() -> None:
    """Contexts 20 and 50, blocks of 16: Σ = 70 keys; padded 2 x ceil(50 / 16) x 16 = 2 x 64 = 128 keys."""
    decodes = [Decode(0, 0, 20, 5), Decode(1, 0, 50, 5)]
    summed = BaselineStep(linear(None), 2, 1 << 20).step([], decodes, 70)
    padded = BaselineStep(linear(16), 2, 1 << 20).step([], decodes, 70)
    assert summed.seconds == pytest.approx((1.0 + 1.0 + 0.70) / 1000.0, rel=1e-12)
    assert padded.seconds == pytest.approx((1.0 + 1.0 + 1.28) / 1000.0, rel=1e-12)
    # with a 10-token prompt prefilled beside them: + prefill(10) - prefill(0) = + 1.0 ms
    chunk = [PrefillChunk(2, 0, 10, 0, True)]
    assert BaselineStep(linear(None), 2, 1 << 20).step(chunk, decodes, 70).seconds == pytest.approx(3.70e-3)
    assert BaselineStep(linear(16), 2, 1 << 20).step(chunk, decodes, 70).seconds == pytest.approx(4.28e-3)
    # a chunk continuing a prompt takes the chunked path: the same decode part
    cont = [PrefillChunk(2, 0, 10, 30, True)]
    assert BaselineStep(linear(16), 2, 1 << 20).step(cont, decodes, 100).seconds == pytest.approx(4.28e-3)


def test_keys_at_block_edges() -> None:
    cost = linear(16)
    assert [cost.keys(3, 0, n) for n in (1, 16, 17, 32, 33)] == [48, 48, 96, 96, 144]
    assert linear(None).keys(3, 41, 33) == 41
    # a run of fixed membership: step j is keys(B, Σ + B j, longest + j)
    for block in (None, 16):
        cost = linear(block)
        run = cost.run_keys(3, 40, 15, 40)
        assert run.tolist() == [cost.keys(3, 40 + 3 * j, 15 + j) for j in range(40)]


def test_which_profiles_pad() -> None:
    assert decode_block_tokens(resolve_profile(str(PROFILES_DIR / "cpu-tiny.json"))) == REAL_ENGINE_BLOCK_TOKENS
    for name in ("seed-llama2-70b-a100", "published-llama2-7b-a100", "published-llama2-70b-tp2-h100"):
        profile = resolve_profile(name)
        assert decode_block_tokens(profile) is None
        assert IterationCost.from_profile(profile).block_tokens is None


def test_block_size_is_the_engines_and_the_calibrations() -> None:
    from tripath.engine.engine_config import EngineConfig

    assert REAL_ENGINE_BLOCK_TOKENS == EngineConfig().block_size
    meta = json.loads((PROFILES_DIR / "cpu-tiny.samples.meta").read_text())
    assert meta["block_size"] == REAL_ENGINE_BLOCK_TOKENS


def measured_cost() -> IterationCost:
    return IterationCost.from_profile(resolve_profile(str(PROFILES_DIR / "cpu-tiny.json")))


CASES = [
    # (replicas, rate, max_batch, kv tokens, cost, on_ticks)
    (1, 40.0, 8, 4096, tick_costs, True),
    (3, 120.0, 16, 3000, tick_costs, True),
    (2, 5.0, 64, 1 << 20, lambda: linear(16), False),
    (2, 200.0, 12, 1 << 20, measured_cost, False),  # the profile's domain: some steps are extrapolations
]


@pytest.mark.parametrize(("replicas", "rate", "max_batch", "kv_tokens", "make_cost", "on_ticks"), CASES)
def test_fast_reference_and_loop_agree_with_padding(replicas, rate, max_batch, kv_tokens, make_cost, on_ticks) -> None:
    requests = poisson_requests(np.random.default_rng(replicas * 7 + max_batch), 300, rate, 600, 60, on_ticks)
    replica = ReplicaConfig(max_batch, 700, kv_tokens * 2, 2)
    config = ClusterConfig(replicas, replica)
    fast = simulate_requests(requests, config, make_cost(), fast=True)
    ref = simulate_requests(requests, config, make_cost(), fast=False)
    setup = StepperSetup(lambda i: BaselineStep(make_cost(), replica.kv_bytes_per_token, replica.kv_capacity_bytes),
                         lambda i: Continuous(replica.max_batch_size, replica.max_batched_tokens))
    stepped = simulate_requests(requests, config, make_cost(), setup=setup)
    assert bits(fast.records) == bits(ref.records) == bits(stepped.records)
    assert fast.extrapolations == ref.extrapolations == stepped.extrapolations
    for f, r, s in zip(fast.replicas, ref.replicas, stepped.replicas, strict=True):
        assert (f.busy_s, f.iterations) == (r.busy_s, r.iterations) == (s.busy_s, s.iterations)
    assert fast.events < ref.events  # the fast path still advances runs, not iterations


def test_padding_never_cheaper_and_changes_mixed_batches() -> None:
    """Padded keys >= Σ contexts, so every request finishes no earlier on the same arrivals; prompts of
    different lengths make the two differ."""
    requests = poisson_requests(np.random.default_rng(11), 200, 60.0, 600, 60, False)
    config = ClusterConfig(1, ReplicaConfig(16, 700, 1 << 21, 2))
    summed = simulate_requests(requests, config, linear(None)).records
    padded = simulate_requests(requests, config, linear(16)).records
    first = next(i for i, (a, b) in enumerate(zip(summed, padded, strict=True)) if a != b)
    assert padded[first].finish_s >= summed[first].finish_s
    assert sum(r.finish_s for r in padded) > sum(r.finish_s for r in summed)


def test_paths_keep_the_rule_where_their_engine_pads() -> None:
    """Compression (the store's batched decode loops to the longest table) keeps the padding; real_engine's SP
    engine keeps a dense cache per sequence, so SP prices Σ contexts."""
    from tripath.simulator.paths.compression import CompressionPhysics
    from tripath.simulator.paths.seqpar import SpPhysics
    from tripath.simulator.paths.step import path_cost

    tiny = resolve_profile(str(PROFILES_DIR / "cpu-tiny.json"))
    cost = IterationCost.from_profile(tiny)
    compressed = CompressionPhysics("int8", tiny.compression["int8"])
    assert path_cost(cost, compressed, None).block_tokens == REAL_ENGINE_BLOCK_TOKENS
    assert path_cost(cost, None, SpPhysics(tiny.sequence_parallel[2])).block_tokens is None
    assert path_cost(cost, compressed, SpPhysics(tiny.sequence_parallel[2])).block_tokens is None


def test_run_counts_in_closed_form_equal_counting_each_step() -> None:
    """count_run's closed form (padded S is a staircase, not a progression) against counting step by step."""
    rng = np.random.default_rng(7)

    def decode(batch, total_context):
        return 1.0 + batch + 0.01 * total_context

    for _ in range(300):
        lo, hi = sorted(float(x) for x in rng.integers(0, 3000, 2))
        blo, bhi = sorted(int(x) for x in rng.integers(1, 12, 2))
        batch, longest, n = int(rng.integers(1, 12)), int(rng.integers(1, 400)), int(rng.integers(0, 200))
        for block in (None, 16, 5):
            run = IterationCost(lambda t, c: 1.0 + t, decode, ((-np.inf, np.inf), (-np.inf, np.inf)),
                                ((blo, bhi), (lo, hi)), block_tokens=block)
            each = IterationCost(lambda t, c: 1.0 + t, decode, ((-np.inf, np.inf), (-np.inf, np.inf)),
                                 ((blo, bhi), (lo, hi)), block_tokens=block)
            total = batch * longest - int(rng.integers(0, batch))
            run.count_run(batch, total, longest, n)
            for s in run.run_keys(batch, total, longest, n).tolist():
                each.count_decodes(batch, s, 1)
            assert (run.decode_queries, run.decode_outside) == (each.decode_queries, each.decode_outside)
