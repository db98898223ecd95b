"""A scenario: the workload, cluster, batching policy and SLA one simulation answers for.

The dataclasses validate themselves when built (an InputError naming the field, which is a
ValueError); the TOML reader below checks names and types, then adds the file path and the
dotted section prefix to any error. Field names are the ones in docs/contracts.md.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.paths import SCENARIOS_DIR
from simulator.strategy import StrategySpec, strategy_from_dict
from simulator.traces import SHIPPED_TRACES, resolve_trace_path

ARRIVAL_KINDS = ("poisson", "gamma", "trace")
LENGTH_KINDS = ("fixed", "uniform", "lognormal", "empirical", "trace")
LENGTH_COLUMNS = ("prompt", "output")
# the parameters each length kind requires (and no other kind accepts); "trace" takes none
LENGTH_PARAMS = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("median", "sigma"),
                 "empirical": ("trace", "column")}
BATCHING_POLICIES = ("static", "dynamic", "continuous", "chunked", "adaptive")  # docs/batching.md
PREEMPTION_MODES = ("none", "recompute", "swap")


def _fail(field: str, problem: str) -> None:
    raise InputError(None, field, problem)


def _check_kind(kind: str, allowed: tuple[str, ...]) -> None:
    if kind not in allowed:
        _fail("kind", f"must be one of {', '.join(allowed)}, got {kind!r}")


def _positive(field: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        _fail(field, f"must be > 0, got {value}")


def _at_least(field: str, value: int | None, low: int) -> None:
    if value is not None and value < low:
        _fail(field, f"must be >= {low}, got {value}")


def _only_for(spec: object, owners: dict[str, tuple[str, ...]]) -> None:
    """Parameters that belong to another kind are errors, not silently ignored."""
    kind = spec.kind
    for field, kinds in owners.items():
        if getattr(spec, field) is not None and kind not in kinds:
            _fail(field, f"only valid for kind = {' | '.join(kinds)}, not {kind!r}")


@dataclass(frozen=True)
class ArrivalSpec:
    kind: str  # "poisson" | "gamma" | "trace"
    rate_per_s: float | None = None  # exactly one of rate_per_s / load_fraction for poisson and gamma
    load_fraction: float | None = None  # fraction of the replicas' saturation throughput (capacity.py)
    cv: float | None = None  # gamma only: coefficient of variation of inter-arrival times (1 = poisson)
    trace: str | None = None  # trace only: a shipped trace name (e.g. "azure-conv-2023") or a path
    time_scale: float = 1.0  # trace only: inter-arrival times are multiplied by this

    def __post_init__(self) -> None:
        _check_kind(self.kind, ARRIVAL_KINDS)
        rated = ("poisson", "gamma")
        _only_for(self, {"rate_per_s": rated, "load_fraction": rated, "cv": ("gamma",), "trace": ("trace",)})
        _positive("rate_per_s", self.rate_per_s)
        if self.load_fraction is not None and not (0.0 < self.load_fraction <= 2.0):
            _fail("load_fraction", f"must be in (0, 2], got {self.load_fraction}")
        _positive("cv", self.cv)
        _positive("time_scale", self.time_scale)
        if self.kind in rated and (self.rate_per_s is None) == (self.load_fraction is None):
            _fail("rate_per_s", "give exactly one of rate_per_s or load_fraction")
        if self.kind == "gamma" and self.cv is None:
            _fail("cv", "required for kind = 'gamma'")
        if self.kind == "trace" and not self.trace:
            _fail("trace", "required for kind = 'trace' (a shipped trace name or a file path)")
        if self.kind != "trace" and self.time_scale != 1.0:
            _fail("time_scale", f"only valid for kind = trace, not {self.kind!r}")


@dataclass(frozen=True)
class LengthSpec:
    kind: str  # "fixed" | "uniform" | "lognormal" | "empirical" | "trace"
    value: int | None = None  # fixed
    low: int | None = None  # uniform (inclusive)
    high: int | None = None
    median: float | None = None  # lognormal: median and sigma of log
    sigma: float | None = None
    trace: str | None = None  # empirical: bootstrap from this trace's column
    column: str | None = None  # "prompt" | "output"
    min: int = 1  # clamp after sampling
    max: int | None = None

    def __post_init__(self) -> None:
        _check_kind(self.kind, LENGTH_KINDS)
        _only_for(self, {field: (kind,) for kind, params in LENGTH_PARAMS.items() for field in params})
        if self.min < 1:
            _fail("min", f"must be >= 1 (every request has a token), got {self.min}")
        if self.max is not None and self.max < self.min:
            _fail("max", f"must be >= min ({self.min}), got {self.max}")
        for field in LENGTH_PARAMS.get(self.kind, ()):
            if getattr(self, field) is None:
                _fail(field, f"required for kind = {self.kind!r}")
        _at_least("value", self.value, 1)
        _at_least("low", self.low, 1)
        if self.low is not None and self.high is not None and self.high < self.low:
            _fail("high", f"must be >= low ({self.low}), got {self.high}")
        _positive("median", self.median)
        if self.sigma is not None and not (math.isfinite(self.sigma) and self.sigma >= 0):
            _fail("sigma", f"must be >= 0, got {self.sigma}")
        if self.column is not None and self.column not in LENGTH_COLUMNS:
            _fail("column", f"must be one of {', '.join(LENGTH_COLUMNS)}, got {self.column!r}")


@dataclass(frozen=True)
class WorkloadSpec:
    arrival: ArrivalSpec
    prompt_tokens: LengthSpec
    output_tokens: LengthSpec
    tasks: tuple[tuple[str, float], ...] = (("default", 1.0),)  # task mix, weights sum to 1
    requests: int | None = None  # exactly one of requests / duration_s (a trace may give neither: all rows)
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if not self.tasks:
            _fail("tasks", "needs at least one task")
        for task, weight in self.tasks:
            if not task:
                _fail("tasks", "task names must be non-empty")
            if not (math.isfinite(weight) and weight > 0):
                _fail(f"tasks.{task}", f"weight must be > 0, got {weight}")
        total = sum(weight for _, weight in self.tasks)
        if abs(total - 1.0) > 1e-9:  # normalise here so every producer gets a proper mix
            object.__setattr__(self, "tasks", tuple((t, w / total) for t, w in self.tasks))
        _at_least("requests", self.requests, 1)
        _positive("duration_s", self.duration_s)
        if self.requests is not None and self.duration_s is not None:
            _fail("requests", "give requests or duration_s, not both")
        if self.arrival.kind != "trace" and self.requests is None and self.duration_s is None:
            _fail("requests", "give requests or duration_s (only a trace replay may give neither)")
        for name, spec in (("prompt_tokens", self.prompt_tokens), ("output_tokens", self.output_tokens)):
            if spec.kind == "trace" and self.arrival.kind != "trace":
                _fail(f"{name}.kind", "'trace' lengths need arrival kind = 'trace' (use 'empirical' instead)")


@dataclass(frozen=True)
class ClusterSpec:
    gpus: int = 1
    device_memory_gib: float | None = None  # None: the profile's device memory

    def __post_init__(self) -> None:
        _at_least("gpus", self.gpus, 1)
        _positive("device_memory_gib", self.device_memory_gib)


@dataclass(frozen=True)
class BatchingSpec:
    policy: str = "continuous"
    max_batch_size: int = 256
    max_batched_tokens: int = 8192
    max_wait_ms: float = 0.0  # static/dynamic/adaptive: longest a batch waits to fill (Triton's max_queue_delay)
    preemption: str = "none"  # "none" (reserve prompt + output at admission) | "recompute" | "swap"
    # adaptive only (simulator/adaptive_batching.py): AIMD on batch size and wait window
    adaptive_window: int = 200  # finished requests whose P99 is compared with the SLA
    adaptive_every: int = 20  # finished requests between two adjustments
    adaptive_margin: float = 0.8  # grow only while the windowed P99 is below margin x target
    adaptive_decrease: float = 0.5  # multiplicative decrease of batch size and window when over
    adaptive_batch_step: int = 1  # additive increase of the batch size when under
    adaptive_wait_step_ms: float = 1.0  # additive increase of the wait window when under

    def __post_init__(self) -> None:
        if self.policy not in BATCHING_POLICIES:
            _fail("policy", f"unsupported policy {self.policy!r}; supported: {', '.join(BATCHING_POLICIES)}")
        _at_least("max_batch_size", self.max_batch_size, 1)
        _at_least("max_batched_tokens", self.max_batched_tokens, 1)
        if not (math.isfinite(self.max_wait_ms) and self.max_wait_ms >= 0):
            _fail("max_wait_ms", f"must be >= 0, got {self.max_wait_ms}")
        if self.preemption not in PREEMPTION_MODES:
            _fail("preemption", f"must be one of {', '.join(PREEMPTION_MODES)}, got {self.preemption!r}")
        _at_least("adaptive_window", self.adaptive_window, 1)
        _at_least("adaptive_every", self.adaptive_every, 1)
        _at_least("adaptive_batch_step", self.adaptive_batch_step, 1)
        if not 0.0 < self.adaptive_margin <= 1.0:
            _fail("adaptive_margin", f"must be in (0, 1], got {self.adaptive_margin}")
        if not 0.0 < self.adaptive_decrease < 1.0:
            _fail("adaptive_decrease", f"must be in (0, 1), got {self.adaptive_decrease}")
        if not (math.isfinite(self.adaptive_wait_step_ms) and self.adaptive_wait_step_ms >= 0):
            _fail("adaptive_wait_step_ms", f"must be >= 0, got {self.adaptive_wait_step_ms}")

    @property
    def needs_stepper(self) -> bool:
        """Whether only the general per-iteration loop can run this (simulator/stepper.py)."""
        return self.policy != "continuous" or self.preemption != "none"


@dataclass(frozen=True)
class SlaSpec:
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p99_ms: float | None = None

    def __post_init__(self) -> None:
        for field in ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms"):
            _positive(field, getattr(self, field))


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
    strategy: StrategySpec = StrategySpec()  # [strategy.*] tables (simulator/strategy.py); none = baseline

    def __post_init__(self) -> None:
        if not self.name:
            _fail("name", "must be non-empty")


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file; a bare name (no .toml, no slash) looks in data/scenarios/."""
    text = str(path)
    if not text.endswith(".toml") and "/" not in text and "\\" not in text:
        path = SCENARIOS_DIR / f"{text}.toml"
    source = str(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        known = ", ".join(sorted(p.stem for p in SCENARIOS_DIR.glob("*.toml")))
        raise InputError(source, None, f"scenario file not found (shipped scenarios: {known})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(source, None, f"invalid TOML: {exc}") from None
    return scenario_from_dict(data, source)


def scenario_from_dict(data: dict[str, Any], source: str | None = None) -> Scenario:
    """Build a scenario from a parsed-TOML-shaped dict (tests and the app use this)."""
    base_dir = Path(source).parent if source else None
    top_keys = {"name", "description", "profile", "workload", "cluster", "batching", "sla", "strategy"}
    _check_keys(data, top_keys, source, "")
    workload = dict(_table(data, "workload", source, required=True))
    _check_keys(workload, {"arrival", "prompt_tokens", "output_tokens", "tasks", "requests", "duration_s"},
                source, "workload")
    arrival = _build(ArrivalSpec, _traced(_table(workload, "arrival", source, True, "workload"),
                                          source, "workload.arrival", base_dir), source, "workload.arrival")
    lengths = {
        key: _build(LengthSpec, _traced(_table(workload, key, source, True, "workload"), source,
                                        f"workload.{key}", base_dir), source, f"workload.{key}")
        for key in ("prompt_tokens", "output_tokens")
    }
    tasks = _table(workload, "tasks", source, False, "workload") or {"default": 1.0}
    for task, weight in tasks.items():
        _typed(weight, float, source, f"workload.tasks.{task}")
    workload.update(arrival=arrival, tasks=tuple((t, float(w)) for t, w in tasks.items()), **lengths)
    default_name = Path(source).stem if source else "scenario"
    top = {"name": data.get("name", default_name), "description": data.get("description", ""),
           "profile": data.get("profile"), "source_path": source,
           "workload": _build(WorkloadSpec, workload, source, "workload"),
           "cluster": _build(ClusterSpec, _table(data, "cluster", source), source, "cluster"),
           "batching": _build(BatchingSpec, _table(data, "batching", source), source, "batching"),
           "sla": _build(SlaSpec, _table(data, "sla", source), source, "sla"),
           "strategy": strategy_from_dict(data.get("strategy"), source)}
    return _build(Scenario, top, source, "")


def _dotted(prefix: str, field: str | None) -> str:
    return ".".join(part for part in (prefix, field) if part)


def _table(data: dict[str, Any], key: str, source: str | None, required: bool = False,
           prefix: str = "") -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        if required:
            raise InputError(source, _dotted(prefix, key), "missing section")
        return {}
    if not isinstance(value, dict):
        raise InputError(source, _dotted(prefix, key), f"must be a table, got {type(value).__name__}")
    return value


def _check_keys(table: dict[str, Any], allowed: set[str], source: str | None, prefix: str) -> None:
    for key in table:
        if key not in allowed:
            # a shortened name ("rate" for "rate_per_s") beats a near spelling ("trace")
            near = [a for a in sorted(allowed) if a.startswith(key)] or difflib.get_close_matches(
                key, sorted(allowed), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; valid: {', '.join(sorted(allowed))}"
            raise InputError(source, _dotted(prefix, key), f"unknown field{hint}")


def _typed(value: object, kind: type, source: str | None, field: str) -> object:
    """TOML values against the dataclass annotation: ints for int, int or float for float (never bool)."""
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    if not ok:
        raise InputError(source, field, f"must be {'a number' if kind is float else kind.__name__}, "
                                        f"got {type(value).__name__} {value!r}")
    return value


def _build(cls: type, table: dict[str, Any], source: str | None, prefix: str) -> Any:
    """Check names and scalar types from cls's annotations, construct, and prefix any error."""
    names = {f.name: str(f.type) for f in fields(cls)}
    _check_keys(table, set(names), source, prefix)
    kwargs = {}
    for key, value in table.items():
        annotation = names[key]
        scalar = next((t for t in (int, float, str) if annotation.split(" |")[0] == t.__name__), None)
        kwargs[key] = value if scalar is None or value is None else _typed(value, scalar, source,
                                                                           _dotted(prefix, key))
    try:
        return cls(**kwargs)
    except InputError as exc:
        raise InputError(source, _dotted(prefix, exc.field), exc.problem) from None


def _traced(table: dict[str, Any], source: str | None, prefix: str, base_dir: Path | None) -> dict[str, Any]:
    """A trace reference must name a shipped trace or an existing .csv/.jsonl file; paths become absolute."""
    ref = table.get("trace")
    if not isinstance(ref, str) or ref in SHIPPED_TRACES:
        return table
    path = resolve_trace_path(ref, base_dir)
    if not path.is_file():
        raise InputError(source, f"{prefix}.trace", f"trace file not found: {ref!r} (shipped traces: "
                                                    f"{', '.join(sorted(SHIPPED_TRACES))})")
    if path.suffix.lower() not in (".csv", ".jsonl"):
        raise InputError(source, f"{prefix}.trace", "trace must be a .csv (Azure) or .jsonl (Mooncake) file")
    return {**table, "trace": str(path)}
