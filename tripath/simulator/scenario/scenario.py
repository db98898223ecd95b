"""A scenario: the workload, cluster, batching policy and SLA one simulation answers for.

The dataclasses validate themselves when built (an InputError naming the field, which is a
ValueError); the TOML reader (tripath/simulator/scenario/toml_reader.py) checks names and types, then adds the file
path and the dotted section prefix to any error. The workload's specs live in
tripath/simulator/scenario/workload_spec.py. Field names are the ones in docs/contracts.md.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.core.errors import InputError, read_input_text
from tripath.core.limits import MAX_GPUS, MAX_NESTING_DEPTH, MAX_SCENARIO_BYTES, check_depth
from tripath.simulator.scenario.checks import at_least, at_most, fail, positive, wait_ms
from tripath.simulator.scenario.prefix_workload import prefix_workload_from_dict
from tripath.simulator.scenario.strategy import StrategySpec, strategy_from_dict
from tripath.simulator.scenario.toml_reader import build, check_keys, subtable, traced, typed
from tripath.simulator.scenario.workload_spec import (
    ARRIVAL_KINDS,
    LENGTH_COLUMNS,
    LENGTH_KINDS,
    LENGTH_PARAMS,
    ArrivalSpec,
    LengthSpec,
    WorkloadSpec,
)

__all__ = [
    "ARRIVAL_KINDS", "BATCHING_POLICIES", "LENGTH_COLUMNS", "LENGTH_KINDS", "LENGTH_PARAMS", "PREEMPTION_MODES",
    "ArrivalSpec", "BatchingSpec", "ClusterSpec", "LengthSpec", "Scenario", "SlaSpec", "WorkloadSpec",
    "load_scenario", "read_scenario_file", "scenario_from_dict",
]

BATCHING_POLICIES = ("static", "dynamic", "continuous", "chunked", "adaptive")  # docs/batching.md
PREEMPTION_MODES = ("none", "recompute", "swap")


@dataclass(frozen=True)
class ClusterSpec:
    gpus: int = 1
    device_memory_gib: float | None = None  # None: the profile's device memory

    def __post_init__(self) -> None:
        at_least("gpus", self.gpus, 1)
        at_most("gpus", self.gpus, MAX_GPUS)  # every replica is simulated at every step
        positive("device_memory_gib", self.device_memory_gib)


@dataclass(frozen=True)
class BatchingSpec:
    policy: str = "continuous"
    max_batch_size: int = 256
    max_batched_tokens: int = 8192
    max_wait_ms: float = 0.0  # static/dynamic/adaptive: longest a batch waits to fill (Triton's max_queue_delay)
    preemption: str = "none"  # "none" (reserve prompt + output at admission) | "recompute" | "swap"
    # adaptive only (tripath/simulator/loop/adaptive_batching.py): AIMD on batch size and wait window
    adaptive_window: int = 200  # finished requests whose P99 is compared with the SLA
    adaptive_every: int = 20  # finished requests between two adjustments
    adaptive_margin: float = 0.8  # grow only while the windowed P99 is below margin x target
    adaptive_decrease: float = 0.5  # multiplicative decrease of batch size and window when over
    adaptive_batch_step: int = 1  # additive increase of the batch size when under
    adaptive_wait_step_ms: float = 1.0  # additive increase of the wait window when under

    def __post_init__(self) -> None:
        if self.policy not in BATCHING_POLICIES:
            fail("policy", f"unsupported policy {self.policy!r}; supported: {', '.join(BATCHING_POLICIES)}")
        at_least("max_batch_size", self.max_batch_size, 1)
        at_least("max_batched_tokens", self.max_batched_tokens, 1)
        wait_ms("max_wait_ms", self.max_wait_ms)
        if self.preemption not in PREEMPTION_MODES:
            fail("preemption", f"must be one of {', '.join(PREEMPTION_MODES)}, got {self.preemption!r}")
        at_least("adaptive_window", self.adaptive_window, 1)
        at_least("adaptive_every", self.adaptive_every, 1)
        at_least("adaptive_batch_step", self.adaptive_batch_step, 1)
        if not 0.0 < self.adaptive_margin <= 1.0:
            fail("adaptive_margin", f"must be in (0, 1], got {self.adaptive_margin}")
        if not 0.0 < self.adaptive_decrease < 1.0:
            fail("adaptive_decrease", f"must be in (0, 1), got {self.adaptive_decrease}")
        wait_ms("adaptive_wait_step_ms", self.adaptive_wait_step_ms)

    @property
    def needs_stepper(self) -> bool:
        """Whether only the general per-iteration loop can run this (tripath/simulator/loop/stepper.py)."""
        return self.policy != "continuous" or self.preemption != "none"


@dataclass(frozen=True)
class SlaSpec:
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p99_ms: float | None = None

    def __post_init__(self) -> None:
        for field in ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms"):
            positive(field, getattr(self, field))


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    workload: WorkloadSpec
    cluster: ClusterSpec
    batching: BatchingSpec
    sla: SlaSpec
    profile: str | None = None  # default profile name for this scenario
    source_path: str | None = None
    # [strategy.*] tables (tripath/simulator/scenario/strategy.py); none = baseline
    strategy: StrategySpec = StrategySpec()

    def __post_init__(self) -> None:
        if not self.name:
            fail("name", "must be non-empty")
        spec = self.strategy.speculative
        if spec is not None:  # the table's tasks must be the workload's (a typo would be silently unused)
            tasks = [task for task, _ in self.workload.tasks]
            for task, _ in spec.acceptance:
                if task not in tasks:
                    fail(f"strategy.speculative.acceptance.{task}",
                         f"unknown task {task!r}; the workload's tasks: {', '.join(tasks)}")


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file; a bare name (no .toml, no slash) looks in data/scenarios/."""
    text = str(path)
    if not text.endswith(".toml") and "/" not in text and "\\" not in text:
        path = SCENARIOS_DIR / f"{text}.toml"
    return scenario_from_dict(read_scenario_file(path), str(path))


def read_scenario_file(path: str | Path) -> dict[str, Any]:
    """The parsed TOML of a scenario file (not validated); a missing file names the shipped scenarios. A file
    that is not UTF-8, too large or nested too deeply is an InputError naming it."""
    source = str(path)
    known = ", ".join(sorted(p.stem for p in SCENARIOS_DIR.glob("*.toml")))
    text = read_input_text(path, f"scenario file not found (shipped scenarios: {known})", "cannot read scenario",
                           max_bytes=MAX_SCENARIO_BYTES)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(source, None, f"invalid TOML: {exc}") from None
    except RecursionError:
        raise InputError(source, None, f"invalid TOML: nested more than {MAX_NESTING_DEPTH} levels deep") from None
    except ValueError as exc:  # an integer past Python's int-to-text digit limit
        raise InputError(source, None, f"invalid TOML: {exc}") from None
    check_depth(data, source)
    return data


def scenario_from_dict(data: dict[str, Any], source: str | None = None) -> Scenario:
    """Build a scenario from a parsed-TOML-shaped dict (tests and the app use this)."""
    base_dir = Path(source).parent if source else None
    top_keys = {"name", "description", "profile", "workload", "cluster", "batching", "sla", "strategy"}
    check_keys(data, top_keys, source, "")
    workload = dict(subtable(data, "workload", source, required=True))
    check_keys(workload, {"arrival", "prompt_tokens", "output_tokens", "tasks", "requests", "duration_s", "prefix"},
                source, "workload")
    arrival = build(ArrivalSpec, traced(subtable(workload, "arrival", source, True, "workload"),
                                          source, "workload.arrival", base_dir), source, "workload.arrival")
    lengths = {
        key: build(LengthSpec, traced(subtable(workload, key, source, True, "workload"), source,
                                        f"workload.{key}", base_dir), source, f"workload.{key}")
        for key in ("prompt_tokens", "output_tokens")
    }
    tasks = subtable(workload, "tasks", source, False, "workload") or {"default": 1.0}
    for task, weight in tasks.items():
        typed(weight, float, source, f"workload.tasks.{task}")
    workload.update(arrival=arrival, tasks=tuple((t, float(w)) for t, w in tasks.items()), **lengths)
    if "prefix" in workload:
        workload["prefix"] = prefix_workload_from_dict(workload["prefix"], source, tuple(tasks))
    default_name = Path(source).stem if source else "scenario"
    top = {"name": data.get("name", default_name), "description": data.get("description", ""),
           "profile": data.get("profile"), "source_path": source,
           "workload": build(WorkloadSpec, workload, source, "workload"),
           "cluster": build(ClusterSpec, subtable(data, "cluster", source), source, "cluster"),
           "batching": build(BatchingSpec, subtable(data, "batching", source), source, "batching"),
           "sla": build(SlaSpec, subtable(data, "sla", source), source, "sla"),
           "strategy": strategy_from_dict(data.get("strategy"), source)}
    return build(Scenario, top, source, "")
