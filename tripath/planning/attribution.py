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
- *gain within noise*: the margin is higher with X, but the 95% Student-t interval of the
  paired per-replication margin differences (both runs use the same seeds, so replication r of
  each saw the same arrivals and lengths) reaches 0. One replication has no interval, and any
  positive difference counts as a gain.

The primary path is the paths that earn a gain (``baseline`` when none does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tripath.core.metrics import estimate
from tripath.planning.sweep import MAX_REJECTED

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


def paired_gain(mine: dict[str, Any], theirs: dict[str, Any], sla_ms: dict[str, float | None] | None
                ) -> dict[str, float | None] | None:
    """Mean and 95% interval of the per-replication margin difference (None without >= 2 pairs)."""
    targets = {t: v for t, v in (sla_ms or {}).items() if v}
    a, b = mine.get("p99_ms_by_replication"), theirs.get("p99_ms_by_replication")
    if not targets or not a or not b:
        return None

    def margins(by_rep: dict[str, list[float]]) -> list[float]:
        n = min(len(by_rep[t]) for t in targets)
        values = [[by_rep[t][r] for t in targets] for r in range(n)]
        # a replication where a term has no P99 (nothing completed) gives no margin: NaN, left out below
        return [math.nan if None in row
                else min((targets[t] - v) / targets[t] for t, v in zip(targets, row, strict=True))
                for row in values]

    diffs = [x - y for x, y in zip(margins(a), margins(b), strict=False) if math.isfinite(x - y)]
    if len(diffs) < 2:
        return None
    return estimate(diffs, low=None)  # a margin difference may be negative


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
        paired = paired_gain(data, o, sla_ms)
        low = None if paired is None else paired["ci_low"]
        role = NO_GAIN if gain <= 0.0 else (WITHIN_NOISE if low is not None and low <= 0.0 else GAIN)
        interval = "" if paired is None or low is None else \
            f", paired 95% interval [{low * 100:+.1f}, {paired['ci_high'] * 100:+.1f}]"
        roles.append(PathRole(path, role, name, f"SLA margin {theirs:+.0%} without it, {mine:+.0%} with it "
                                                f"({gain * 100:+.1f} points{interval})"))
    return Attribution(chosen.candidate.name, tuple(roles))


def _reasons(outcome: dict[str, Any]) -> str:
    reasons = outcome.get("reject_reasons") or {}
    if isinstance(reasons, dict) and reasons:
        return "; ".join(f"{k}" for k in reasons)
    return "rejected at admission"
