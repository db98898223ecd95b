"""Which path of a combination earns the gain, and which is there only so the requests fit.

A candidate such as speculative+tiered can win a cell for two different reasons: speculation
makes it faster, and tiering lets requests larger than the KV budget be admitted at all. The
seed's matrix rows answer the first question ("speculative: -25% latency") on the premise that
memory is no object, so comparing the seed with a combination needs the two told apart.

Each path X of the chosen candidate C is judged by the candidate without it (the same strategy
tables less X; the baseline when X was alone), simulated in the same sweep on the same arrivals:

- *needed for memory*: without X more than MAX_REJECTED of the requests are rejected (they do
  not fit the KV budget), so X is there for feasibility, whatever it does to latency;
- *earns a gain*: without X every request still fits and C's SLA margin (min over terms of
  (target - P99) / target) is larger with X than without; the gain is that difference;
- *no gain*: without X every request fits and the margin is no worse (X is dead weight here);
- *gain within noise*: the margin is higher with X, but by no more than the two runs' 95%
  intervals allow (each run's margin noise: the largest CI half-width over the SLA terms, as a
  fraction of the target; 0 with one replication, which has no interval).

The primary path is the paths that earn a gain (``baseline`` when none does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planning.sweep import MAX_REJECTED

MEMORY, GAIN, NO_GAIN, UNKNOWN = "needed for memory", "earns a gain", "no gain", "not compared"
WITHIN_NOISE = "gain within noise"
ROLES = (MEMORY, GAIN, NO_GAIN, WITHIN_NOISE, UNKNOWN)


@dataclass(frozen=True)
class PathRole:
    """One path of the chosen candidate, judged against the candidate without it."""

    path: str
    role: str
    without: str | None  # the candidate it was compared with
    detail: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "role": self.role, "without": self.without, "detail": self.detail}


@dataclass(frozen=True)
class Attribution:
    candidate: str
    roles: tuple[PathRole, ...]

    def paths_with(self, role: str) -> tuple[str, ...]:
        return tuple(r.path for r in self.roles if r.role == role)

    @property
    def primary_path(self) -> str:
        return "+".join(self.paths_with(GAIN)) or "baseline"

    @property
    def memory_paths(self) -> tuple[str, ...]:
        return self.paths_with(MEMORY)

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "primary_path": self.primary_path,
                "needed_for_memory": list(self.memory_paths), "paths": [r.to_dict() for r in self.roles]}


def margin_noise(outcome: dict[str, Any], sla_ms: dict[str, float | None] | None) -> float:
    """The largest 95% half-width of a P99 term as a fraction of its target (0 without intervals)."""
    noise = 0.0
    for term, target in (sla_ms or {}).items():
        p = (outcome.get("p99_ms") or {}).get(term) or {}
        if target and p.get("ci_high") is not None and p.get("mean") is not None:
            noise = max(noise, (p["ci_high"] - p["mean"]) / target)
    return noise


def attribute(chosen: Any, results: Sequence[Any], sla_ms: dict[str, float | None] | None = None) -> Attribution:
    """Judge each path of ``chosen`` (a matrix CandidateResult) against ``results`` of the same cell;
    ``sla_ms`` (term -> target) lets a gain inside the runs' intervals be told apart."""
    strategy = chosen.candidate.strategy
    data = chosen.outcome.data
    roles = []
    for path in chosen.candidate.paths:
        rest = {k: v for k, v in strategy.items() if k != path}
        other = next((r for r in results if r.candidate.strategy == rest), None)
        if other is None or other.outcome is None:
            why = "not simulated" if other is None else f"not applicable: {other.not_applicable}"
            roles.append(PathRole(path, UNKNOWN, None if other is None else other.candidate.name, why))
            continue
        name = other.candidate.name
        o = other.outcome.data
        if o["rejected_share"] > MAX_REJECTED:
            roles.append(PathRole(path, MEMORY, name, f"{name} alone rejects {o['rejected_share']:.0%} "
                                                      f"of requests ({_reasons(o)})"))
            continue
        mine, theirs = data.get("sla_margin"), o.get("sla_margin")
        if mine is None or theirs is None:
            roles.append(PathRole(path, UNKNOWN, name, "no SLA margin to compare"))
            continue
        gain = mine - theirs
        noise = margin_noise(data, sla_ms) + margin_noise(o, sla_ms)
        role = NO_GAIN if gain <= 0.0 else (GAIN if gain > noise else WITHIN_NOISE)
        roles.append(PathRole(path, role, name, f"SLA margin {theirs:+.0%} without it, {mine:+.0%} with it "
                                                f"({gain * 100:+.1f} points"
                                                + (f", noise {noise * 100:.1f})" if noise else ")")))
    return Attribution(chosen.candidate.name, tuple(roles))


def _reasons(outcome: dict[str, Any]) -> str:
    reasons = outcome.get("reject_reasons") or {}
    if isinstance(reasons, dict) and reasons:
        return "; ".join(f"{k}" for k in reasons)
    return "rejected at admission"
