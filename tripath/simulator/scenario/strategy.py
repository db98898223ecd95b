"""Which optimization paths a scenario switches on: the ``[strategy.*]`` tables of a scenario TOML.

Each table's presence switches its path on; all absent (``StrategySpec()``) is the baseline.
The dataclasses validate their own fields when built (an InputError naming the field); the
checks that need the profile (a compression mode the profile measured, acceptance for every
task, paging links, sequence-parallel rows) live in ``check_against_profile``, which names the
scenario field and the profile together, because either may be the one to fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tripath.core.errors import InputError
from tripath.core.limits import MAX_SPECULATIVE_K
from tripath.profile.profile import Profile

PROPOSERS = ("draft", "prompt_lookup")
TIER_POLICIES = ("lru",)
# Prompt-lookup acceptance lives in the profile's acceptance table under this prefix + task name,
# e.g. "prompt_lookup:code" (no draft model: its acceptance is not the draft model's).
PROMPT_LOOKUP_PREFIX = "prompt_lookup:"
DEVICE_HOST = "device_host"  # the paging links the tiered path reads (both directions, per profile)
HOST_SSD = "host_ssd"
GIB = 2**30


def _fail(field: str, problem: str) -> None:
    raise InputError(None, field, problem)


def _finite(field: str, value: float | None, low: float = 0.0, high: float = math.inf) -> None:
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        _fail(field, f"must be a number in [{low}, {high}], got {value}")


@dataclass(frozen=True)
class SpeculativeSpec:
    k: int | None = None  # proposal length; None: the profile's speculative.k
    adaptive: bool = False  # adaptive K (tripath/core/speculative.py's AdaptiveK)
    fallback_acceptance: float | None = None  # adaptive: plain decoding below this acceptance; None: break-even
    proposer: str = "draft"
    # the user's own per-task acceptance a, (task, a) in table order: replaces the profile's entry for that task
    # (tripath/simulator/paths/run_costs.py with_scenario_acceptance); the proposer's entry (prompt_lookup: too)
    acceptance: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.k is not None and not 1 <= self.k <= MAX_SPECULATIVE_K:
            _fail("k", f"must be from 1 to {MAX_SPECULATIVE_K}, got {self.k}")
        if not isinstance(self.adaptive, bool):
            _fail("adaptive", f"must be true or false, got {self.adaptive!r}")
        _finite("fallback_acceptance", self.fallback_acceptance, 0.0, 1.0)
        # 0 = never fall back, which is what a fixed K does (the agreed format's example writes it so);
        # any other threshold with a fixed K would be silently ignored, so it is an error
        if self.fallback_acceptance not in (None, 0.0) and not self.adaptive:
            _fail("fallback_acceptance", "only valid with adaptive = true (a fixed K never falls back)")
        if self.proposer not in PROPOSERS:
            _fail("proposer", f"must be one of {', '.join(PROPOSERS)}, got {self.proposer!r}")
        for task, a in self.acceptance:
            if not task:
                _fail("acceptance", "task names must be non-empty")
            _finite(f"acceptance.{task}", a, 0.0, 1.0)

    @property
    def acceptance_table(self) -> dict[str, float]:
        """The scenario's own acceptance per task (empty: the profile's for every task)."""
        return dict(self.acceptance)


@dataclass(frozen=True)
class TieredSpec:
    host_capacity_gib: float | None = None  # None: the profile's hardware.host_memory_bytes
    ssd_capacity_gib: float | None = None  # None: the profile's hardware.ssd_bytes
    chunk_tokens: int = 256  # paging granularity (one page)
    policy: str = "lru"
    # pinned on the device for every live sequence (tripath/engine/tiered/tiers.py TierConfig's defaults): they
    # bound how many sequences the device pool admits (tripath/simulator/paths/tiered.py: TierPhysics.device_fits)
    sink_tokens: int = 4
    window_tokens: int = 256
    # apply that residency rule? None: when the profile was measured on the engine (source "measured"),
    # whose rule it is; seed and published profiles describe other engines, whose rule is not known
    device_residency: bool | None = None

    def __post_init__(self) -> None:
        _finite("host_capacity_gib", self.host_capacity_gib)
        _finite("ssd_capacity_gib", self.ssd_capacity_gib)
        if self.chunk_tokens < 1:
            _fail("chunk_tokens", f"must be >= 1, got {self.chunk_tokens}")
        if self.policy not in TIER_POLICIES:
            _fail("policy", f"must be one of {', '.join(TIER_POLICIES)}, got {self.policy!r}")
        for name in ("sink_tokens", "window_tokens"):
            if getattr(self, name) < 0:
                _fail(name, f"must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class SequenceParallelSpec:
    degree: int = 2

    def __post_init__(self) -> None:
        if self.degree < 2:
            _fail("degree", f"must be >= 2 (1 is no sequence parallelism), got {self.degree}")


@dataclass(frozen=True)
class CompressionSpec:
    mode: str = "int8"

    def __post_init__(self) -> None:
        if not self.mode:
            _fail("mode", "must be a non-empty mode name")


PREFIX_ROUTINGS = ("affinity", "least_loaded")


@dataclass(frozen=True)
class PrefixCacheSpec:
    """Automatic prefix caching (tripath/simulator/paths/prefix.py); ``enabled = false`` is the same as no table."""

    enabled: bool = True
    block_tokens: int = 512  # tokens per cached block (Mooncake's hash_ids are 512-token blocks)
    routing: str = "affinity"  # "affinity": the replica holding the longest cached prefix; "least_loaded"
    # affinity only: a replica may take a request for its cached prefix while it has at most this many more
    # outstanding requests than the least loaded one (else the least loaded takes it)
    affinity_slack: int = 4

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            _fail("enabled", f"must be true or false, got {self.enabled!r}")
        if self.block_tokens < 1:
            _fail("block_tokens", f"must be >= 1, got {self.block_tokens}")
        if self.routing not in PREFIX_ROUTINGS:
            _fail("routing", f"must be one of {', '.join(PREFIX_ROUTINGS)}, got {self.routing!r}")
        if self.affinity_slack < 0:
            _fail("affinity_slack", f"must be >= 0, got {self.affinity_slack}")


@dataclass(frozen=True)
class StrategySpec:
    """The paths switched on; every field None is the baseline."""

    speculative: SpeculativeSpec | None = None
    tiered: TieredSpec | None = None
    sequence_parallel: SequenceParallelSpec | None = None
    compression: CompressionSpec | None = None
    prefix_cache: PrefixCacheSpec | None = None  # None also when the table says enabled = false

    @property
    def baseline(self) -> bool:
        return all(getattr(self, name) is None for name in STRATEGY_TABLES)


STRATEGY_TABLES: dict[str, type] = {"speculative": SpeculativeSpec, "tiered": TieredSpec,
                                    "sequence_parallel": SequenceParallelSpec, "compression": CompressionSpec,
                                    "prefix_cache": PrefixCacheSpec}
_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "speculative": {"k": (int,), "adaptive": (bool,), "fallback_acceptance": (int, float), "proposer": (str,),
                    "acceptance": (dict,)},
    "tiered": {"host_capacity_gib": (int, float), "ssd_capacity_gib": (int, float), "chunk_tokens": (int,),
               "policy": (str,), "sink_tokens": (int,), "window_tokens": (int,),
               "device_residency": (bool,)},
    "sequence_parallel": {"degree": (int,)},
    "compression": {"mode": (str,)},
    "prefix_cache": {"enabled": (bool,), "block_tokens": (int,), "routing": (str,), "affinity_slack": (int,)},
}


def _task_numbers(table: dict[str, Any], source: str | None, where: str) -> tuple[tuple[str, float], ...]:
    """An inline table of task -> number (``{dialogue = 0.71}``) as (task, value) pairs, in table order."""
    for task, value in table.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise InputError(source, f"{where}.{task}", f"must be a number in [0, 1], got {type(value).__name__} "
                                                        f"{value!r}")
    return tuple((task, float(value)) for task, value in table.items())


def strategy_from_dict(raw: object, source: str | None = None) -> StrategySpec:
    """Build a StrategySpec from the scenario's ``strategy`` table (None or {} is the baseline)."""
    if raw is None:
        return StrategySpec()
    if not isinstance(raw, dict):
        raise InputError(source, "strategy", f"must be a table, got {type(raw).__name__}")
    specs: dict[str, Any] = {}
    for name, table in raw.items():
        where = f"strategy.{name}"
        if name not in STRATEGY_TABLES:
            raise InputError(source, where, f"unknown strategy; valid: {', '.join(STRATEGY_TABLES)}")
        if not isinstance(table, dict):
            raise InputError(source, where, f"must be a table, got {type(table).__name__}")
        kwargs: dict[str, Any] = {}
        for key, value in table.items():
            kinds = _TYPES[name].get(key)
            if kinds is None:
                raise InputError(source, f"{where}.{key}", f"unknown field; valid: {', '.join(_TYPES[name])}")
            # bool is an int in Python: only a field that wants a bool may take one
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise InputError(source, f"{where}.{key}", f"must be {' or '.join(k.__name__ for k in kinds)}, "
                                                           f"got {type(value).__name__} {value!r}")
            kwargs[key] = (float(value) if float in kinds else
                           _task_numbers(value, source, f"{where}.{key}") if dict in kinds else value)
        try:
            specs[name] = STRATEGY_TABLES[name](**kwargs)
        except InputError as exc:
            raise InputError(source, f"{where}.{exc.field}", exc.problem) from None
    if "prefix_cache" in specs and not specs["prefix_cache"].enabled:
        del specs["prefix_cache"]  # off: the baseline's runs, byte for byte
    return StrategySpec(**specs)


def strategy_to_dict(spec: StrategySpec) -> dict[str, dict[str, Any]]:
    """The TOML-shaped table (fields left at None omitted): strategy_from_dict's inverse."""
    out: dict[str, dict[str, Any]] = {}
    for name in STRATEGY_TABLES:
        table = getattr(spec, name)
        if table is not None:
            out[name] = {k: dict(v) if k == "acceptance" else v for k, v in vars(table).items()
                         if v is not None and not (k == "acceptance" and not v)}
    return out


def check_against_profile(spec: StrategySpec, profile: Profile, tasks: tuple[str, ...], source: str | None) -> None:
    """What the profile must carry for the paths switched on; InputError names field and profile."""
    name = f"profile {profile.key_str()}"

    def fail(field: str, problem: str) -> None:
        raise InputError(source, f"strategy.{field}", f"{problem} ({name})")

    if spec.speculative is not None:
        if profile.speculative is None:
            fail("speculative", "the profile has no speculative section (draft cost ratio c, verify cost v)")
        lookup = spec.speculative.proposer == "prompt_lookup"
        for task in tasks:
            key = PROMPT_LOOKUP_PREFIX + task if lookup else task
            if key not in profile.acceptance:
                fail("speculative.proposer" if lookup else "speculative",
                     f"no acceptance for task {task!r} (profile acceptance.{key!r})")
    if spec.compression is not None and spec.compression.mode not in profile.compression:
        known = ", ".join(profile.compression) or "none"
        fail("compression.mode", f"mode {spec.compression.mode!r} not measured; the profile has: {known}")
    if spec.tiered is not None:
        if DEVICE_HOST not in profile.paging:
            fail("tiered", f"the profile has no paging.{DEVICE_HOST} link")
        ssd = spec.tiered.ssd_capacity_gib
        ssd_bytes = profile.hardware.ssd_bytes if ssd is None else ssd * GIB
        if ssd_bytes > 0 and HOST_SSD not in profile.paging:
            fail("tiered.ssd_capacity_gib", f"an SSD tier needs the profile's paging.{HOST_SSD} link "
                                            "(set ssd_capacity_gib = 0 to tier to host memory only)")
    if spec.sequence_parallel is not None:
        degree = spec.sequence_parallel.degree
        sp = profile.sequence_parallel.get(degree)
        if sp is None or not sp.rows:
            have = ", ".join(str(p) for p in profile.sequence_parallel) or "none"
            fail("sequence_parallel.degree", f"no speedup rows for degree {degree}; the profile has degrees: {have}")
