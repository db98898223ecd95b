"""The StepModel of a replica with optimization paths on, composed over the baseline costs.

Compression and sequence parallelism are deterministic: they transform the cost model
(``path_cost``: compression's decode overhead, then SP's split and merge), and an iteration on the
transformed model is priced by the same IterationCost arithmetic as the baseline. Speculation
(random tokens per round) and the tiered cache (paging that depends on tier state) act per
iteration on top, in ``PathStep``. One iteration's milliseconds, from the profile's models:

    decode part   d' = decode'(B, S)         compression: x its overhead; SP: attention / P + merge_ms(S)
                  speculation: x (K_max c + v(K_max)) for the batch's round (1 without speculation); with
                  the profile's round_costs c(B, S) and v(K_max, B, S) at the batch and its priced S
    prefill part  sum over chunks of prefill'(T, ctx) - prefill(0, 0)
                  SP: work / speedup(ctx + T) + merge_ms(ctx + T)
    draft prefill measured profiles (the engine's DraftModelProposer): c x the prefill part of the prompt
                  (+ first token) the draft catches up on, in the sequence's first round; seed/published
                  profiles (vLLM-style): the prefill part x (1 + c) in the prefill iteration
    base          the decode part if B > 0, else prefill(0, 0) (the iteration's fixed cost)
    compute       base + prefill part (+ the profile's step_overhead(N, T) once, when it has one)
    seconds       compute + paging stall (tiered: max(0, paging - overlap x compute); measured profiles:
                  the engine's per-step read and page moves, tiered_engine_rule.py)

tripath/simulator/paths/speculative.py, tiered.py, seqpar.py and compression.py hold each path's formulas
and say where their numbers come from; docs/simulator_paths.md puts them together. Every model here is
built from the run's RunCosts (tripath/simulator/paths/run_costs.py: the profile converted once), never from the
profile. ``build_step_model`` returns step_model.BaselineStep with every strategy off (records equal the
baseline's bit for bit), ``TransformedStep`` (BaselineStep on the transformed model) with only
compression and/or SP on, and ``PathStep`` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tripath.core.records import Extrapolations
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.compression import CompressionPhysics
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.seqpar import SpPhysics
from tripath.simulator.paths.speculative import SpeculativePhysics
from tripath.simulator.paths.tiered import TierPhysics
from tripath.simulator.scenario.strategy import StrategySpec
from tripath.simulator.step_model import (
    BaselineStep,
    Decode,
    DecodeBatch,
    PrefillChunk,
    StepModel,
    StepResult,
    as_batch,
    ones,
)


def path_cost(cost: IterationCost, compression: CompressionPhysics | None, sp: SpPhysics | None) -> IterationCost:
    """The baseline cost model with the deterministic paths applied: compression, then SP."""
    prefill, decode = cost.prefill_ms, cost.decode_ms
    if compression is not None:
        decode = compression.decode_fn(decode)
        prefill = compression.prefill_fn(prefill)
    if sp is not None:
        decode = sp.decode_fn(decode)
        prefill = sp.prefill_fn(prefill, cost.prefill_fixed_ms)
    # the served step's host work outside the forward (profile costs.step_overhead) is not a path's: kept as is
    out = cost.transformed(prefill, decode, None if sp is not None else cost.block_tokens)
    # block_tokens: the engine's padded decode keys, if any; the engine's SP engine (seqpar.py) keeps a dense
    # cache per sequence and reads exactly its own context, so SP prices Σ contexts
    if sp is not None:
        sp.queries = sp.outside = 0  # IterationCost's own sanity check priced a 1-token chunk: not a query
    return out


class Transforms:
    """What compression and SP change for a replica: its cost model, bytes per token, capacity, GPUs.

    A fresh instance per replica: the transformed cost model and the SP physics keep their own counters."""

    def __init__(self, costs: RunCosts) -> None:
        strategy = costs.strategy
        self.compression = costs.compression
        full = costs.kv_bytes_per_token
        self.kv_bytes_per_token = full if self.compression is None else self.compression.bytes_per_token(full)
        self.degree = 1 if strategy.sequence_parallel is None else strategy.sequence_parallel.degree
        self.sp = None if costs.sequence_parallel is None else SpPhysics(costs.sequence_parallel)
        # every SP rank holds 1/P of each sequence's KV in its own budget: P budgets per replica
        self.kv_capacity_bytes = self.degree * costs.kv_capacity_bytes
        self.gpus = replica_gpus(strategy, costs.tp)
        self.cost = path_cost(costs.cost, self.compression, self.sp)

    def merge_ms(self, prefills: Sequence[PrefillChunk], decodes: DecodeBatch) -> tuple[float, float]:
        """(decode merge, prefill merges) in ms of one iteration: the SP merge inside its cost."""
        if self.sp is None:
            return 0.0, 0.0
        decode = float(self.sp.decode_merge_array(decodes.total_context, len(decodes))) if len(decodes) else 0.0
        return decode, sum(self.sp.merge_ms(p.context_before + p.new_tokens) for p in prefills)

    def sp_extrapolations(self) -> tuple[int, int]:
        """(SP prefill queries, of which outside the profile's measured rows or merge domain)."""
        return (0, 0) if self.sp is None else (self.sp.queries, self.sp.outside)


class TransformedStep(BaselineStep):
    """Compression and/or SP alone: the baseline's iteration, operation for operation, on the transformed
    cost model (so a fast path given the same model gives the same records), plus the merge time."""

    deterministic = True  # a transformed cost model: no draw, no state (BaselineStep.deterministic)

    def __init__(self, transforms: Transforms) -> None:
        super().__init__(transforms.cost, transforms.kv_bytes_per_token, transforms.kv_capacity_bytes,
                         transforms.gpus)
        self.transforms = transforms

    def step(self, prefills: Sequence[PrefillChunk], decodes: DecodeBatch | Sequence[Decode],
             live_tokens: int) -> StepResult:
        decodes = as_batch(decodes)
        result = super().step(prefills, decodes, live_tokens)
        result.merge_s = sum(self.transforms.merge_ms(prefills, decodes)) / 1000.0
        return result

    def decode_merge_s(self, batch: int, total_contexts: np.ndarray) -> np.ndarray | None:
        """``step``'s merge_s of decode-only iterations at these Σ contexts (SP's decode merge; None without SP)."""
        sp = self.transforms.sp
        return None if sp is None else sp.decode_merge_array(total_contexts, batch) / 1000.0

    def extrapolations(self) -> Extrapolations:
        return self.cost.extrapolations().with_sp(*self.transforms.sp_extrapolations())


class PathStep:
    """Speculative and tiered iterations (with compression and SP if on) of one replica (StepModel)."""

    def __init__(self, costs: RunCosts, rng: np.random.Generator) -> None:
        self.strategy = strategy = costs.strategy
        self.transforms = t = Transforms(costs)
        self.cost, self.kv_bytes_per_token, self.gpus, self.sp = t.cost, t.kv_bytes_per_token, t.gpus, t.sp
        self.device_kv_tokens = t.kv_capacity_bytes // t.kv_bytes_per_token
        self.tiers = None if costs.tiered is None or strategy.tiered is None else TierPhysics(
            strategy.tiered, costs.tiered, self.kv_bytes_per_token, self.device_kv_tokens, ranks=t.degree)
        self.kv_capacity_tokens = self.device_kv_tokens if self.tiers is None else self.tiers.capacity_tokens
        drop = 0.0 if t.compression is None else t.compression.acceptance_drop
        self.spec = None if costs.speculative is None else SpeculativePhysics(costs.speculative, rng, drop)
        self._live = 0

    def step(self, prefills: Sequence[PrefillChunk], decodes: DecodeBatch | Sequence[Decode],
             live_tokens: int) -> StepResult:
        decodes = as_batch(decodes)
        batch = len(decodes)
        ks = self.spec.choose(decodes) if self.spec is not None and batch else np.zeros(batch, dtype=np.int64)
        k_max = max(ks.tolist()) if batch else 0  # the round's K_max, read once (on a list: no numpy call)
        decode_merge, prefill_merge = self.transforms.merge_ms(prefills, decodes)
        if batch:
            # every pass of the round (K_max draft steps at c, the verify at v) is a full (SP) step
            # with the profile's round_costs, c and v at this batch and its priced context (paths/speculative.py)
            factor = 1.0 if self.spec is None else self.spec.round_factor(k_max, batch,
                                                                          self._decode_context(decodes))
            base_ms = factor * self._decode_ms(decodes)
            if self.spec is not None and batch > 1:
                # each sequence beyond the first: its own draft tokens, verify rows and bookkeeping, in batch-1
                # decode steps at the batch's mean context (spec_physics.batch_extra; 0 without the coefficient)
                extra = self.spec.batch_extra(batch, k_max)
                if extra:
                    base_ms += extra * float(self.cost.decode_ms(1, decodes.total_context // batch))
            decode_merge *= factor
            comp = self.transforms.compression
            if self.spec is not None and comp is not None and comp.decode_extra is not None and self.sp is None:
                # dequantization is the verify's alone (its B(K+1) rows), not every pass's (compression_physics)
                priced = self._decode_context(decodes)  # the S inside _decode_ms's (transformed) price
                extra = float(comp.decode_extra.extra_ms(batch, priced))
                base_ms += comp.round_extra_ms(batch, priced, k_max) - factor * extra
        else:
            base_ms = self.cost.prefill_fixed_ms
        draft_ms = draft_merge = 0.0
        if self.spec is not None and batch:
            # the draft prefills a prompt in the sequence's first round (after its first token), at r x the
            # target's work for the same chunk (r: the measured draft/target prompt-pass ratio, else c);
            # prompt lookup has no draft (r = 0, no catch-up)
            chunks = [PrefillChunk(-1, -1, tokens, before, False) for tokens, before in self.spec.catch_up(decodes, ks)]
            if chunks:
                ratio = self.spec.prefill_ratio
                draft_ms = ratio * self._prefill_ms(chunks)
                draft_merge = ratio * self.transforms.merge_ms(chunks, DecodeBatch([], [], [], [], 0))[1]
        # a vLLM-style engine (non-measured profiles) runs the draft's prefill beside the target's: x (1 + r)
        draft = 1.0 if self.spec is None or self.spec.lazy_draft else 1.0 + self.spec.prefill_ratio
        compute_ms = base_ms + draft * self._prefill_ms(prefills) + draft_ms
        if self.cost.has_step_overhead:
            # once per iteration (a speculative round is one engine step): its sequences and new tokens
            new_tokens = batch + int(ks.sum()) + sum(p.new_tokens for p in prefills)
            compute_ms += self.cost.overhead_ms(batch + len(prefills), new_tokens)
        compute_s = compute_ms / 1000.0

        accepted = self.spec.draw(decodes, ks, k_max) if self.spec is not None else None
        emitted = ones(batch) if accepted is None else accepted + 1
        if self.spec is not None:
            self.spec.commit(decodes, ks, accepted)
            self.spec.observe(decodes, ks, accepted)

        stall_s, moved = 0.0, {}
        written = sum(p.new_tokens for p in prefills) + sum(emitted.tolist())  # integers: any order is exact
        if self.tiers is not None and self.tiers.rule is not None:
            # the engine's rule (tiered_engine_rule.py): each sequence's pages, every one read every step; a first
            # prompt chunk attends over its own K/V and reads nothing from the cache
            held = [*decodes.contexts, *(p.context_before + p.new_tokens for p in prefills)]
            reads = [*decodes.contexts, *(p.context_before + p.new_tokens for p in prefills if p.context_before)]
            read_s, paging_s, moved = self.tiers.engine_step_split(reads, held, live_tokens + written)
            compute_s += read_s  # the tiered attention's read extra is compute, paid with nothing moved: not paging
            stall_s = self.tiers.stall_s(paging_s, compute_s)
        elif self.tiers is not None:
            read = decodes.total_context + sum(p.context_before for p in prefills)
            paging_s, moved = self.tiers.iteration(max(live_tokens, read), read, written)
            stall_s = self.tiers.stall_s(paging_s, compute_s)
        self._live = live_tokens + written
        rounds = None if self.spec is None else (ks > 0).astype(np.int64)
        merge_s = (decode_merge + draft * prefill_merge + draft_merge) / 1000.0
        return StepResult(compute_s + stall_s, emitted, accepted, rounds, stall_s, moved, merge_s)

    def _decode_context(self, decodes: DecodeBatch) -> int:
        """The S a decode step of these sequences is priced at (_decode_ms and the compressed verify's extra):
        Σ contexts, or the engine's padded key count B x the longest in whole blocks (IterationCost.keys)."""
        if self.cost.block_tokens is None or not len(decodes):
            return decodes.total_context
        return self.cost.keys(len(decodes), decodes.total_context, max(decodes.contexts))

    def _decode_ms(self, decodes: DecodeBatch) -> float:
        """One decode step of the iteration's B sequences on the (transformed) cost model."""
        cost, batch = self.cost, len(decodes)
        context = self._decode_context(decodes)
        cost.count_decodes(batch, context, 1)
        return float(cost.decode_ms(batch, context))

    def _prefill_ms(self, prefills: Sequence[PrefillChunk]) -> float:
        """Token-dependent prefill work (SP merge included), counting queries outside the measured domain."""
        chunk_work_ms = self.cost.chunk_work_ms
        work = 0.0
        for chunk in prefills:
            work += chunk_work_ms(chunk.new_tokens, chunk.context_before)
        return work

    def tier_bytes(self) -> dict[str, int]:
        if self.tiers is not None:
            return self.tiers.tier_bytes()
        return {"device": self._live * self.kv_bytes_per_token}

    def extrapolations(self) -> Extrapolations:
        return self.cost.extrapolations().with_sp(*self.transforms.sp_extrapolations())


def build_step_model(costs: RunCosts, rng: np.random.Generator) -> StepModel:
    """The step model of one replica: BaselineStep when no strategy is on, TransformedStep with compression
    and/or SP only, else PathStep. ``rng`` is this replica's own stream (speculative draws); each replica's
    state (counters, tiers, controller) lives in its own instance."""
    strategy = costs.strategy
    if strategy.baseline:
        return BaselineStep(costs.cost.fresh(), costs.kv_bytes_per_token, costs.kv_capacity_bytes, costs.tp)
    if transform_only(strategy):
        return TransformedStep(Transforms(costs))
    return PathStep(costs, rng)


def transform_only(strategy: StrategySpec) -> bool:
    """Whether the paths are compression and/or SP only (deterministic: a transformed cost model)."""
    return not strategy.baseline and strategy.speculative is None and strategy.tiered is None


def fast_transforms(costs: RunCosts) -> Transforms | None:
    """The transformed cost model, KV bytes per token and capacity with which the fast replica serves the paths
    exactly, where they allow it (compression and/or SP only: deterministic, one token per decode), with the SP
    physics (merge model, extrapolation counters) it uses to record merge time; a fresh instance per call. None
    where they do not (speculation and tiering act per iteration) or for the baseline (the profile's costs)."""
    return Transforms(costs) if transform_only(costs.strategy) else None


def replica_gpus(strategy: StrategySpec, tp: int) -> int:
    """GPUs one replica occupies: tp x the sequence-parallel degree (replicas = gpus // this)."""
    degree = 1 if strategy.sequence_parallel is None else strategy.sequence_parallel.degree
    return tp * degree
