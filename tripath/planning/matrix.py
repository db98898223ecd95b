"""The decision matrix: per scenario cell, every candidate simulated, the cheapest meeting the SLA.

Cells are the seed's Section 4 rows (SEEDS.md), one shipped scenario file each. Every candidate
of a cell sees the same arrivals: the cell's ``load_fraction`` is turned into a rate once, from
the baseline's saturation estimate, and that rate is given to every candidate (otherwise a path
that raises the estimate would be tested at a higher load than the baseline).

Ranking, among the candidates that meet the SLA (tripath/planning/sweep.py: every P99 term at or under
target, at most 1% rejected): fewest GPUs (the cost; GPU-hours per 1,000 requests are the
same at equal GPUs and equal load), then the largest SLA margin (min over terms of
(target - P99) / target). Each cell also reports the best single path (baseline or one path)
and, when none meets the SLA, the closest feasible single path, for readers who compare single
paths; the seed comparison itself uses the split below.

Feasibility vs choice (docs/planning.md): the cell's *chosen* candidate is the recommended one,
or, when none meets the SLA, the closest feasible candidate of any kind. Its paths are split by
tripath/planning/attribution.py into the primary path (the paths that earn the gain) and the paths
needed for memory. The seed's rows 1, 2 and 4 are claims about a gain (which path makes a fitting
request faster); rows 3 and 5 are claims about memory ("90% GPU memory saved", "the only feasible
option"). Each seed row is compared with the part of the answer that addresses its claim: gain
rows with the primary path, memory rows with the paths needed for memory; both are shown, and
where the seed contradicts itself on the point, the "why" notes say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tripath.core.metrics import sla_targets
from tripath.planning.attribution import Attribution, attribute
from tripath.planning.cache import ResultCache
from tripath.planning.candidates import (
    BASELINE,
    Candidate,
    Sizing,
    candidates,
    is_lossy,
    matrix_sizing,
    tiering_idle,
)
from tripath.planning.executor import Executor
from tripath.planning.scenario_dict import build, load_scenario_dict, with_fields, with_rate, with_requests
from tripath.planning.seed_notes import NEEDS_TIERED, SEED_CLAIM, SEED_NOTES
from tripath.planning.seed_sla import tpot_target_note
from tripath.planning.sweep import MAX_REJECTED, Outcome, make_job, run_sweep
from tripath.profile.profile import Profile
from tripath.simulator.runner import arrival_rate, cluster_config

# SEEDS.md Section 4: (cell scenario, what the seed recommends)
SEED_MATRIX: tuple[tuple[str, str], ...] = (
    ("dialogue-medium", "speculative"),
    ("math-medium", "baseline"),
    ("summarization-very-long", "tiered"),
    ("fixed-length-multi-gpu", "sequence_parallel"),
    ("very-long-single-gpu", "tiered"),
)


def rank_key(candidate: Candidate, outcome: Outcome) -> tuple[int, bool, float, str]:
    """Fewest GPUs first; then lossless before lossy (KV compression costs answer quality, which an SLA margin
    does not weigh: a lossy candidate wins only where no lossless one on as few GPUs meets the SLA); then the
    larger SLA margin."""
    return (outcome.gpus, is_lossy(candidate.paths), -(outcome.data.get("sla_margin") or 0.0), candidate.name)


def cell_rate(data: dict[str, Any], source: str | None, profile: Profile) -> float | None:
    """The baseline's arrival rate for this cell (None for a trace replay, whose timestamps are the load)."""
    scenario = build(BASELINE.apply(data), source)
    config, _ = cluster_config(scenario, profile)
    rate, _, _ = arrival_rate(scenario, profile, config)
    return rate


@dataclass(frozen=True)
class CandidateResult:
    candidate: Candidate
    not_applicable: str | None
    outcome: Outcome | None
    remark: str | None = None  # what a reader needs to read the numbers (tiering_idle)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"candidate": self.candidate.name, "paths": list(self.candidate.paths),
                               "note": self.candidate.note}
        if self.not_applicable is not None:
            out["not_applicable"] = self.not_applicable
        elif self.outcome is not None:
            o = self.outcome.data
            keys = ("meets_sla", "gpus", "replicas", "p99_ms", "sla_margin", "counts", "rejected_share",
                    "gpu_hours_per_1k", "peak_kv_bytes", "kv_capacity_bytes", "reject_reasons")
            out.update({k: o.get(k) for k in keys})
        if self.remark is not None:
            out["remark"] = self.remark
        return out


@dataclass(frozen=True)
class Cell:
    scenario: str
    sla_ms: dict[str, float | None]
    gpus: int
    rate_per_s: float | None
    results: tuple[CandidateResult, ...]
    seed_recommends: str | None = None
    sizing: Sizing | None = None  # set when the scenario's GPUs could not hold one replica of the profile

    def ranked(self, single_only: bool = False) -> list[CandidateResult]:
        ok = [r for r in self.results if r.outcome is not None and r.outcome.meets_sla
              and (not single_only or len(r.candidate.paths) <= 1)]
        return sorted(ok, key=lambda r: rank_key(r.candidate, r.outcome))

    @property
    def recommended(self) -> str | None:
        ranked = self.ranked()
        return ranked[0].candidate.name if ranked else None

    @property
    def runner_up(self) -> str | None:
        ranked = self.ranked()
        return ranked[1].candidate.name if len(ranked) > 1 else None

    @property
    def best_single_path(self) -> str | None:
        ranked = self.ranked(single_only=True)
        return ranked[0].candidate.name if ranked else None

    @property
    def closest_single_path(self) -> str | None:
        """When no single path meets the SLA: the feasible one (<= 1% rejected) with the largest margin."""
        feasible = [r for r in self.results if r.outcome is not None and len(r.candidate.paths) <= 1
                    and r.outcome.data["rejected_share"] <= MAX_REJECTED
                    and r.outcome.data.get("sla_margin") is not None]
        return min(feasible, key=lambda r: rank_key(r.candidate, r.outcome)).candidate.name if feasible else None

    @property
    def chosen(self) -> CandidateResult | None:
        """The recommended candidate, else the closest feasible one of any kind (<= 1% rejected)."""
        ranked = self.ranked()
        if ranked:
            return ranked[0]
        feasible = [r for r in self.results if r.outcome is not None
                    and r.outcome.data["rejected_share"] <= MAX_REJECTED
                    and r.outcome.data.get("sla_margin") is not None]
        return min(feasible, key=lambda r: rank_key(r.candidate, r.outcome)) if feasible else None

    @property
    def attribution(self) -> Attribution | None:
        chosen = self.chosen
        return None if chosen is None else attribute(chosen, self.results, self.sla_ms)

    @property
    def seed_claim(self) -> str:
        return SEED_CLAIM.get(self.scenario, "gain")

    @property
    def compared_path(self) -> str | None:
        """The part of the answer the seed's row is compared with: the primary path for a gain claim,
        the paths needed for memory for a memory claim ("baseline" when there are none)."""
        attribution = self.attribution
        if attribution is None:
            return None
        if self.seed_claim == "memory":
            return "+".join(attribution.memory_paths) or "baseline"
        return attribution.primary_path

    @property
    def seed_agrees(self) -> bool | None:
        return None if self.seed_recommends is None else self.compared_path == self.seed_recommends

    @property
    def seed_match(self) -> str | None:
        """"agrees"; "same path, other reason" (the seed's path is in the answer, for the other claim:
        e.g. SP needed for memory where the seed claims its speed-up; not counted as agreement); "differs"."""
        if self.seed_agrees is None:
            return None
        if self.seed_agrees:
            return "agrees"
        attribution = self.attribution
        other = () if attribution is None else (attribution.memory_paths if self.seed_claim == "gain"
                                                else attribution.paths_with("earns a gain"))
        return "same path, other reason" if self.seed_recommends in other else "differs"

    def why(self) -> list[str]:
        """The notes of the output's "why" column: SLA state, each path's role, seed contradictions."""
        chosen, attribution = self.chosen, self.attribution
        if chosen is None or attribution is None:
            return ["no candidate admits at least 99% of the requests"]
        notes = [] if chosen.outcome is not None and chosen.outcome.meets_sla else [
            f"no candidate meets the SLA; {chosen.candidate.name} is the closest feasible one "
            f"(margin {chosen.outcome.data.get('sla_margin'):+.0%})"]
        notes += [f"{r.path}: {r.role} ({r.detail})" for r in attribution.roles]
        tpot = (chosen.outcome.data["p99_ms"].get("tpot") or {}).get("mean")
        target = self.sla_ms.get("tpot")
        if tpot is not None and target is not None and tpot > target and tpot_target_note(self.scenario):
            notes.append(str(tpot_target_note(self.scenario)))  # the seed's own tables disagree on this target
        kinds = {"memory": set(attribution.memory_paths), "gain": set(attribution.paths_with("earns a gain"))}
        paged = "tiered" in chosen.candidate.paths
        notes += [text for (row, role, path), text in SEED_NOTES.items()
                  if row == self.scenario and path in kinds[role] and (paged or (row, role, path) not in NEEDS_TIERED)]
        return notes

    def why_not_seed(self) -> str | None:
        """When the compared part of the answer is not the seed's: what happened to the seed's choice."""
        if self.seed_agrees in (None, True):
            return None
        mine = next((r for r in self.results if r.candidate.name == self.seed_recommends), None)
        if mine is None:
            return f"the seed's choice {self.seed_recommends!r} is not a candidate here"
        if mine.not_applicable is not None:
            return f"{self.seed_recommends}: not applicable: {mine.not_applicable}"
        assert mine.outcome is not None
        o = mine.outcome.data
        if o.get("error"):
            return f"{self.seed_recommends}: the simulator refused it: {o['error']}"
        p99 = {t: (v or {}).get("mean") for t, v in o["p99_ms"].items()}
        state = "meets the SLA" if mine.outcome.meets_sla else "misses the SLA"
        margin = o.get("sla_margin")
        part = "primary path" if self.seed_claim == "gain" else "paths needed for memory"
        return (f"{self.seed_recommends} {state} (P99 ms {_fmt(p99) or '-'}, targets {_fmt(self.sla_ms)}, "
                f"rejected {o['rejected_share']:.0%}, margin {'-' if margin is None else f'{margin:+.0%}'}); "
                f"here the {part} of {self.chosen.candidate.name if self.chosen else '-'} is {self.compared_path}")

    def to_dict(self) -> dict[str, Any]:
        sized = {} if self.sizing is None else {"sized": self.sizing.to_dict()}
        return {"scenario": self.scenario, "sla_ms": self.sla_ms, "gpus": self.gpus, "rate_per_s": self.rate_per_s,
                **sized,
                "recommended": self.recommended, "runner_up": self.runner_up,
                "best_single_path": self.best_single_path, "closest_single_path": self.closest_single_path,
                "chosen": None if self.chosen is None else self.chosen.candidate.name,
                "chosen_meets_sla": bool(self.chosen is not None and self.chosen.outcome.meets_sla),
                "attribution": None if self.attribution is None else self.attribution.to_dict(),
                "seed_recommends": self.seed_recommends, "seed_claim": self.seed_claim,
                "seed_compared_with": self.compared_path,
                "seed_agrees": self.seed_agrees, "seed_match": self.seed_match,
                "why_not_seed": self.why_not_seed(), "why": self.why(),
                "candidates": [r.to_dict() for r in self.results]}


def _fmt(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in values.items() if v is not None)


@dataclass(frozen=True)
class Matrix:
    profile_key: str
    profile_source: str
    seed: int
    replications: int
    cells: tuple[Cell, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"profile": {"key": self.profile_key, "source": self.profile_source},
                "numbers_from": f"simulated on a '{self.profile_source}' profile ({self.profile_key}); "
                                f"seed {self.seed}, {self.replications} replication(s)",
                "cells": [c.to_dict() for c in self.cells]}


def decision_matrix(profile: Profile, cells: Sequence[tuple[str, str | None]] = SEED_MATRIX, seed: int = 0,
                    replications: int = 1, executor: Executor | None = None,
                    cache: ResultCache | None = None, requests: int | None = None) -> Matrix:
    """Simulate every applicable candidate in every cell (one sweep), rank, and compare with the seed.

    ``cells``: (scenario name or path, the seed's recommendation or None). ``requests`` overrides
    each cell's request count (smaller for quick looks; the CI widens). On a TP profile a row's GPUs are
    scaled by the TP (candidates.matrix_sizing), and the cell says so."""
    plans = []
    jobs = []
    every = candidates(profile)
    for name, seed_choice in cells:
        data, source = load_scenario_dict(name)
        if requests is not None:
            data = with_requests(data, requests)
        sizing = matrix_sizing(profile, data)
        if sizing is not None:
            data = with_fields(data, {"cluster.gpus": sizing.gpus})
        rate = cell_rate(data, source, profile)
        if rate is not None:
            data = with_rate(data, rate)
        rows = []
        for candidate in every:
            reason = candidate.applicability(profile, data)
            index = None
            if reason is None:
                index = len(jobs)
                jobs.append(make_job(candidate.apply(data), source, profile, seed, replications))
            rows.append((candidate, reason, index))
        plans.append((data, seed_choice, rate, rows, sizing))
    outcomes = run_sweep(jobs, executor, cache, desc="decision matrix")
    cells_out = []
    for data, seed_choice, rate, rows, sizing in plans:
        batch = data.get("batching", {}).get("max_batch_size")
        results = []
        for c, reason, i in rows:
            outcome = None if i is None or outcomes[i].error else outcomes[i]
            results.append(CandidateResult(c, reason if reason is not None else outcomes[i].error, outcome,
                                           tiering_idle(c, None if outcome is None else outcome.data, batch)))
        sla = sla_targets(data.get("sla"))
        cells_out.append(Cell(data.get("name", "?"), sla, int(data.get("cluster", {}).get("gpus", 1)), rate,
                              tuple(results), seed_choice, sizing))
    return Matrix(profile.key_str(), profile.source, seed, replications, tuple(cells_out))
