"""The profile converted once per run: the costs and path parameters the loops and the path physics read.

The runner (tripath/simulator/runner.py) converts the profile for the scenario it simulates; nothing below
it reads the profile. What the conversion holds:

- ``cost``: the baseline IterationCost (tripath/simulator/costs.py); each replica of each replication takes
  ``cost.fresh()`` (its own extrapolation counters), the paths transform it (tripath/simulator/paths/step.py);
- the model's KV bytes per token and tensor-parallel degree, one rank's KV budget (``kv_capacity``);
- for each path the scenario switches on, what its physics reads: SpeculativeParams (resolved K, cost
  ratios, verify costs, acceptance per task), TierTables (host and SSD bytes, paging fits, layers), the
  sequence-parallel section of the degree, the compression mode (CompressionPhysics, stateless);
- ``swap_s``: the device_host transfer cost swap preemption charges (None without that link).

A scenario's own acceptance table replaces the profile's entries for its tasks first (``with_scenario_acceptance``).

The conversion checks the scenario's paths against the profile first (strategy.check_against_profile).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tripath.core.errors import InputError
from tripath.profile.profile import Profile
from tripath.profile.sections import SequenceParallel
from tripath.profile.speculative import SCENARIO_SOURCE, TaskAcceptance
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.compression import CompressionPhysics
from tripath.simulator.paths.speculative import SpeculativeParams
from tripath.simulator.paths.tiered import TierTables
from tripath.simulator.scenario.scenario import Scenario
from tripath.simulator.scenario.strategy import (
    DEVICE_HOST,
    PROMPT_LOOKUP_PREFIX,
    StrategySpec,
    check_against_profile,
)

GIB = 2**30


def with_scenario_acceptance(profile: Profile, strategy: StrategySpec, source: str | None = None) -> Profile:
    """The profile with the scenario's ``[strategy.speculative] acceptance`` table in place of its own entries.

    Each listed task gets one entry (source "scenario", no per-position or spread: the user gave one a) under the
    proposer's key (``prompt_lookup:TASK`` for prompt lookup), whether or not the profile had one; the others keep
    the profile's. Without the table this is ``profile`` itself, so such runs are unchanged.
    """
    spec = strategy.speculative
    if spec is None or not spec.acceptance:
        return profile
    prefix = PROMPT_LOOKUP_PREFIX if spec.proposer == "prompt_lookup" else ""
    k = spec.k or (profile.speculative.k if profile.speculative is not None else 1)
    where = source or "the scenario"
    table = dict(profile.acceptance)
    for task, a in spec.acceptance:
        table[prefix + task] = TaskAcceptance(a, k, None, SCENARIO_SOURCE,
                                              f"[strategy.speculative] acceptance.{task} in {where}")
    return replace(profile, acceptance=table)


def kv_capacity(scenario: Scenario, profile: Profile) -> tuple[int, str]:
    """(KV bytes one replica may hold, where that number comes from)."""
    gib = scenario.cluster.device_memory_gib
    if gib is None:
        return int(profile.kv_capacity_bytes), f"profile memory.kv_capacity_bytes ({profile.source})"
    if profile.key.attention_dp > 1:  # a rank holds its share of the experts, which the profile does not split out
        raise InputError(scenario.source_path, "cluster.device_memory_gib", f"profile {profile.key} is one of "
                         f"{profile.key.attention_dp} attention data-parallel ranks, whose weights (its share of the "
                         "experts) the profile does not state: leave device_memory_gib out to use its KV budget")
    memory = int(profile.key.tp * gib * GIB)
    capacity = memory - int(profile.model.weight_bytes)
    if capacity <= 0:
        raise InputError(scenario.source_path, "cluster.device_memory_gib",
                         f"tp {profile.key.tp} x {gib} GiB = {memory} bytes does not exceed the model's "
                         f"{profile.model.weight_bytes} weight bytes: no memory left for KV")
    return capacity, "tp x cluster.device_memory_gib - model weight bytes"


@dataclass(frozen=True)
class RunCosts:
    """What one run's loops and path physics read, converted from the profile (module docstring)."""

    cost: IterationCost
    kv_bytes_per_token: int  # the model's, before compression
    tp: int
    kv_capacity_bytes: int  # one rank's KV budget
    strategy: StrategySpec
    tasks: tuple[str, ...]  # the workload's task names, in its order (PrefillChunk/DecodeBatch index them)
    speculative: SpeculativeParams | None = None
    tiered: TierTables | None = None
    sequence_parallel: SequenceParallel | None = None
    compression: CompressionPhysics | None = None
    swap_s: Callable[[int], float] | None = None  # seconds to move this many KV bytes one way over device_host
    profile_key: str = ""  # for messages

    @classmethod
    def from_profile(cls, profile: Profile, strategy: StrategySpec, tasks: Sequence[str], kv_capacity_bytes: int,
                     source: str | None = None) -> RunCosts:
        """Check the paths against the profile (InputError naming ``source``) and convert it."""
        tasks = tuple(tasks)
        profile = with_scenario_acceptance(profile, strategy, source)
        check_against_profile(strategy, profile, tasks, source)
        sp, comp = strategy.sequence_parallel, strategy.compression
        swap_s = None
        if DEVICE_HOST in profile.paging:
            link = profile.paging[DEVICE_HOST].cost_for(None)

            def swap_s(nbytes: int) -> float:
                return float(link.evaluate(bytes=nbytes)) / 1000.0

        return cls(
            IterationCost.from_profile(profile), int(profile.model.kv_bytes_per_token), int(profile.key.tp),
            kv_capacity_bytes, strategy, tasks,
            None if strategy.speculative is None else SpeculativeParams.from_profile(strategy.speculative, profile,
                                                                                     tasks),
            None if strategy.tiered is None else TierTables.from_profile(profile),
            None if sp is None else profile.sequence_parallel[sp.degree],
            None if comp is None else CompressionPhysics(comp.mode, profile.compression[comp.mode]),
            swap_s, profile.key_str(),
        )

    @classmethod
    def for_scenario(cls, scenario: Scenario, profile: Profile) -> RunCosts:
        """The conversion for a scenario: its paths and tasks, its KV budget (``kv_capacity``)."""
        tasks = tuple(task for task, _ in scenario.workload.tasks)
        return cls.from_profile(profile, scenario.strategy, tasks, kv_capacity(scenario, profile)[0],
                                scenario.source_path)
