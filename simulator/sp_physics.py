"""Sequence parallelism of degree P in the simulator: prefill speedup, decode split, merge overhead.

A replica with SP occupies tp x P GPUs (so a cluster of G GPUs holds G // (tp x P) replicas), and
each of its P ranks holds 1/P of every sequence's KV, so its KV capacity is P times one rank's.

- Prefill: a chunk's token-dependent work (prefill_ms(T, ctx) - prefill_ms(0, 0)) is divided by
  the profile's measured speedup at the chunk's context (ctx + T), linearly interpolated between
  the profile's rows and held at the end rows outside them (each such query is counted as an
  extrapolation), plus merge_ms(ctx + T).
- Decode: the attention part, decode_ms(B, S) - decode_ms(B, 0) (reading the S cached tokens),
  is split evenly over the P ranks that each hold S / P of them; the per-sequence and fixed parts
  (linear layers for one new token per sequence) cannot be split and run on every rank. The ranks'
  partial attentions are merged once per iteration: merge_ms at the longest decoding context (the
  merge runs for the whole batch in one collective; the profile's merge overhead is stated per
  context length, and the longest sequence bounds the batch's).
- merge_ms(C) is the profile's fitted merge model (sp_merge_v1: m0 + m_ctx C) where it has one,
  else its rows' merge_ms interpolated like the speedup.

With the tiered cache, each rank pages its own shard over its own host link in parallel
(simulator/tier_physics.py: time of bytes / P per rank); the merge above is paid on top.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class SpPhysics:
    """Speedup, split and merge of one SP degree, with a count of queries outside the measured rows."""

    def __init__(self, profile: Any, degree: int) -> None:
        sp = profile.sequence_parallel[degree]
        self.degree = degree
        self._ctx = np.array([row.context_tokens for row in sp.rows], dtype=float)
        self._speedup = np.array([row.speedup for row in sp.rows], dtype=float)
        self._merge_rows = np.array([row.merge_ms for row in sp.rows], dtype=float)
        self._merge_model = sp.merge
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

    def prefill_ms(self, work_ms: float, context: float) -> tuple[float, float]:
        """(split prefill work, merge) in ms for one chunk whose prompt reaches ``context`` tokens."""
        self._count(context)
        return work_ms / self.speedup(context), self.merge_ms(context)

    def decode_ms(self, attention_ms: float, longest_context: float) -> tuple[float, float]:
        """(attention per rank, merge) in ms for one decode iteration."""
        self._count(longest_context)
        return attention_ms / self.degree, self.merge_ms(longest_context)
