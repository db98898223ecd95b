"""Which replica a scenario runs on, and the per-replica physics and policy of the general loop.

The exact fast path (a Stepper with a RunBooking: tripath/simulator/loop/stepper.py) serves the baseline:
continuous batching, no preemption, no time series, and no strategy table or only compression and/or sequence
parallelism (deterministic: a transformed cost model, tripath/simulator/paths/step.py). Anything else needs
the per-iteration loop (tripath/simulator/loop/stepper.py): another batching policy (waits, chunks, adaptive
control), preemption, speculation or tiering (per-iteration randomness, tier state), or
time-series samples. Each replica then gets its own StepModel — tripath/simulator/paths/step.py's
``build_step_model``, on the run's converted costs (tripath/simulator/paths/run_costs.py) — with its own cost
counters and random stream, and its own policy (``build_policy``: the adaptive controller keeps per-replica
state).

Random streams: the workload of replication i draws from SeedSequence(seed).spawn(R)[i]; the
path models draw from a SeedSequence with that child's entropy and spawn key extended by
PATH_STREAM, split per replica. The workload's draws are therefore the same whatever the paths do.
"""

from __future__ import annotations

import numpy as np

from tripath.core.errors import InputError
from tripath.simulator.loop.adaptive_batching import Adaptive, AimdController, AimdSettings
from tripath.simulator.loop.batching import Chunked, Continuous, Windowed
from tripath.simulator.loop.stepper import BatchPolicy, StepperConfig, StepperSetup
from tripath.simulator.paths.prefix import PrefixSetup
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import build_step_model
from tripath.simulator.scenario.prefix_workload import RequestPrefixes
from tripath.simulator.scenario.scenario import BatchingSpec, Scenario, SlaSpec
from tripath.simulator.step_model import StepModel

PATH_STREAM = 0x5EED  # spawn-key element of the path models' streams: disjoint from the workload's children


def loop_reason(scenario: Scenario, timeseries_interval_s: float | None = None) -> tuple[bool, str]:
    """(whether the per-iteration loop must run, why that loop) for the summary."""
    strategy = scenario.strategy
    batching = scenario.batching
    if batching.needs_stepper:
        return True, (f"batching policy '{batching.policy}' / preemption '{batching.preemption}' needs the "
                      "per-iteration loop")
    if timeseries_interval_s is not None:
        return True, "time-series samples need the per-iteration loop"
    if not strategy.baseline:
        per_iteration = [what for what, on in (("speculation (random tokens per round)", strategy.speculative),
                                               ("tiering (paging depends on tier state)", strategy.tiered),
                                               ("prefix caching (hits depend on cache state)",
                                                strategy.prefix_cache)) if on]
        if per_iteration:
            return True, " and ".join(per_iteration) + " act per iteration: the per-iteration loop"
        return False, ("compression / sequence parallelism only: a transformed cost model on the exact fast "
                       "path (tripath/simulator/paths/step.py: fast_transforms)")
    return False, "baseline continuous batching: the exact fast path"


def needs_stepper(scenario: Scenario, timeseries_interval_s: float | None = None) -> bool:
    return loop_reason(scenario, timeseries_interval_s)[0]


def path_streams(seed_sequence: np.random.SeedSequence, replicas: int) -> list[np.random.Generator]:
    """One generator per replica for the path physics, independent of the workload's stream."""
    base = np.random.SeedSequence(seed_sequence.entropy, spawn_key=(*seed_sequence.spawn_key, PATH_STREAM))
    return [np.random.default_rng(child) for child in base.spawn(replicas)]


def build_policy(b: BatchingSpec, sla: SlaSpec, source: str | None = None) -> BatchPolicy:
    """The policy a scenario's [batching] table asks for (one per replica: adaptive keeps state)."""
    wait_s = b.max_wait_ms / 1000.0
    if b.policy == "continuous":
        return Continuous(b.max_batch_size, b.max_batched_tokens)
    if b.policy == "chunked":
        return Chunked(b.max_batch_size, b.max_batched_tokens)
    if b.policy in ("static", "dynamic"):
        return Windowed(b.max_batch_size, wait_s, joins=b.policy == "dynamic")
    terms = (("ttft", sla.ttft_p99_ms), ("tpot", sla.tpot_p99_ms), ("e2e", sla.e2e_p99_ms))
    targets = tuple((term, ms / 1000.0) for term, ms in terms if ms is not None)
    if not targets:
        raise InputError(source, "batching.policy", "'adaptive' steers by the SLA: give at least one sla.*_p99_ms")
    settings = AimdSettings(b.max_batch_size, wait_s, targets, b.adaptive_window, b.adaptive_every, b.adaptive_margin,
                            b.adaptive_decrease, b.adaptive_batch_step, b.adaptive_wait_step_ms / 1000.0)
    return Adaptive(AimdController(settings))


def swap_config(scenario: Scenario, costs: RunCosts) -> StepperConfig:
    """The loop's preemption settings; swap charges the profile's device_host paging cost."""
    mode = scenario.batching.preemption
    if mode != "swap":
        return StepperConfig(mode)
    if costs.swap_s is None:
        raise InputError(scenario.source_path, "batching.preemption",
                         f"'swap' needs a device_host paging cost, which profile {costs.profile_key} lacks "
                         "(calibrate with --paging, or use 'recompute')")
    return StepperConfig(mode, costs.swap_s)


def stepper_setup(scenario: Scenario, costs: RunCosts, replicas: int, seed_sequence: np.random.SeedSequence,
                  timeseries_interval_s: float | None = None, force: bool = False,
                  prefixes: RequestPrefixes | None = None) -> StepperSetup | None:
    """The setup of the general loop for this replication on the run's converted costs, or None where the exact
    fast path serves it (``force``: the loop even there, e.g. to check the fast path against it). ``prefixes``: the
    replication's prompt block keys, with prefix caching on (tripath/simulator/scenario/prefix_workload.py)."""
    if not force and not needs_stepper(scenario, timeseries_interval_s):
        return None
    spec = scenario.strategy.prefix_cache
    if spec is not None and scenario.batching.preemption != "none":
        raise InputError(scenario.source_path, "batching.preemption",
                         f"prefix caching runs with preemption = 'none' only, got {scenario.batching.preemption!r}")
    prefix = None if spec is None or prefixes is None else PrefixSetup.build(
        spec, prefixes, register_on_admission=scenario.batching.policy != "chunked")
    config = swap_config(scenario, costs)
    build_policy(scenario.batching, scenario.sla, scenario.source_path)  # bad input fails before the run
    streams = path_streams(seed_sequence, replicas)

    def model_for(i: int) -> StepModel:
        return build_step_model(costs, streams[i])

    def policy_for(i: int) -> BatchPolicy:
        return build_policy(scenario.batching, scenario.sla, scenario.source_path)

    return StepperSetup(model_for, policy_for, config, costs.tasks, timeseries_interval_s, prefix)
