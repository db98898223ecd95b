"""Fast-forward in the per-iteration loop (tripath/simulator/loop/stepper.py, StepperConfig.fast_forward): decode-only
stretches advanced in one event give records, replica stats and extrapolation counts bit for bit those of the
loop stepping every iteration, for every policy, the deterministic paths (compression, sequence parallelism),
padded keys and step overhead (cpu-tiny), several replicas, bursty, Poisson and tick-aligned arrivals; and it
stays off where it would not be exact (speculation, time series, closed loops)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.helpers import TICK, bits, poisson_requests, shipped_scenario_dict, tick_costs
from tripath.core.records import RunResult
from tripath.core.request import RequestSpec
from tripath.planning.scenario_dict import with_fields
from tripath.profile.profile import resolve_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.batching import Chunked, Continuous
from tripath.simulator.loop.cluster import ClosedLoop, Cluster, ClusterConfig
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.loop.run import Run
from tripath.simulator.loop.stepper import Stepper, StepperConfig, StepperSetup
from tripath.simulator.loop.stepper_setup import stepper_setup
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep, TransformedStep
from tripath.simulator.runner import arrival_rate, closed_loop, cluster_config
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.workload import generate_requests
from tripath.simulator.step_model import BaselineStep

# Shorter than the default scenario's Mooncake lengths (mean 12K prompt tokens), so the step-by-step side stays
# quick; prompts up to 6K still span several chunks of a 2K budget.
SHORT = {"workload.prompt_tokens": {"kind": "lognormal", "median": 900.0, "sigma": 1.0, "max": 6000},
         "workload.output_tokens": {"kind": "lognormal", "median": 120.0, "sigma": 0.9, "max": 700},
         "batching.max_batched_tokens": 2048}


Outcome = tuple[RunResult, list[Stepper]]
Runner = Callable[[StepperSetup], Outcome]


def both(setup_for: Callable[[], StepperSetup], run: Runner) -> tuple[Outcome, Outcome]:
    """``run(setup)`` with fast-forward off and on; the results must agree bit for bit (asserted here)."""
    outcomes = []
    for forward in (False, True):
        setup = setup_for()
        setup = dataclasses.replace(setup, config=dataclasses.replace(setup.config, fast_forward=forward))
        outcomes.append(run(setup))
    (off, off_steppers), (on, on_steppers) = outcomes
    assert bits(on.records) == bits(off.records)
    assert bits(on.replicas) == bits(off.replicas)  # busy time, iterations, runs, peak KV: every field
    assert on.extrapolations == off.extrapolations
    assert on.events == off.events
    assert sum(s.forwarded for s in off_steppers) == 0
    return outcomes[0], outcomes[1]


def cluster_run(requests: list[RequestSpec], config: ClusterConfig, make_cost: Callable[[], IterationCost],
                closed: ClosedLoop | None = None) -> Runner:
    """Serve ``requests`` on a Cluster of Steppers built from the setup; the Steppers come back for their counters."""

    def run(setup: StepperSetup) -> Outcome:
        cluster = Cluster(requests, config, make_cost(), setup=setup, closed=closed)
        return cluster.run(), list(cluster.replicas)  # type: ignore[arg-type]
    return run


def scenario_both(data: dict[str, Any], seed: int = 0) -> tuple[Outcome, Outcome]:
    """The scenario's first replication, as tripath/simulator/runner.py's ``replicate`` draws and builds it, on
    the per-iteration loop (forced where the fast Replica would serve it), with fast-forward off and on."""
    scenario = scenario_from_dict(data, "test")
    profile = resolve_profile(scenario.profile)
    config, _ = cluster_config(scenario, profile)
    costs = RunCosts.for_scenario(scenario, profile)
    rate, _, _ = arrival_rate(scenario, profile, config, costs)
    child = np.random.SeedSequence(seed).spawn(1)[0]
    requests = generate_requests(scenario.workload, np.random.default_rng(child), rate, closed_loop=True)

    def setup_for() -> StepperSetup:
        setup = stepper_setup(scenario, costs, config.replicas, child, force=True)
        assert setup is not None
        return setup

    return both(setup_for, cluster_run(requests, config, costs.cost.fresh, closed_loop(scenario)))


def default(**fields: Any) -> dict[str, Any]:
    """The default scenario (aic Llama-3.1-70B TP4 A100, measured kernel tables) with these fields changed."""
    return with_fields(shipped_scenario_dict("default"), {"workload.requests": 150, **SHORT, **fields})


def forwarded_share(steppers: list[Stepper]) -> float:
    return sum(s.forwarded for s in steppers) / sum(s.iterations for s in steppers)


@pytest.mark.parametrize("policy", ["chunked", "continuous"])
@pytest.mark.parametrize(("gpus", "arrival"), [
    (4, {"kind": "poisson", "rate_per_s": 1.5}),  # one replica
    (16, {"kind": "poisson", "rate_per_s": 6.0}),  # four replicas: the router's choice, interrupts mid-run
    (12, {"kind": "gamma", "rate_per_s": 4.0, "cv": 4.0}),  # bursty: queues build and drain
])
def test_policies_replicas_and_arrivals(policy: str, gpus: int, arrival: dict) -> None:
    _, (_, steppers) = scenario_both(default(**{"batching.policy": policy, "cluster.gpus": gpus,
                                                "workload.arrival": arrival}))
    assert forwarded_share(steppers) > 0.5  # most iterations are decode stretches here
    assert sum(s.forward_runs for s in steppers) < sum(s.forwarded for s in steppers)


@pytest.mark.parametrize("policy", ["static", "dynamic", "adaptive"])
def test_windowed_and_adaptive_policies_have_nothing_to_schedule_in_a_stretch(policy: str) -> None:
    """The BatchPolicy contract fast-forward relies on: nothing queued and all decoding, no chunks, no change."""
    _, (_, steppers) = scenario_both(default(**{"batching.policy": policy, "cluster.gpus": 8,
                                                "batching.max_wait_ms": 40.0, "sla.e2e_p99_ms": 20000.0,
                                                "workload.arrival": {"kind": "poisson", "rate_per_s": 3.0}}))
    assert forwarded_share(steppers) > 0.1  # static: requests wait while a batch runs, which is not forwarded


def test_tiny_batch_limit() -> None:
    _, (_, steppers) = scenario_both(default(**{"batching.policy": "chunked", "batching.max_batch_size": 2,
                                                "cluster.gpus": 8, "workload.requests": 80,
                                                "workload.arrival": {"kind": "poisson", "rate_per_s": 0.6}}))
    assert forwarded_share(steppers) > 0.3


@pytest.mark.parametrize("policy", ["chunked", "continuous"])
@pytest.mark.parametrize("mode", ["int8", "fp8"])
def test_compression_on_measured_kernel_tables(policy: str, mode: str) -> None:
    data = default(**{"profile": "aic-llama3.1-70b-tp4-h100", "batching.policy": policy, "cluster.gpus": 8,
                      "workload.arrival": {"kind": "poisson", "rate_per_s": 4.0}, "strategy.compression.mode": mode})
    _, (_, steppers) = scenario_both(data)
    assert all(isinstance(s.model, TransformedStep) for s in steppers)
    assert forwarded_share(steppers) > 0.5


@pytest.mark.parametrize(("profile", "gpus", "rate", "policy"), [("aic-llama3.1-70b-tp4-h100", 16, 2.0, "chunked"),
                                                                 ("seed-llama2-70b-a100", 4, 0.7, "chunked"),
                                                                 ("seed-llama2-70b-a100", 4, 0.7, "continuous")])
def test_sequence_parallel_degree_2_merge_sums(profile: str, gpus: int, rate: float, policy: str) -> None:
    data = default(**{"profile": profile, "batching.policy": policy, "cluster.gpus": gpus,
                      "workload.arrival": {"kind": "poisson", "rate_per_s": rate},
                      "strategy.sequence_parallel.degree": 2})
    (off, _), (on, steppers) = scenario_both(data)
    assert all(isinstance(s.model, TransformedStep) and s.model.transforms.sp is not None for s in steppers)
    assert forwarded_share(steppers) > 0.5
    assert all(r.merge_s > 0 for r in on.records if r.completed)  # per-request sums over forwarded stretches


@pytest.mark.parametrize("strategy", [{}, {"strategy.compression.mode": "int8"},
                                      {"strategy.sequence_parallel.degree": 2}])
def test_padded_keys_and_step_overhead_on_cpu_tiny(strategy: dict) -> None:
    """cpu-tiny prices decode at the engine's padded key count (block_tokens) and adds its step overhead."""
    data = with_fields(shipped_scenario_dict("quickstart"), {
        "profile": "cpu-tiny", "workload.requests": 150, "batching.policy": "chunked",
        "batching.max_batched_tokens": 256, "cluster.gpus": 2, "workload.arrival": {"kind": "poisson",
                                                                                    "load_fraction": 0.7},
        "workload.prompt_tokens.max": 600, "workload.output_tokens.max": 200, **strategy})
    _, (_, steppers) = scenario_both(data)
    assert forwarded_share(steppers) > 0.3


@pytest.mark.parametrize("think_s", [0.0, 0.05])
def test_closed_loops_are_not_fast_forwarded(think_s: float) -> None:
    """A user's send at the instant of a finish is routed amid that instant's boundaries, in SimPy's order of
    same-instant events, which a run's single event does not keep: the loop steps every iteration there."""
    data = with_fields(shipped_scenario_dict("closed-loop"), {"workload.requests": 150, "batching.policy": "chunked",
                                                              "batching.max_batched_tokens": 1024,
                                                              "workload.arrival.think_s": think_s})
    _, (_, steppers) = scenario_both(data)
    assert sum(s.forwarded for s in steppers) == 0


def test_closed_loop_tie_that_a_run_would_miss() -> None:
    """Whole-tick costs, think time 0: finishes tie other replicas' boundaries exactly. With the finish listener
    hidden from the loop (so it forwards anyway) the records differ; as built, it does not forward there."""
    requests = poisson_requests(np.random.default_rng(0), 200, 40.0, 900, 80, on_ticks=True)
    config = ClusterConfig(4, ReplicaConfig(16, 256, 8192 * 2, 2))

    def setup_for() -> StepperSetup:
        return StepperSetup(lambda i: BaselineStep(tick_costs(), 2, 8192 * 2), lambda i: Chunked(16, 256))

    def run(setup: StepperSetup, hide: bool = False) -> Outcome:
        cluster = Cluster(requests, config, tick_costs(), setup=setup, closed=ClosedLoop(6))
        ledger, listener = cluster.ledger, cluster.ledger.on_finish
        if hide:
            assert listener is not None
            ledger.on_finish = None

            def finished(request: int, end: float) -> None:
                type(ledger).finished(ledger, request, end)
                listener(request, end)

            ledger.finished = finished  # type: ignore[method-assign]
        return cluster.run(), list(cluster.replicas)  # type: ignore[arg-type]

    (off, _), _ = both(setup_for, run)
    forced, steppers = run(setup_for(), hide=True)
    assert sum(s.forwarded for s in steppers) > 0
    assert bits(forced.records) != bits(off.records)


@pytest.mark.parametrize(("replicas", "rate", "max_batch", "policy"), [
    (1, 10.0, 8, Chunked), (3, 30.0, 16, Chunked), (2, 20.0, 64, Continuous), (2, 8.0, 4, Chunked)])
def test_arrivals_exactly_on_boundaries(replicas: int, rate: float, max_batch: int, policy: type[Chunked | Continuous],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole-tick costs and tick-aligned arrivals: requests routed mid-run cut it, some exactly at one of its
    boundaries, where the cut must end it (an arrival at a boundary joins there)."""
    requests = poisson_requests(np.random.default_rng(replicas + max_batch), 400, rate, 600, 60, on_ticks=True)
    config = ClusterConfig(replicas, ReplicaConfig(max_batch, 256, 8192 * 2, 2))
    on_boundary: list[bool] = []
    cut = Run.cut

    def watched(run: Run, now: float) -> None:
        on_boundary.append(now in run._bounds)
        cut(run, now)

    monkeypatch.setattr(Run, "cut", watched)

    def setup_for() -> StepperSetup:
        return StepperSetup(lambda i: BaselineStep(tick_costs(), 2, 8192 * 2), lambda i: policy(max_batch, 256))

    _, (on, steppers) = both(setup_for, cluster_run(requests, config, tick_costs))
    assert all((r.arrival_s / TICK).is_integer() for r in on.records)
    assert len(on_boundary) > 20 and any(on_boundary)  # runs were cut, some at an arrival exactly on a boundary
    assert forwarded_share(steppers) > 0.5


def test_speculation_never_fast_forwards() -> None:
    data = default(**{"profile": "cpu-tiny", "batching.policy": "chunked", "cluster.gpus": 2,
                      "workload.requests": 60, "batching.max_batched_tokens": 512,
                      "workload.prompt_tokens.max": 600, "workload.output_tokens.max": 120,
                      "workload.arrival": {"kind": "poisson", "rate_per_s": 1.0}, "strategy.speculative.k": 4})
    _, (_, steppers) = scenario_both(data)
    assert all(isinstance(s.model, PathStep) for s in steppers)
    assert sum(s.forwarded for s in steppers) == 0


def test_time_series_turn_it_off() -> None:
    setup = StepperSetup(lambda i: BaselineStep(tick_costs(), 1, 1 << 20), lambda i: Chunked(8, 256),
                         StepperConfig(), (), 0.01)
    assert not setup.config.fast_forward


def test_what_counts_as_deterministic() -> None:
    """A subclass that changes ``step`` is not deterministic unless it says so (TransformedStep does)."""

    class TwoTokens(BaselineStep):
        def step(self, prefills, decodes, live_tokens):  # type: ignore[no-untyped-def]
            return super().step(prefills, decodes, live_tokens)

    class Declared(TwoTokens):
        deterministic = True

    class Counted(BaselineStep):
        def ran_decodes(self, batch: int, total_context: int, longest: int, iterations: int) -> None:
            super().ran_decodes(batch, total_context, longest, iterations)

    assert BaselineStep.deterministic and TransformedStep.deterministic and Counted.deterministic
    assert not TwoTokens.deterministic and Declared.deterministic
    assert not issubclass(PathStep, BaselineStep)  # speculation and tiering act per iteration: never forwarded
