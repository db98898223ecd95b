"""Attention data-parallel ranks in lockstep (tripath/simulator/loop/lockstep.py): an iteration lasts as long as its
slowest rank's, identical ranks behave as one, and the clusters agree."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import bits, poisson_requests, smooth_costs, tick_costs
from tests.simulator.loop.test_streaming import arrays_of
from tripath.core.request import RequestSpec
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.batching import Chunked, Continuous
from tripath.simulator.loop.cluster import Cluster, ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.loop.stepper import StepperConfig, StepperSetup
from tripath.simulator.loop.streaming import StreamingCluster
from tripath.simulator.step_model import BaselineStep


def ms_costs() -> IterationCost:
    """Prefill 1 ms per token, decode 10 ms per iteration: hand-computable."""
    return IterationCost(lambda tokens, context: 1.0 * tokens, lambda batch, total: 10.0 + 0.0 * total)


def by_id(result) -> dict[int, object]:
    return {r.request_id: r for r in result.records}


def test_a_short_prompt_waits_for_the_slowest_rank() -> None:
    """Two ranks: a 1,000-token prompt on rank 0 and a 10-token one on rank 1 arrive together. Alone, rank 1's
    prefill ends at 10 ms; in lockstep its iteration lasts as long as rank 0's, 1,000 ms. Its two decodes then
    take 10 ms each, in step with rank 0's."""
    requests = [RequestSpec(0, 0.0, 1000, 3), RequestSpec(1, 0.0, 10, 3)]
    replica = ReplicaConfig(8, 4096, 1 << 20, 1)
    apart = by_id(simulate_requests(requests, ClusterConfig(2, replica), ms_costs()))
    together = by_id(simulate_requests(requests, ClusterConfig(1, replica, ranks=2), ms_costs()))
    assert apart[1].first_token_s == pytest.approx(0.010)
    assert together[1].first_token_s == pytest.approx(1.000)
    assert together[0].first_token_s == pytest.approx(1.000)
    assert together[1].finish_s == pytest.approx(1.020) == together[0].finish_s
    assert {together[0].replica, together[1].replica} == {0, 1}  # the router spread them over the ranks


def test_a_request_routed_mid_iteration_joins_at_the_group_boundary() -> None:
    """Rank 0 prefills 1,000 tokens from t = 0; a request routed to the idle rank 1 at 0.1 s starts at the
    group's next boundary, 1.0 s, not at once."""
    requests = [RequestSpec(0, 0.0, 1000, 2), RequestSpec(1, 0.1, 10, 1)]
    together = by_id(simulate_requests(requests, ClusterConfig(1, ReplicaConfig(8, 4096, 1 << 20, 1), ranks=2),
                                       ms_costs()))
    assert together[1].replica == 1
    assert together[1].admitted_s == pytest.approx(1.0)
    assert together[1].first_token_s == pytest.approx(1.010)  # its own 10 ms, the longest of that iteration


def test_identical_ranks_behave_as_one() -> None:
    """Every request sent D times at the same instant: the router hands one copy to each rank (ties to the lowest
    index), all ranks run identical batches, so each copy's times are those of a single replica serving one
    copy (the slowest of D equal costs is that cost)."""
    base = poisson_requests(np.random.default_rng(3), 200, 30.0, 600, 60, on_ticks=True)
    ranks = 4
    copies = [RequestSpec(r.request_id * ranks + k, r.arrival_s, r.prompt_tokens, r.output_tokens)
              for r in base for k in range(ranks)]
    replica = ReplicaConfig(16, 700, 4096 * 2, 2)
    single = simulate_requests(base, ClusterConfig(1, replica), tick_costs())
    grouped = simulate_requests(copies, ClusterConfig(1, replica, ranks=ranks), tick_costs())
    for k in range(ranks):
        mine = [dataclasses.replace(r, request_id=r.request_id // ranks, replica=0)
                for r in grouped.records if r.request_id % ranks == k]
        assert {r.replica for r in grouped.records if r.request_id % ranks == k} == {k}
        assert bits(mine) == bits(single.records)
    assert [s.iterations for s in grouped.replicas] == [single.replicas[0].iterations] * ranks


def test_lockstep_is_never_faster_than_independent_ranks() -> None:
    """The same requests on D independent replicas and on one replica of D lockstep ranks: lockstep can only hold
    a rank back, so the last finish and the mean TTFT are no earlier."""
    requests = poisson_requests(np.random.default_rng(8), 400, 60.0, 2000, 80)
    replica = ReplicaConfig(16, 1024, 1 << 22, 2)
    apart = simulate_requests(requests, ClusterConfig(4, replica), tick_costs())
    together = simulate_requests(requests, ClusterConfig(1, replica, ranks=4), tick_costs())
    assert max(r.finish_s for r in together.records) >= max(r.finish_s for r in apart.records)
    ttft = [np.mean([r.first_token_s - r.arrival_s for r in res.records]) for res in (apart, together)]
    assert ttft[1] > ttft[0]
    assert len(together.replicas) == 4 and all(s.iterations > 0 for s in together.replicas)


def test_streamed_cluster_gives_the_same_records() -> None:
    """The streamed cluster builds the same lockstep ranks: its records are the in-memory cluster's, bit for bit."""
    requests = poisson_requests(np.random.default_rng(11), 300, 80.0, 900, 50, on_ticks=True)
    config = ClusterConfig(2, ReplicaConfig(8, 512, 3000 * 2, 2), ranks=3)
    held = simulate_requests(requests, config, tick_costs())
    streamed: list = []
    result = StreamingCluster(arrays_of(requests), config, tick_costs(), streamed.append).run()
    assert bits(sorted(streamed, key=lambda r: r.request_id)) == bits(held.records)
    assert result.replicas == held.replicas


def counted(cluster) -> tuple[object, int]:
    """Run ``cluster``, counting the SimPy events its clock processes."""
    env, steps = cluster.env, [0]
    step = env.step

    def counting() -> None:
        steps[0] += 1
        step()
    env.step = counting
    return cluster.run(), steps[0]


def padded_costs() -> IterationCost:
    """tick_costs with padded attention (keys: the longest context, in 16-token blocks, times the batch)."""
    ticks = tick_costs()
    return IterationCost(ticks.prefill_ms, ticks.decode_ms, block_tokens=16)


@pytest.mark.parametrize(("seed", "n", "rate", "prompt", "output", "on_ticks", "replicas", "ranks", "replica",
                          "make_cost"), [
    (1, 150, 2.0, 600, 120, False, 1, 2, ReplicaConfig(16, 1024, 1 << 22, 2), tick_costs),  # light: ranks sleep
    (2, 400, 60.0, 2000, 200, False, 2, 4, ReplicaConfig(16, 1024, 1 << 22, 2), tick_costs),  # loaded
    (3, 300, 80.0, 900, 150, True, 2, 3, ReplicaConfig(8, 512, 3000 * 2, 2), tick_costs),  # on ticks, KV binds
    (4, 300, 25.0, 700, 300, True, 3, 2, ReplicaConfig(32, 2048, 1 << 22, 2), tick_costs),  # ticks, room
    (5, 300, 40.0, 1500, 250, False, 2, 3, ReplicaConfig(16, 2048, 5000 * 2, 2), smooth_costs),  # KV binds
    (6, 250, 30.0, 800, 200, True, 1, 4, ReplicaConfig(16, 1024, 1 << 22, 2), padded_costs),  # padded keys
])
def test_fast_forwarded_group_equals_the_group_stepping_every_iteration(seed, n, rate, prompt, output, on_ticks,
                                                                        replicas, ranks, replica, make_cost) -> None:
    """A lockstep group fast-forwarding its decode-only stretches (tripath/simulator/loop/lockstep.py) gives the
    records, replica stats (busy time, iterations, runs, peak KV) and extrapolation counts of the group stepping
    every iteration (``fast`` off), bit for bit, in far fewer SimPy events; so does the streamed cluster."""
    requests = poisson_requests(np.random.default_rng(seed), n, rate, prompt, output, on_ticks=on_ticks)
    config = ClusterConfig(replicas, replica, ranks=ranks)
    reference, fast = Cluster(requests, config, make_cost(), fast=False), Cluster(requests, config, make_cost())
    (ref, ref_events), (got, events) = counted(reference), counted(fast)
    assert bits(got.records) == bits(ref.records)
    assert bits(got.replicas) == bits(ref.replicas)
    assert got.extrapolations == ref.extrapolations
    assert got.events == ref.events  # a rank counts every iteration in ``runs``, stepped or not
    assert sum(r.forwarded for r in reference.replicas) == 0
    forwarded = sum(r.forwarded for r in fast.replicas)
    assert forwarded > sum(r.forward_runs for r in fast.replicas) > 0
    assert events < ref_events
    streamed: list = []
    result = StreamingCluster(arrays_of(requests), config, make_cost(), streamed.append).run()
    assert bits(sorted(streamed, key=lambda r: r.request_id)) == bits(ref.records)
    assert bits(result.replicas) == bits(ref.replicas)


@pytest.mark.parametrize("policy", [Continuous, Chunked])
def test_fast_forwarded_group_of_a_stepper_setup_equals_the_reference(policy) -> None:
    """Ranks built from a StepperSetup (any batching policy): fast-forward on (StepperConfig.fast_forward) gives the
    records and replica stats of the group stepping every iteration, bit for bit."""
    requests = poisson_requests(np.random.default_rng(9), 300, 40.0, 1500, 200, on_ticks=True)
    config = ClusterConfig(2, ReplicaConfig(16, 512, 6000 * 2, 2), ranks=3)
    results = []
    for forward in (False, True):
        cost = tick_costs()
        setup = StepperSetup(lambda i, cost=cost: BaselineStep(cost, 2, 6000 * 2), lambda i: policy(16, 512),
                             StepperConfig(fast_forward=forward))
        cluster = Cluster(requests, config, cost, setup=setup)
        results.append((cluster.run(), sum(r.forwarded for r in cluster.replicas)))
    (ref, none), (got, forwarded) = results
    assert bits(got.records) == bits(ref.records)
    assert bits(got.replicas) == bits(ref.replicas)
    assert got.extrapolations == ref.extrapolations
    assert none == 0 < forwarded


def test_ranks_must_be_positive() -> None:
    with pytest.raises(ValueError, match="ranks"):
        ClusterConfig(1, ReplicaConfig(8, 512, 100, 1), ranks=0)
