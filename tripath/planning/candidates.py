"""The candidate paths as scenario-dict transforms: baseline, each path, the sensible combinations.

A candidate sets the scenario's ``[strategy.*]`` tables (tripath/simulator/scenario/strategy.py) and knows how
many GPUs one replica of it occupies (tp x sequence-parallel degree). ``applicability`` says why a
profile or cluster cannot support it ("no acceptance for task 'math'", ...), so an analysis can
report "not applicable: <why>" instead of silently dropping the candidate.

Combinations are the seed's (SEEDS.md section 4): speculative + tiered combine well; speculative
+ compression and tiered + compression are the stacking document's pairs; sequence parallel +
tiered is included but flagged: the seed does not recommend it (paging traffic across GPUs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tripath.planning.scenario_dict import with_fields
from tripath.profile.profile import Profile
from tripath.simulator.scenario.traces import load_trace

SP_DEGREE = 2
PATH_ORDER = ("speculative", "tiered", "sequence_parallel", "compression", "prefix_cache")
NO_PREFIX_STRUCTURE = "workload has no prefix structure"


@dataclass(frozen=True)
class Candidate:
    """One optimization path or combination: its strategy tables and what it needs."""

    name: str
    strategy: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("candidate name must be non-empty")
        unknown = set(self.strategy) - set(PATH_ORDER)
        if unknown:
            raise ValueError(f"candidate {self.name!r}: unknown strategy tables {sorted(unknown)}")

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(p for p in PATH_ORDER if p in self.strategy)

    def gpus_per_replica(self, profile: Profile) -> int:
        degree = int(self.strategy.get("sequence_parallel", {}).get("degree", 1))
        return int(profile.key.gpus) * degree

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        """The scenario dict with this candidate's strategy tables (replacing any the scenario had). The user's
        own acceptance (``[strategy.speculative] acceptance``) is workload knowledge, not a path setting, so a
        speculative candidate keeps it."""
        strategy = {name: dict(table) for name, table in self.strategy.items()}
        own = (data.get("strategy") or {}).get("speculative", {}).get("acceptance")
        if own is not None and "speculative" in strategy:
            strategy["speculative"]["acceptance"] = dict(own)
        return with_fields(data, {"strategy": strategy or None})

    def applicability(self, profile: Profile, data: dict[str, Any]) -> str | None:
        """None when the profile and cluster support this candidate, else why not."""
        reasons = self._profile_gaps(profile, data)
        gpus = int(data.get("cluster", {}).get("gpus", 1))
        need = self.gpus_per_replica(profile)
        if need > gpus:
            reasons.append(f"needs {need} GPUs per replica, the cluster has {gpus}")
        return "; ".join(reasons) or None

    def profile_support(self, profile: Profile, data: dict[str, Any]) -> str | None:
        """None when the profile supports this candidate on the scenario's tasks and workload (prefix caching
        needs block identity), whatever the cluster's size."""
        return "; ".join(self._profile_gaps(profile, data)) or None

    def _profile_gaps(self, profile: Profile, data: dict[str, Any]) -> list[str]:
        tasks = list(data.get("workload", {}).get("tasks") or {"default": 1.0})
        reasons = prefix_gaps(data) if "prefix_cache" in self.strategy else []
        spec = self.strategy.get("speculative")
        if spec is not None:
            if profile.speculative is None:
                reasons.append("the profile has no speculative section (draft cost ratio, verify cost)")
            prefix = "prompt_lookup:" if spec.get("proposer") == "prompt_lookup" else ""
            missing = [t for t in tasks if prefix + t not in profile.acceptance]
            if missing:
                reasons.append(f"no acceptance for task {', '.join(repr(t) for t in missing)} in the profile")
        if "tiered" in self.strategy and "device_host" not in profile.paging:
            reasons.append("the profile has no paging.device_host link")
        sp = self.strategy.get("sequence_parallel")
        if sp is not None:
            degree = int(sp.get("degree", SP_DEGREE))
            rows = profile.sequence_parallel.get(degree)
            if rows is None or not rows.rows:
                reasons.append(
                    "a mixture-of-experts profile has no sequence-parallel section (the ring model's even split of "
                    "each layer's work does not hold for expert GEMMs: the profile's notes)"
                    if not profile.sequence_parallel and profile.model.moe is not None
                    else f"the profile has no sequence-parallel rows for degree {degree}")
        comp = self.strategy.get("compression")
        if comp is not None and comp.get("mode") not in profile.compression:
            have = ", ".join(profile.compression) or "none"
            reasons.append(f"compression mode {comp.get('mode')!r} not in the profile (it has: {have})")
        return reasons

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "paths": list(self.paths), "strategy": self.strategy, "note": self.note}


def prefix_gaps(data: dict[str, Any]) -> list[str]:
    """Why prefix caching cannot pay on this scenario dict: no block identity to reuse, or a loop it does not
    run in (empty when it applies). Block identity comes from a ``[workload.prefix]`` table or a replayed trace
    that carries hash_ids (Mooncake); bootstrapped lengths (kind "empirical") carry none."""
    workload = data.get("workload", {})
    reasons = []
    if not workload.get("prefix"):
        arrival = workload.get("arrival", {})
        trace = arrival.get("trace") if arrival.get("kind") == "trace" else None
        if trace is None or load_trace(str(trace)).hash_ids is None:
            reasons.append(NO_PREFIX_STRUCTURE)
    preemption = data.get("batching", {}).get("preemption", "none")
    if preemption != "none":
        reasons.append(f"prefix caching runs with preemption 'none' only, the scenario has {preemption!r}")
    return reasons


BASELINE = Candidate("baseline", {}, "no optimization path")
# paths that change the model's output (the profile's quality_loss): rankings put them after lossless candidates
# on as many GPUs, since an SLA margin does not weigh answer quality
LOSSY_PATHS = frozenset({"compression"})


def is_lossy(paths: Sequence[str]) -> bool:
    """Whether a candidate with these paths changes the model's output."""
    return bool(LOSSY_PATHS.intersection(paths))


@dataclass(frozen=True)
class Sizing:
    """A cell's cluster sized to the profile: the scenario's GPUs could not hold one replica of the baseline."""

    scenario_gpus: int
    gpus: int
    tp: int
    largest: Candidate | None  # the candidate whose replica sets ``gpus``; None: scaled by TP (matrix_sizing)
    ranks: int = 1  # the profile's attention data-parallel ranks (key.attention_dp)

    def note(self) -> str:
        shape = f"TP{self.tp}" + (f" x DP{self.ranks}" if self.ranks > 1 else "")
        if self.largest is None:
            return (f"sized to {self.gpus} GPUs: the seed's rows count GPUs that each hold one model replica, so on "
                    f"the profile's {shape} the row's {_gpus(self.scenario_gpus)} is {self.gpus} GPUs "
                    f"({self.scenario_gpus} x {shape}); every candidate runs on them")
        degree = self.gpus // (self.tp * self.ranks)
        replica = shape + (f" x SP{degree}" if degree > 1 else "")
        return (f"sized to {self.gpus} GPUs: the scenario's {_gpus(self.scenario_gpus)} cannot hold one replica "
                f"of the profile's {shape}; {self.gpus} GPUs hold one replica of every candidate the profile "
                f"supports (the largest: {self.largest.name}, {replica}), so every candidate runs on the same "
                f"{self.gpus} GPUs")

    def to_dict(self) -> dict[str, Any]:
        return {"scenario_gpus": self.scenario_gpus, "gpus": self.gpus,
                "largest": None if self.largest is None else self.largest.name, "note": self.note()}


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def size_to_profile(profile: Profile, data: dict[str, Any], every: Sequence[Candidate]) -> Sizing | None:
    """The cluster a cell runs on when the scenario's GPUs cannot hold one replica of the baseline (fewer than
    the profile's tp): the smallest that holds one replica of every candidate the profile supports (the largest
    tp x SP degree), so the cell's candidates compare on equal hardware. None when the scenario's GPUs hold the
    baseline: they are kept (a candidate needing more is then not applicable)."""
    gpus = int(data.get("cluster", {}).get("gpus", 1))
    tp = int(profile.key.tp)
    if gpus >= BASELINE.gpus_per_replica(profile):
        return None
    supported = [c for c in every if c.profile_support(profile, data) is None] or [BASELINE]
    largest = max(supported, key=lambda c: c.gpus_per_replica(profile))
    return Sizing(gpus, largest.gpus_per_replica(profile), tp, largest, int(profile.key.attention_dp))


def matrix_sizing(profile: Profile, data: dict[str, Any]) -> Sizing | None:
    """A seed-matrix row's cluster on a TP profile: the row's GPUs x one replica's GPUs (tp x attention
    data-parallel ranks). The seed places a 70B model on one GPU, so its rows' GPU counts are model replicas; on a
    TP-k profile each is k GPUs (so the 2-GPU row holds one SP degree-2 replica, as it does on the seed). None on a
    one-GPU profile (the row's GPUs as they are)."""
    per_replica = int(profile.key.gpus)
    if per_replica == 1:
        return None
    gpus = int(data.get("cluster", {}).get("gpus", 1))
    return Sizing(gpus, gpus * per_replica, int(profile.key.tp), None, int(profile.key.attention_dp))


def candidates(profile: Profile) -> list[Candidate]:
    """Every candidate for this profile, in a fixed order; compression once per measured mode
    (or once, as "compression", when the profile has none, so it is reported as not applicable); sequence
    parallelism at degree 2 ("sequence_parallel", alone and with tiering) and at every other degree the profile has
    rows for ("sequence_parallel:4", ...)."""
    modes = sorted(profile.compression) or [None]

    def comp(mode: str | None) -> tuple[str, dict[str, Any]]:
        return (f"compression:{mode}" if mode else "compression"), {"mode": mode or "int8"}

    spec: dict[str, Any] = {}
    tiered: dict[str, Any] = {}
    sp = {"degree": SP_DEGREE}
    out = [BASELINE, Candidate("speculative", {"speculative": spec}),
           Candidate("tiered", {"tiered": tiered}),
           Candidate("sequence_parallel", {"sequence_parallel": sp})]
    out += [Candidate(f"sequence_parallel:{d}", {"sequence_parallel": {"degree": d}})  # every other degree built
            for d in sorted(profile.sequence_parallel) if d != SP_DEGREE]
    for mode in modes:
        name, table = comp(mode)
        out.append(Candidate(name, {"compression": table}))
    out.append(Candidate("speculative+tiered", {"speculative": spec, "tiered": tiered},
                         "the seed: speculative and tiered combine well"))
    for mode in modes:
        name, table = comp(mode)
        out.append(Candidate(f"speculative+{name}", {"speculative": spec, "compression": table},
                             "the stacking seed: compression lowers acceptance (negative coupling)"))
    for mode in modes:
        name, table = comp(mode)
        out.append(Candidate(f"tiered+{name}", {"tiered": tiered, "compression": table}))
    out.append(Candidate("sequence_parallel+tiered", {"sequence_parallel": sp, "tiered": tiered},
                         "not recommended by the seed: paging traffic costs more across GPUs"))
    prefix: dict[str, Any] = {}
    out.append(Candidate("prefix_cache", {"prefix_cache": prefix},
                         "reuses the KV of prompt prefixes other requests computed (workloads with reuse only)"))
    out.append(Candidate("prefix_cache+tiered", {"prefix_cache": prefix, "tiered": tiered},
                         "evicted prefixes kept in host memory and on SSD, loaded back on a hit"))
    out.append(Candidate("speculative+prefix_cache", {"speculative": spec, "prefix_cache": prefix},
                         "hits cut prefill, speculation cuts decode (the draft still prefills whole prompts)"))
    out.append(Candidate("sequence_parallel+prefix_cache", {"sequence_parallel": sp, "prefix_cache": prefix},
                         "hits shorten the prefills sequence parallelism splits"))
    return out


def by_names(profile: Profile, names: list[str] | None) -> list[Candidate]:
    """The named candidates (all when ``names`` is None); unknown names are a ValueError listing the known."""
    every = candidates(profile)
    if not names:
        return every
    known = {c.name: c for c in every}
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"unknown candidate(s) {', '.join(missing)}; known: {', '.join(known)}")
    return [known[n] for n in names]


def tiering_idle(candidate: Candidate, outcome: dict[str, Any] | None, max_batch_size: int | None) -> str | None:
    """Why a tiered candidate's numbers (a sweep outcome's dict) equal those of the same candidate without
    tiering, when they do: it paged nothing, the largest live KV fitting the device's KV budget (else None)."""
    if "tiered" not in candidate.paths or outcome is None or outcome.get("error"):
        return None
    paging, peak = outcome.get("paging_ms_per_request"), outcome.get("peak_kv_bytes")
    budget = outcome.get("kv_capacity_bytes")
    if paging is None or paging > 0.0 or peak is None or budget is None or peak > budget:
        return None
    batch = "" if max_batch_size is None else f" (max_batch_size {max_batch_size})"
    return (f"tiered never engaged: the peak live KV, {peak / 2**30:.1f} GiB{batch}, fits the device's KV budget "
            f"of {budget / 2**30:.1f} GiB, so nothing was paged and the numbers are those without tiering")


def idle_paths(candidate: Candidate, outcome: dict[str, Any] | None, max_batch_size: int | None) -> str | None:
    """Why a candidate's path never engaged in a sweep outcome, when one did not: tiering that paged nothing
    (``tiering_idle``), speculation with no draft token accepted, prefix caching with no hit. Such a candidate is
    the baseline by another name (a recommendation never puts it above the baseline). Compression and sequence
    parallelism act on every step: always engaged."""
    if outcome is None or outcome.get("error"):
        return None
    reasons = []
    tiered = tiering_idle(candidate, outcome, max_batch_size)
    if tiered is not None:
        reasons.append(tiered)
    if "speculative" in candidate.paths and not (outcome.get("accepted_tokens_per_request") or 0.0) > 0.0:
        reasons.append("speculation never engaged: no draft token was accepted")
    if "prefix_cache" in candidate.paths and not ((outcome.get("prefix_cache") or {}).get("hit_rate_tokens")
                                                   or 0.0) > 0.0:
        reasons.append("prefix caching never engaged: no prompt token was found cached")
    return "; ".join(reasons) or None
