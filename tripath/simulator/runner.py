"""Simulate a Scenario on a Profile: seeded replications (their summary and files: tripath/simulator/summary.py).

Replication i draws its workload from numpy.random.default_rng(SeedSequence(seed).spawn(R)[i]),
so the same seed gives the same records bit for bit, and replications are independent streams.
Each percentile in the summary is the mean over replications, with a distribution-free order-statistic 95 %
interval over the pooled requests (tripath/core/metrics.py: percentile_estimate).

Where each number comes from: every latency is *simulated* on cost models whose kind is the
profile's ``source`` (measured, fitted, projected, published or seed); the arrival rate is the
scenario's (``rate_per_s``) or ``load_fraction`` x the saturation *estimate* of
tripath/simulator/capacity.py, or none for a closed loop of users (its arrivals follow the finishes); the KV
budget is the profile's, or tp x cluster.device_memory_gib minus the model's weights.

Where the fast replicas serve a scenario (``streams``: the baseline, compression and/or SP; continuous batching,
open-loop arrivals, no time series), ``simulate_recording`` runs it with the workload as arrays and every record
written to a CSV as its request finishes (tripath/simulator/loop/streaming.py), the summary's inputs tallied on the
way (tripath/simulator/tally.py): memory flat in the number of requests, the same records and summary as
``simulate``. Anything else runs in memory (``simulate``).

The profile is read here, at the top: ``RunCosts.for_scenario`` (tripath/simulator/paths/run_costs.py) converts it
once per run into the costs and path parameters the loops and the paths use, and nothing below reads it; a
scenario's own ``[strategy.speculative] acceptance`` table replaces the profile's entries for its tasks first.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from tripath.core.errors import InputError
from tripath.core.records import RunResult
from tripath.profile.profile import Profile
from tripath.simulator.capacity import Saturation, saturation
from tripath.simulator.loop.cluster import ClosedLoop, ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.loop.stepper_setup import loop_reason, needs_stepper, stepper_setup
from tripath.simulator.loop.streaming import InOrder, RecordWriter, RequestArrays, StreamingCluster, StreamResult
from tripath.simulator.paths.capacity import path_saturation
from tripath.simulator.paths.provenance import strategies
from tripath.simulator.paths.run_costs import RunCosts, kv_capacity, with_scenario_acceptance
from tripath.simulator.paths.step import Transforms, fast_transforms, replica_gpus
from tripath.simulator.scenario.scenario import Scenario
from tripath.simulator.scenario.workload import (
    generate_arrays,
    generate_requests,
    generate_with_prefixes,
    mean_lengths,
)
from tripath.simulator.tally import RunTally


@dataclass(frozen=True)
class SimulationResult:
    """Every replication's run plus what the runs were set up with."""

    scenario: Scenario
    profile_key: str
    profile_source: str
    seed: int
    fast: bool
    replicas: int
    kv_capacity_bytes: int
    kv_capacity_source: str
    rate_per_s: float | None
    rate_source: str
    saturation: Saturation | None
    runs: tuple[RunResult, ...]
    loop: str = "replica"  # "replica": the exact fast path; "stepper": one event per iteration (docs/batching.md)
    timeseries_interval_s: float | None = None  # each run's timeseries holds samples at this interval
    loop_reason: str = ""  # why that loop ran (tripath/simulator/loop/stepper_setup.py: loop_reason)
    # paths on, parameters, profile sources (tripath/simulator/paths/provenance.py)
    strategies: dict[str, Any] | None = None
    # a streamed run (simulate_recording): its runs hold no records; the summary reads these tallies instead
    tallies: tuple[RunTally, ...] | None = None
    records_path: str | None = None  # where a streamed run wrote its records (None: nowhere)


def cluster_config(scenario: Scenario, profile: Profile) -> tuple[ClusterConfig, str]:
    # a replica is tp GPUs, times the sequence-parallel degree when SP is on (each rank a tp group), or times the
    # attention data-parallel ranks (profile key.attention_dp: each rank a tp group with the profile's batching
    # limits and KV budget, stepping in lockstep)
    tp, ranks = int(profile.key.tp), int(profile.key.attention_dp)
    if ranks > 1 and scenario.strategy.sequence_parallel is not None:
        raise InputError(scenario.source_path, "strategy.sequence_parallel", f"profile {profile.key} runs attention "
                         f"data parallel over {ranks} ranks; sequence parallelism over it is not modelled")
    per_replica = replica_gpus(scenario.strategy, tp) * ranks
    replicas = scenario.cluster.gpus // per_replica
    if replicas < 1:
        layout = (f"attention data-parallel ranks {ranks}" if ranks > 1 else
                  f"sequence-parallel degree {per_replica // tp}")
        raise InputError(scenario.source_path, "cluster.gpus",
                         f"{scenario.cluster.gpus} GPUs cannot hold one replica of {per_replica} GPUs "
                         f"(tp = {profile.key.tp} x {layout})")
    capacity, source = kv_capacity(scenario, profile)
    if ranks > 1:
        source += f"; per attention data-parallel rank ({ranks} per replica, each its own KV pool)"
    batching = scenario.batching
    replica = ReplicaConfig(batching.max_batch_size, batching.max_batched_tokens, capacity,
                            int(profile.model.kv_bytes_per_token))
    return ClusterConfig(replicas, replica, ranks), source


def arrival_rate(scenario: Scenario, profile: Profile, config: ClusterConfig, costs: RunCosts | None = None
                 ) -> tuple[float | None, str, Saturation | None]:
    """(rate, where it comes from, saturation estimate or None) for the scenario's arrivals; ``costs``: the
    scenario's converted costs where the caller has them (else converted here when the paths need them)."""
    arrival = scenario.workload.arrival
    closed = closed_loop(scenario)
    if closed is not None:
        return None, (f"closed loop, {closed.users} users (think time {closed.think_s:g} s): each sends its next "
                      "request when its previous one ends"), None
    if arrival.kind == "trace":
        if arrival.rate_per_s is not None:
            return arrival.rate_per_s, "scenario workload.arrival.rate_per_s (the trace's arrivals paced to it)", None
        return None, "trace timestamps", None
    if arrival.rate_per_s is not None:
        return arrival.rate_per_s, "scenario workload.arrival.rate_per_s", None
    if arrival.load_fraction is None:
        raise InputError(scenario.source_path, "workload.arrival", "give rate_per_s or load_fraction")
    prompt, output = mean_lengths(scenario.workload)
    if scenario.strategy.baseline:
        sat = saturation(profile, prompt, output, config.steppers, config.replica.max_batch_size,
                         config.replica.kv_capacity_bytes)
        where = "tripath/simulator/capacity.py"
    else:  # the paths change bytes per token, capacity, tokens per step and the step's cost
        if costs is None:
            costs = RunCosts.for_scenario(scenario, profile)
        sat = path_saturation(scenario, costs, prompt, output, config.steppers, config.replica.max_batch_size)
        where = "tripath/simulator/paths/capacity.py, with the scenario's paths"
    rate = arrival.load_fraction * sat.requests_per_s
    return rate, f"load_fraction {arrival.load_fraction} x saturation estimate ({where})", sat


def closed_loop(scenario: Scenario) -> ClosedLoop | None:
    """The scenario's closed loop of users (arrival kind = "closed"), or None for open-loop arrivals."""
    arrival = scenario.workload.arrival
    if arrival.kind != "closed":
        return None
    assert arrival.users is not None  # ArrivalSpec requires it for kind = "closed"
    return ClosedLoop(arrival.users, arrival.think_s or 0.0)


def replicate(scenario: Scenario, costs: RunCosts, config: ClusterConfig, rate: float | None,
              seed_sequence: np.random.SeedSequence, fast: bool = True,
              timeseries_interval_s: float | None = None) -> RunResult:
    """One replication: draw the workload from this seed sequence and serve it on the run's converted costs."""
    prefix = scenario.strategy.prefix_cache
    prefixes = None
    closed = closed_loop(scenario)
    if prefix is None:
        requests = generate_requests(scenario.workload, np.random.default_rng(seed_sequence), rate, closed_loop=True)
    else:
        requests, prefixes = generate_with_prefixes(scenario.workload, np.random.default_rng(seed_sequence), rate,
                                                    prefix.block_tokens, closed_loop=True)
    setup = stepper_setup(scenario, costs, config.steppers, seed_sequence, timeseries_interval_s,
                          prefixes=prefixes)
    transforms = fast_transforms(costs) if setup is None else None
    if transforms is not None:  # compression / SP only: the fast replicas on the transformed cost model
        fast_config = transformed_config(config, transforms)
        return simulate_requests(requests, fast_config, transforms.cost, fast=fast, sp=transforms.sp, closed=closed)
    return simulate_requests(requests, config, costs.cost.fresh(), fast=fast, setup=setup, closed=closed)


def replicate_converting(scenario: Scenario, profile: Profile, config: ClusterConfig, rate: float | None,
                         seed_sequence: np.random.SeedSequence, fast: bool = True,
                         timeseries_interval_s: float | None = None) -> RunResult:
    """``replicate`` in a worker process: the profile crosses the process boundary and is converted there (the
    converted costs hold the formulas bound as closures, which do not pickle)."""
    return replicate(scenario, RunCosts.for_scenario(scenario, profile), config, rate, seed_sequence, fast,
                     timeseries_interval_s)


def transformed_config(config: ClusterConfig, transforms: Transforms) -> ClusterConfig:
    """The fast replicas' limits with compression's bytes per token and SP's P ranks of KV budget."""
    replica = dataclasses.replace(config.replica, kv_capacity_bytes=transforms.kv_capacity_bytes,
                                  kv_bytes_per_token=transforms.kv_bytes_per_token)
    return dataclasses.replace(config, replica=replica)


@dataclass(frozen=True)
class _Setup:
    """What every replication of a run shares: the profile (with the scenario's acceptance), cluster, costs, rate."""

    profile: Profile
    config: ClusterConfig
    capacity_source: str
    costs: RunCosts
    rate: float | None
    rate_source: str
    saturation: Saturation | None


def _setup(scenario: Scenario, profile: Profile) -> _Setup:
    # the scenario's own acceptance table, where it has one, is the run's (and the summary's provenance)
    profile = with_scenario_acceptance(profile, scenario.strategy, scenario.source_path)
    config, capacity_source = cluster_config(scenario, profile)
    costs = RunCosts.for_scenario(scenario, profile)  # the paths checked against the profile, before any run
    strategy = scenario.strategy
    if strategy.sequence_parallel is not None:
        capacity_source += (f"; per SP rank: a replica of degree {strategy.sequence_parallel.degree} holds that many "
                            "budgets (peak KV bytes may exceed this value)")
    if strategy.compression is not None:
        capacity_source += f"; KV stored {strategy.compression.mode}-compressed (profile compression section)"
        comp = profile.compression.get(strategy.compression.mode)
        if comp is not None and comp.prefill_overhead_ratio is None and not comp.prefill_overhead_points:
            capacity_source += "; prefill not slowed by compression (the profile has no prefill_overhead_ratio)"
    rate, rate_source, sat = arrival_rate(scenario, profile, config, costs)
    return _Setup(profile, config, capacity_source, costs, rate, rate_source, sat)


def _result(scenario: Scenario, setup: _Setup, seed: int, fast: bool, runs: list[RunResult], stepper: bool,
            timeseries_interval_s: float | None, tallies: tuple[RunTally, ...] | None = None,
            records_path: str | None = None) -> SimulationResult:
    profile, config = setup.profile, setup.config
    _, reason = loop_reason(scenario, timeseries_interval_s)
    return SimulationResult(scenario, profile.key_str(), profile.source, seed, fast, config.replicas,
                            config.replica.kv_capacity_bytes, setup.capacity_source, setup.rate, setup.rate_source,
                            setup.saturation, tuple(runs), "stepper" if stepper else "replica", timeseries_interval_s,
                            reason, strategies(scenario, profile), tallies, records_path)


def simulate(scenario: Scenario, profile: Profile, seed: int = 0, replications: int = 1,
             fast: bool = True, workers: int = 1, timeseries_interval_s: float | None = None) -> SimulationResult:
    """Run ``replications`` seeded replications of the scenario on the profile's costs.

    ``workers`` > 1 runs replications in a local process pool; each replication depends only on
    its own seed sequence, so the records are the same bit for bit whatever the worker count.
    ``timeseries_interval_s`` samples queue, batch, KV per tier and paging every so many simulated
    seconds (tripath/simulator/loop/timeseries.py); it runs the per-iteration loop, whose records equal the fast path's.
    """
    if replications < 1:
        raise ValueError(f"replications must be >= 1, got {replications}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    run = _setup(scenario, profile)
    config, costs, rate = run.config, run.costs, run.rate
    children = np.random.SeedSequence(seed).spawn(replications)
    # Bad batching/preemption input fails here, before any replication runs.
    setup = stepper_setup(scenario, costs, config.steppers, children[0], timeseries_interval_s)
    interval = timeseries_interval_s
    if workers == 1 or replications == 1:
        runs = [replicate(scenario, costs, config, rate, child, fast, interval) for child in children]
    else:
        from concurrent.futures import ProcessPoolExecutor  # here: a single process never loads it

        with ProcessPoolExecutor(max_workers=min(workers, replications)) as pool:
            futures = [pool.submit(replicate_converting, scenario, run.profile, config, rate, child, fast, interval)
                       for child in children]
            runs = [future.result() for future in futures]
    return _result(scenario, run, seed, fast, runs, setup is not None, timeseries_interval_s)


def streams(scenario: Scenario, fast: bool = True, timeseries_interval_s: float | None = None) -> bool:
    """Whether ``simulate_recording`` streams this run: the fast replicas serve it (the baseline, or compression
    and/or SP only, on continuous batching without preemption or time series) and its arrivals are open-loop."""
    return (fast and not needs_stepper(scenario, timeseries_interval_s) and closed_loop(scenario) is None
            and scenario.strategy.prefix_cache is None)


def simulate_recording(scenario: Scenario, profile: Profile, records_path: str | os.PathLike[str] | None,
                       seed: int = 0, replications: int = 1, fast: bool = True,
                       timeseries_interval_s: float | None = None) -> SimulationResult:
    """``simulate``, with memory flat in the number of requests where the run ``streams``.

    Streamed: each replication's workload stays as arrays, every record is written to ``records_path`` (CSV, the
    rows and order summary.write_outputs writes; None: written nowhere) as soon as the records before it are,
    and the summary's inputs are tallied on the way; the result holds those tallies and no records, and
    summary() of it equals summary() of ``simulate``'s, records.csv byte for byte
    (tests/simulator/loop/test_streamed_run.py). Otherwise ``simulate`` runs in memory (``records_path`` is then
    not written: summary.write_outputs writes it from the records)."""
    if not streams(scenario, fast, timeseries_interval_s):
        return simulate(scenario, profile, seed, replications, fast, 1, timeseries_interval_s)
    if replications < 1:
        raise ValueError(f"replications must be >= 1, got {replications}")
    run = _setup(scenario, profile)
    writer = None if records_path is None else RecordWriter(records_path)
    runs: list[RunResult] = []
    tallies: list[RunTally] = []
    with nullcontext() if writer is None else writer.writing():  # on any failure no records file is left
        for replication, child in enumerate(np.random.SeedSequence(seed).spawn(replications)):
            if writer is not None:
                writer.replication = replication
            stream, tally = _stream_one(scenario, run, child, writer)
            runs.append(RunResult((), stream.replicas, stream.extrapolations, stream.events))
            tallies.append(tally)
    if writer is not None:
        writer.close()
    return _result(scenario, run, seed, fast, runs, False, timeseries_interval_s, tuple(tallies),
                   None if records_path is None else str(records_path))


def _stream_one(scenario: Scenario, run: _Setup, seed_sequence: np.random.SeedSequence,
                writer: RecordWriter | None) -> tuple[StreamResult, RunTally]:
    """One streamed replication: its StreamResult and tally (records in request order to ``writer`` and the tally)."""
    arrays = RequestArrays(*generate_arrays(scenario.workload, np.random.default_rng(seed_sequence), run.rate))
    sla = scenario.sla
    tally = RunTally(len(arrays), sla.ttft_p99_ms, sla.tpot_p99_ms, sla.e2e_p99_ms)
    if writer is None:
        sink = tally.add
    else:
        def sink(record: Any) -> None:
            writer(record)
            tally.add(record)
    ordered = InOrder(sink)
    transforms = fast_transforms(run.costs)
    if transforms is None:
        cluster = StreamingCluster(arrays, run.config, run.costs.cost.fresh(), ordered)
    else:  # compression / SP only: the fast replicas on the transformed cost model, as replicate()
        cluster = StreamingCluster(arrays, transformed_config(run.config, transforms), transforms.cost, ordered,
                                   transforms.sp)
    stream = cluster.run()
    ordered.close(len(arrays))
    return stream, tally
