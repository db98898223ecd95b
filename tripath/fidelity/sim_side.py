"""The simulated side: the same scenario through tripath.simulator.runner.simulate, and the shared request list.

Both sides must serve exactly the same requests. runner.simulate draws replication 0's workload
from ``default_rng(SeedSequence(seed).spawn(1)[0])``; ``requests_for`` draws the engine's list the
same way from the scenario's workload alone (so it exists even when the simulator cannot run the
scenario's strategy yet), and the comparison checks the simulated records against it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from tripath.core.errors import InputError
from tripath.core.records import RequestRecord
from tripath.core.request import RequestSpec
from tripath.fidelity.engine_side import NotAvailable, Paths
from tripath.profile.profile import Profile
from tripath.simulator.runner import arrival_rate, cluster_config, simulate
from tripath.simulator.scenario.prefix_workload import RequestPrefixes
from tripath.simulator.scenario.scenario import Scenario, scenario_from_dict
from tripath.simulator.scenario.workload import generate_requests, generate_with_prefixes

GIB = 2**30
# the part of a scenario that fixes the request list and the memory: no strategy, no batching policy
WORKLOAD_KEYS = ("name", "description", "workload", "cluster")
BATCHING_SIZES = ("max_batch_size", "max_batched_tokens")


@dataclass(frozen=True)
class Simulated:
    records: list[RequestRecord]
    paths: Paths
    profile_source: str  # the kind of numbers the simulation stands on (measured, ...)


def workload_scenario(data: dict[str, Any], source: str | None) -> Scenario:
    """The scenario with only its workload, cluster and batch sizes: what both sides share."""
    core = {k: copy.deepcopy(data[k]) for k in WORKLOAD_KEYS if k in data}
    core["batching"] = {k: v for k, v in data.get("batching", {}).items() if k in BATCHING_SIZES}
    return scenario_from_dict(core, source)


def requests_for(data: dict[str, Any], source: str | None, profile: Profile,
                 seed: int) -> tuple[list[RequestSpec], int]:
    """(the request list replication 0 of runner.simulate serves, KV tokens one replica holds)."""
    scenario = workload_scenario(data, source)
    config, _ = cluster_config(scenario, profile)
    rate, _, _ = arrival_rate(scenario, profile, config)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    requests = generate_requests(scenario.workload, rng, rate)
    return requests, config.replica.kv_capacity_bytes // int(profile.model.kv_bytes_per_token)


def prefix_keys_for(data: dict[str, Any], source: str | None, profile: Profile, seed: int) -> RequestPrefixes | None:
    """The block keys replication 0's requests carry with [strategy.prefix_cache] on (the simulator's own draw,
    so the engine can build prompts that share blocks exactly where these keys repeat); None when off."""
    spec = data.get("strategy", {}).get("prefix_cache")
    if spec is None or not spec.get("enabled", True):
        return None
    scenario = scenario_from_dict(copy.deepcopy(data), source)
    config, _ = cluster_config(scenario, profile)
    rate, _, _ = arrival_rate(scenario, profile, config)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    return generate_with_prefixes(scenario.workload, rng, rate, int(spec.get("block_tokens", 512)))[1]


def tier_tokens(data: dict[str, Any], profile: Profile) -> tuple[int, int]:
    """(host, SSD) KV tokens of the scenario's [strategy.tiered] (the profile's memory where not given)."""
    tiered = data.get("strategy", {}).get("tiered")
    if tiered is None:
        return 0, 0
    per_token = int(profile.model.kv_bytes_per_token)
    host = tiered.get("host_capacity_gib")
    ssd = tiered.get("ssd_capacity_gib")
    host_bytes = int(host * GIB) if host is not None else int(profile.hardware.host_memory_bytes)
    ssd_bytes = int(ssd * GIB) if ssd is not None else int(profile.hardware.ssd_bytes)
    return host_bytes // per_token, ssd_bytes // per_token


def _mean_field(records: list[RequestRecord], name: str) -> float | None:
    values = [getattr(r, name) for r in records if r.completed and hasattr(r, name)]
    return float(np.mean(values)) if values else None


def path_quantities(records: list[RequestRecord]) -> Paths:
    """Per-path means from the records' optional per-path fields, where the records have them."""
    done = [r for r in records if r.completed]
    paths: Paths = {}
    if done and hasattr(done[0], "draft_rounds") and hasattr(done[0], "accepted_tokens"):
        rounds = sum(int(r.draft_rounds) for r in done)
        accepted = sum(int(r.accepted_tokens) for r in done)
        if rounds:  # speculation was on (the fields exist, zero, on every record)
            paths["accepted_per_round"] = (accepted / rounds, "draft tokens")
    for field, name in (("paging_s", "paging_ms_per_request"), ("merge_s", "merge_ms_per_request")):
        mean = _mean_field(done, field)
        if mean is not None and mean > 0.0:
            paths[name] = (mean * 1000.0, "ms")
    return paths


def simulate_case(data: dict[str, Any], source: str | None, profile: Profile, seed: int) -> Simulated:
    """Simulate the whole scenario (strategies included); NotAvailable when the simulator refuses it."""
    try:
        scenario = scenario_from_dict(copy.deepcopy(data), source)
    except InputError as exc:
        raise NotAvailable(f"simulator: {exc.field}: {exc.problem}") from None
    try:
        result = simulate(scenario, profile, seed=seed, replications=1)
    except InputError as exc:  # e.g. a path the profile has no measurement for
        raise NotAvailable(f"simulator: {exc}") from None
    records = list(result.runs[0].records)
    if data.get("strategy"):
        # a simulator that parses [strategy.*] but does not apply it yet would give the baseline's
        # records: every scenario here switches a path on that changes times, so equal = ignored
        plain = {k: v for k, v in copy.deepcopy(data).items() if k != "strategy"}
        baseline = simulate(scenario_from_dict(plain, source), profile, seed=seed, replications=1)
        if list(baseline.runs[0].records) == records:
            raise NotAvailable(f"simulator: [strategy.{', '.join(sorted(data['strategy']))}] parsed but the "
                               "records equal the baseline's (the runner does not apply it yet)")
    paths = path_quantities(records)
    prefix = result.runs[0].prefix
    if prefix is not None and prefix.counters.prompt_tokens:
        paths["prefix_hit_rate"] = (prefix.counters.saved_tokens / prefix.counters.prompt_tokens,
                                    "fraction of prompt tokens")
    return Simulated(records, paths, result.profile_source)
