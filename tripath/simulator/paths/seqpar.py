"""Sequence parallelism of degree P in the simulator: prefill speedup, decode split, merge overhead.

A replica with SP occupies tp x P GPUs (so a cluster of G GPUs holds G // (tp x P) replicas), and
each of its P ranks holds 1/P of every sequence's KV, so its KV capacity is P times one rank's.
SP is a transform of the cost model (like gpt-fast's tp.py applied after the model is written):
``prefill_fn`` and ``decode_fn`` wrap the profile's formulas, so an SP iteration is priced by the
same IterationCost arithmetic as the baseline (tripath/simulator/paths/step.py: path_cost).

- Prefill: a chunk's token-dependent work (prefill_ms(T, ctx) - prefill_ms(0, 0)) is divided by
  the profile's measured speedup at the chunk's context (ctx + T), linearly interpolated between
  the profile's rows and held at the end rows outside them (each such chunk is counted as an
  extrapolation), plus merge_ms(ctx + T).
- Decode: the attention part, decode_ms(B, S) - decode_ms(B, 0) (reading the S cached tokens),
  is split evenly over the P ranks that each hold S / P of them; the per-sequence and fixed parts
  (linear layers for one new token per sequence) cannot be split and run on every rank. The ranks'
  partial attentions (outputs and log-sum-exps) are merged once per iteration in one collective
  for the batch: decode_merge_ms(S), at the batch's total context (a function of B and S only, so
  the baseline's exact fast path can price it). It is the profile's ``decode_merge`` model where
  the profile has one: the seqpar sweep's measured merge of one decode step, P partials of ONE
  query per layer (tripath/calibrate/sweeps/seqpar.py). A decode merge combines per-query partials, so its
  cost does not grow like the prefill merge's, which combines T = C queries; profiles measured
  before the sweep timed decode have no ``decode_merge``, and then the prefill merge_ms(S) is
  charged (an overestimate: docs/simulator_paths.md), and ``merge_source`` says
  so. Decode merge queries are not counted as extrapolations: the fast path evaluates decode
  costs a few iterations ahead of use.
- Communication: the ranks exchange their partials in collectives (all-gathers of (out, lse) per
  layer, the token broadcast), during which a rank waits for its peer and the transport: wall time
  that a compute cost measured in thread CPU time does not contain. Where the profile has a
  ``decode_comm`` model (the seqpar sweep's wall time inside the collectives of one decode step,
  mean of the ranks, mean over the steps, median over the repetitions: tripath/calibrate/sweeps/seqpar.py) it
  is added to each decode iteration at the batch's total context, like the decode merge. It is an
  expected value: the engine's per-step waits are heavy-tailed (wake-ups on busy cores), so the
  simulated per-request TPOT has no spread where the engine's does (docs/seqpar_wall_time.md);
  profiles without it charge no communication, and
  ``comm_source`` says so. The prefill's collectives are inside its measured wall-clock speedup.
- Per batch: where the section has ``decode_rows`` (profiles built from published collective timings:
  tripath/calibrate/published/seqpar.py), a decode step's merge and communication are the rows' merge_ms and
  comm_ms interpolated at the iteration's batch B (end rows held outside them), instead of the two
  context models above: the partials hold one query per sequence, so their size grows with B, not S.
- merge_ms(C) is the profile's fitted merge model (sp_merge_v1: m0 + m_ctx C) where it has one,
  else its rows' merge_ms interpolated like the speedup.

With the tiered cache, each rank pages its own shard over its own host link in parallel
(tripath/simulator/paths/tiered.py: time of bytes / P per rank); the merge above is paid on top.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tripath.profile.sections import SequenceParallel


class SpPhysics:
    """Speedup, split and merge of one SP degree (the profile's ``sequence_parallel.<degree>`` section), with a
    count of queries outside the measured rows (its own: one instance per replica)."""

    def __init__(self, sp: SequenceParallel) -> None:
        self.degree = sp.degree
        self._ctx = np.array([row.context_tokens for row in sp.rows], dtype=float)
        self._speedup = np.array([row.speedup for row in sp.rows], dtype=float)
        self._merge_rows = np.array([row.merge_ms for row in sp.rows], dtype=float)
        self._merge_model = sp.merge
        self._decode_merge = getattr(sp, "decode_merge", None)
        # provenance of the decode merge for summaries: measured per decode step, or the prefill fallback
        self.merge_source = ("decode_merge (measured per decode step)" if self._decode_merge is not None
                             else "prefill merge model (no decode_merge in the profile: an overestimate)")
        self._decode_comm = getattr(sp, "decode_comm", None)
        self.comm_source = ("decode_comm (measured wall time in the collectives per decode step)"
                            if self._decode_comm is not None
                            else "none (no decode_comm in the profile: decode communication not charged)")
        rows = getattr(sp, "decode_rows", ())
        self._by_batch = None
        if rows:  # per-batch rows take precedence over the context models
            self._by_batch = tuple(np.array(column, dtype=float) for column in
                                   zip(*((r.batch, r.merge_ms, r.comm_ms) for r in rows), strict=True))
            self.merge_source = "decode_rows merge_ms (per decode step, interpolated at the batch)"
            self.comm_source = "decode_rows comm_ms (collectives per decode step, interpolated at the batch)"
        self.queries = 0
        self.outside = 0

    def _count(self, context: float) -> None:
        self.queries += 1
        if self._merge_model is not None:
            inside = self._merge_model.in_domain(context_tokens=context)
        else:
            inside = True
        if not (self._ctx[0] <= context <= self._ctx[-1]) or not inside:
            self.outside += 1

    def speedup(self, context: float) -> float:
        """The profile's speedup at this context (interpolated; end rows held outside them)."""
        return float(np.interp(context, self._ctx, self._speedup))

    def merge_ms(self, context: float) -> float:
        if self._merge_model is not None:
            return float(self._merge_model.evaluate(context_tokens=context))
        return float(np.interp(context, self._ctx, self._merge_rows))

    def prefill_fn(self, prefill: Callable[[Any, Any], Any], fixed_ms: float) -> Callable[[Any, Any], Any]:
        """prefill_ms(T, ctx) with SP: fixed + work / speedup(ctx + T) + merge_ms(ctx + T); T = 0 stays fixed."""

        def sp_prefill(new_tokens: Any, context_tokens: Any) -> Any:
            if new_tokens == 0:
                return prefill(new_tokens, context_tokens)
            reach = context_tokens + new_tokens
            self._count(reach)
            work = prefill(new_tokens, context_tokens) - fixed_ms
            return fixed_ms + work / self.speedup(reach) + self.merge_ms(reach)

        return sp_prefill

    def decode_fn(self, decode: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """decode_ms(B, S) with SP: decode_ms(B, 0) + (decode_ms(B, S) - decode_ms(B, 0)) / P + decode merge(S)
        + decode communication(S).

        S may be a numpy array (the fast path evaluates many iterations at once)."""
        degree = self.degree

        def sp_decode(batch: Any, total_context: Any) -> Any:
            fixed = decode(batch, 0)
            return (fixed + (decode(batch, total_context) - fixed) / degree
                    + self.decode_merge_array(total_context, batch) + self.decode_comm_array(total_context, batch))

        return sp_decode

    def _at_batch(self, column: int, context: Any, batch: Any) -> Any:
        """Column ``column`` of the per-batch rows at ``batch``, broadcast over ``context``'s shape."""
        assert self._by_batch is not None
        if batch is None:
            raise ValueError("this SP section prices decode per batch: pass the iteration's batch")
        value = np.interp(batch, self._by_batch[0], self._by_batch[column])
        return value + np.zeros_like(context, dtype=float) if np.ndim(context) else float(value)

    def decode_comm_array(self, context: Any, batch: Any = None) -> Any:
        """Wall ms in the collectives of one decode step, elementwise over a scalar or an array (0 without a model).

        ``batch``: the iteration's decoding sequences, needed where the section has per-batch rows."""
        if self._by_batch is not None:
            return self._at_batch(2, context, batch)
        if self._decode_comm is None:
            return 0.0  # broadcasts over an array of contexts
        return self._decode_comm.evaluate(context_tokens=context)

    def decode_merge_array(self, context: Any, batch: Any = None) -> Any:
        """The merge of one decode step, elementwise over a scalar or an array of contexts (``batch`` as above)."""
        if self._by_batch is not None:
            return self._at_batch(1, context, batch)
        if self._decode_merge is not None:
            return self._decode_merge.evaluate(context_tokens=context)
        return self.merge_array(context)

    def merge_array(self, context: Any) -> Any:
        """merge_ms elementwise over a scalar or an array of contexts."""
        if self._merge_model is not None:
            return self._merge_model.evaluate(context_tokens=context)
        return np.interp(context, self._ctx, self._merge_rows)
