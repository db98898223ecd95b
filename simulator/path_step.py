"""PathStep: the StepModel of a replica with optimization paths on, composed over the baseline costs.

One iteration's milliseconds, from the profile's prefill and decode models (simulator/costs.py):

    decode part   fixed = decode_ms(B, 0),  attention = decode_ms(B, S) - fixed
                  compression: x its decode overhead;  SP: attention / P, + merge_ms(longest context)
                  speculation: x (K_max c + v(K_max)) for the batch's round (1 without speculation)
    prefill part  sum over chunks of prefill_ms(T, ctx) - prefill_ms(0, 0)   (its token-dependent work)
                  SP: / speedup(ctx + T), + merge_ms(ctx + T);  a draft model: x (1 + c) (it prefills too)
    base          the decode part if B > 0, else prefill_ms(0, 0) (the iteration's fixed cost)
    compute       base + prefill part
    seconds       compute + paging stall (tiered: max(0, paging - overlap x compute))

simulator/spec_physics.py, tier_physics.py, sp_physics.py and compression_physics.py hold each
path's formulas and say where their numbers come from; docs/simulator_paths.md puts them together.
With every strategy off, ``build_step_model`` returns step_model.BaselineStep, whose records are
the baseline's bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simulator.compression_physics import CompressionPhysics
from simulator.costs import IterationCost
from simulator.records import Extrapolations
from simulator.sp_physics import SpPhysics
from simulator.spec_physics import SpeculativePhysics
from simulator.step_model import BaselineStep, Decode, PrefillChunk, StepModel, StepResult
from simulator.strategy import StrategySpec, check_against_profile
from simulator.tier_physics import TierPhysics


class PathStep:
    """Speculative, tiered, sequence-parallel and compressed iterations of one replica (StepModel)."""

    def __init__(self, cost: IterationCost, profile: Any, strategy: StrategySpec, tasks: Sequence[str],
                 kv_capacity_bytes: int, rng: np.random.Generator, source: str | None = None) -> None:
        check_against_profile(strategy, profile, tuple(tasks), source)
        self.cost = cost
        self.strategy = strategy
        self.compression = None if strategy.compression is None else CompressionPhysics(
            profile, strategy.compression.mode)
        full = int(profile.model.kv_bytes_per_token)
        self.kv_bytes_per_token = full if self.compression is None else self.compression.bytes_per_token(full)
        degree = 1 if strategy.sequence_parallel is None else strategy.sequence_parallel.degree
        self.sp = None if degree == 1 else SpPhysics(profile, degree)
        # every SP rank holds 1/P of each sequence's KV in its own budget: P budgets per replica
        self.device_kv_tokens = degree * (kv_capacity_bytes // self.kv_bytes_per_token)
        self.gpus = int(profile.key.tp) * degree
        self.tiers = None if strategy.tiered is None else TierPhysics(
            strategy.tiered, profile, self.kv_bytes_per_token, self.device_kv_tokens, ranks=degree)
        self.kv_capacity_tokens = self.device_kv_tokens if self.tiers is None else self.tiers.capacity_tokens
        drop = 0.0 if self.compression is None else self.compression.acceptance_drop
        self.spec = None if strategy.speculative is None else SpeculativePhysics(
            strategy.speculative, profile, tasks, rng, drop)
        # a draft model prefills every prompt too, at c times the target's work; prompt lookup does not
        self._draft_prefill = 0.0 if self.spec is None else self.spec.c
        self._live = 0

    def step(self, prefills: Sequence[PrefillChunk], decodes: Sequence[Decode], live_tokens: int) -> StepResult:
        batch = len(decodes)
        ks = self.spec.choose(decodes) if self.spec is not None and batch else np.zeros(batch, dtype=np.int64)
        merge_ms = 0.0
        if batch:
            base_ms, merge_ms = self._decode_ms(decodes, int(ks.max()))
        else:
            base_ms = self.cost._prefill_fixed_ms
        prefill_ms, prefill_merge = self._prefill_ms(prefills)
        merge_ms += prefill_merge
        compute_s = (base_ms + prefill_ms + merge_ms) / 1000.0

        accepted = self.spec.draw(decodes, ks) if self.spec is not None else None
        emitted = np.ones(batch, dtype=np.int64) if accepted is None else accepted + 1
        if self.spec is not None:
            self.spec.observe(decodes, ks, accepted)

        stall_s, moved = 0.0, {}
        written = sum(p.new_tokens for p in prefills) + int(emitted.sum())
        if self.tiers is not None:
            read = sum(d.context for d in decodes) + sum(p.context_before for p in prefills)
            paging_s, moved = self.tiers.iteration(max(live_tokens, read), read, written)
            stall_s = self.tiers.stall_s(paging_s, compute_s)
        self._live = live_tokens + written
        rounds = None if self.spec is None else (ks > 0).astype(np.int64)
        return StepResult(compute_s + stall_s, emitted, accepted, rounds, stall_s, moved, merge_ms / 1000.0)

    def _decode_ms(self, decodes: Sequence[Decode], k_max: int) -> tuple[float, float]:
        """(decode part without merge, merge) in ms for the iteration's B sequences."""
        cost, batch = self.cost, len(decodes)
        context = sum(d.context for d in decodes)
        fixed = float(cost._decode_ms(batch, 0))
        attention = float(cost._decode_ms(batch, context)) - fixed
        cost.count_decodes(batch, context, 1)
        if self.compression is not None:
            fixed, attention = self.compression.decode_ms(fixed, attention)
        merge = 0.0
        if self.sp is not None:
            attention, merge = self.sp.decode_ms(attention, max(d.context for d in decodes))
        factor = 1.0 if self.spec is None else self.spec.round_factor(k_max)
        return factor * (fixed + attention), merge

    def _prefill_ms(self, prefills: Sequence[PrefillChunk]) -> tuple[float, float]:
        """(token-dependent prefill work, merge) in ms, counting queries outside the measured domain."""
        cost = self.cost
        work = merge = 0.0
        (tok_lo, tok_hi), (ctx_lo, ctx_hi) = cost._pre_tok, cost._pre_ctx
        for chunk in prefills:
            ms = float(cost._prefill_ms(chunk.new_tokens, chunk.context_before)) - cost._prefill_fixed_ms
            if not (tok_lo <= chunk.new_tokens <= tok_hi and ctx_lo <= chunk.context_before <= ctx_hi):
                cost.prefill_outside += 1
            if self.sp is not None:
                ms, chunk_merge = self.sp.prefill_ms(ms, chunk.context_before + chunk.new_tokens)
                merge += chunk_merge
            work += ms * (1.0 + self._draft_prefill)
        cost.prefill_queries += len(prefills)
        return work, merge

    def tier_bytes(self) -> dict[str, int]:
        if self.tiers is not None:
            return self.tiers.tier_bytes()
        return {"device": self._live * self.kv_bytes_per_token}

    def extrapolations(self) -> Extrapolations:
        return self.cost.extrapolations()

    def sp_extrapolations(self) -> tuple[int, int]:
        """(SP speedup/merge queries, of which outside the profile's measured rows or merge domain)."""
        return (0, 0) if self.sp is None else (self.sp.queries, self.sp.outside)


def build_step_model(scenario: Any, profile: Any, cost: IterationCost, rng: np.random.Generator,
                     replica_index: int = 0) -> StepModel:
    """The step model of one replica: BaselineStep when no strategy is on, else PathStep.

    ``rng`` is this replica's own stream (speculative draws); ``replica_index`` names the replica
    and is not otherwise used (each replica's state lives in its own instance).
    """
    from simulator.runner import kv_capacity  # runner imports the loop, which imports this module

    capacity, _ = kv_capacity(scenario, profile)
    strategy: StrategySpec = getattr(scenario, "strategy", StrategySpec())
    if strategy.baseline:
        return BaselineStep(cost, int(profile.model.kv_bytes_per_token), capacity, int(profile.key.tp))
    tasks = [task for task, _ in scenario.workload.tasks]
    return PathStep(cost, profile, strategy, tasks, capacity, rng, scenario.source_path)


def replica_gpus(scenario: Any, profile: Any) -> int:
    """GPUs one replica occupies: tp x the sequence-parallel degree (replicas = gpus // this)."""
    strategy: StrategySpec = getattr(scenario, "strategy", StrategySpec())
    degree = 1 if strategy.sequence_parallel is None else strategy.sequence_parallel.degree
    return int(profile.key.tp) * degree
