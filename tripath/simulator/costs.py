"""The cost of one continuous-batching iteration, composed from a profile's prefill and decode models.

An iteration runs the decode step of every sequence already running (B sequences holding S
tokens in all) together with the full-prompt prefill of every request admitted at its start.
The profile measures each part alone in an iteration, and each alone pays the iteration's fixed
cost once (one pass over the weights, kernel launches). Run together they share that pass, so:

    decode-only      ms = decode_ms(B, S)
    with prefills    ms = base + sum_i (prefill_ms(T_i, 0) - prefill_ms(0, 0))
    where base       = decode_ms(B, S) if B > 0 else prefill_ms(0, 0)

prefill_ms(0, 0) is the prefill formula's fixed part (its value at zero tokens). The decode
model's fixed part stands for the shared pass when decodes are present; each prefill then adds
only its token-dependent work (linear layers and causal attention over its own prompt).

S counts, per sequence, the prompt plus the tokens generated so far: the keys and values the
decode step's new query attends to. On a profile measured on the engine (``block_tokens`` set,
tripath/profile/engine_rules.py) S is the key count that engine's attention gathers instead: every one of
the B sequences reads the batch's longest context rounded up to whole KV blocks (the rest masked),

    S = B x ceil(max context / block) x block          (``keys``; Σ contexts otherwise)

The decode sweep timed batches of equal contexts, a multiple of the block, where the two agree, so
the fitted d_ctx is per gathered key; a mixed batch pays for its longest sequence.
Callers pass the priced S (``keys``, or ``run_keys`` for a run of fixed membership) to the methods.

With the profile's optional ``costs.step_overhead`` (overhead_v1: the served step's host work outside
the forward, which the forward-only sweeps leave out), every iteration adds it once, at its N
scheduled sequences (decodes + prefill chunks) and T new tokens (B + the chunks' tokens):

    iteration ms     = the above + overhead_ms(N, T)

A profile without it prices every iteration without it (no term is added, not even 0.0).

Every query is checked against the model's measured domain; those outside are counted and
reported in the summary (tripath/core/records.py: Extrapolations), never silently trusted.

Both simulator paths take decode costs from ``decode_s`` over an array of S values, so one
iteration in the reference and the same iteration inside a fast-path run get bit-identical costs
(the formulas are elementwise + and *, exact in IEEE arithmetic whatever the array length).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tripath.core.records import Extrapolations
from tripath.profile.engine_rules import decode_block_tokens
from tripath.profile.formulas import FORMULAS
from tripath.profile.profile import Profile

Bounds = tuple[float, float]
_UNBOUNDED: Bounds = (-np.inf, np.inf)


class IterationCost:
    """Iteration costs in seconds, with a running count of queries outside the measured domain.

    ``prefill_ms(new_tokens, context_tokens)`` returns one chunk's milliseconds (scalar);
    ``decode_ms(batch, total_context)`` must accept a numpy array of total_context values. Both are the
    formulas alone (no step overhead, nothing counted): the paths compose their own iterations from them.
    Domains are (lo, hi) per input in the formulas' input order; None means unbounded.
    """

    def __init__(
        self,
        prefill_ms: Callable[[Any, Any], Any],
        decode_ms: Callable[[Any, Any], Any],
        prefill_domain: tuple[Bounds, Bounds] | None = None,
        decode_domain: tuple[Bounds, Bounds] | None = None,
        overhead_ms: Callable[[Any, Any], float] | None = None,
        block_tokens: int | None = None,
    ) -> None:
        if block_tokens is not None and block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1 or None, got {block_tokens}")
        # tokens per KV block when decode attention is padded to the longest context (the engine), else None
        self.block_tokens = block_tokens
        self.prefill_ms = prefill_ms
        self.decode_ms = decode_ms
        # (sequences, new_tokens) -> ms once per iteration; None: the profile has no step_overhead
        self._overhead_ms = overhead_ms
        self.prefill_fixed_ms = float(prefill_ms(0, 0))  # the prefill formula's fixed part, prefill_ms(0, 0)
        self.prefill_domain: tuple[Bounds, Bounds] = prefill_domain or (_UNBOUNDED, _UNBOUNDED)
        self.decode_domain: tuple[Bounds, Bounds] = decode_domain or (_UNBOUNDED, _UNBOUNDED)
        # Time must advance every iteration; the formulas grow with their inputs, so checking the
        # smallest real queries (one token, one sequence) guards the whole range.
        if not (float(prefill_ms(1, 0)) > 0 and float(decode_ms(1, 1)) > 0):
            raise ValueError("iteration costs must be > 0 ms (prefill_ms(1, 0) and decode_ms(1, 1))")
        self.prefill_queries = 0
        self.prefill_outside = 0
        self.decode_queries = 0
        self.decode_outside = 0

    @classmethod
    def from_profile(cls, profile: Profile) -> IterationCost:
        """Bind the profile's prefill and decode formulas and coefficients once (the hot path)."""
        pre, dec = profile.costs["prefill"], profile.costs["decode"]
        (p_tok, p_ctx), (d_batch, d_ctx) = FORMULAS[pre.formula].inputs, FORMULAS[dec.formula].inputs
        # Coefficients bound once; the formulas are plain arithmetic, so decode accepts arrays of S.
        pre_fn, dec_fn = pre.function(), dec.function()

        def prefill(new_tokens: Any, context_tokens: Any) -> Any:
            return pre_fn(**{p_tok: new_tokens, p_ctx: context_tokens})

        def decode(batch: Any, total_context: Any) -> Any:
            return dec_fn(**{d_batch: batch, d_ctx: total_context})

        overhead = None
        if "step_overhead" in profile.costs:
            ov = profile.costs["step_overhead"]
            o_seq_in, o_tok_in = FORMULAS[ov.formula].inputs
            ov_fn = ov.function()

            def overhead(sequences: Any, new_tokens: Any) -> float:
                return float(ov_fn(**{o_seq_in: sequences, o_tok_in: new_tokens}))

        if dec.formula == "decode_v1":
            # The hot path without keyword plumbing: decode_v1's expression, operation for operation
            # (tests/simulator/loop/test_fast_path.py checks it equals profile.decode_ms bit for bit).
            d0, d_seq, d_ctx_ms = (dec.values()[k] for k in ("d0", "d_seq", "d_ctx"))

            def decode(batch: Any, total_context: Any) -> Any:
                return d0 + d_seq * batch + d_ctx_ms * total_context
        elif dec.formula == "decode_table_v1" and dec.table is not None:
            # decode_table_v1's expression without the keyword plumbing (the same floats: one call to table.at)
            at = dec.table.at

            def decode(batch: Any, total_context: Any) -> Any:
                return at(batch, total_context / (batch if isinstance(batch, np.ndarray) else max(batch, 1)))
        elif dec.formula == "decode_v2":
            # decode_v2's expression, operation for operation (bit for bit with profile.decode_ms)
            d0, d_multi, d_seq, d_ctx_ms = (dec.values()[k] for k in ("d0", "d_multi", "d_seq", "d_ctx"))

            def decode(batch: Any, total_context: Any) -> Any:
                return d0 + d_multi * (batch >= 2) + d_seq * batch + d_ctx_ms * total_context

        return cls(
            prefill,
            decode,
            (tuple(pre.domain[p_tok]), tuple(pre.domain[p_ctx])),
            (tuple(dec.domain[d_batch]), tuple(dec.domain[d_ctx])),
            overhead,
            decode_block_tokens(profile),
        )

    @classmethod
    def linear(cls, prefill_fixed_ms: float, prefill_ms_per_token: float, decode_fixed_ms: float,
               decode_ms_per_seq: float, decode_ms_per_context_token: float = 0.0) -> IterationCost:
        """A cost model linear in its inputs, unbounded domain: hand-computable timelines and what-ifs.

        prefill ms = fixed + per_token * T (context ignored); decode ms = fixed + per_seq * B + per_ctx * S.
        """

        def prefill(new_tokens: Any, context_tokens: Any) -> Any:
            return prefill_fixed_ms + prefill_ms_per_token * new_tokens

        def decode(batch: Any, total_context: Any) -> Any:
            return decode_fixed_ms + decode_ms_per_seq * batch + decode_ms_per_context_token * total_context

        return cls(prefill, decode)

    def transformed(self, prefill_ms: Callable[[Any, Any], Any], decode_ms: Callable[[Any, Any], Any],
                    block_tokens: int | None) -> IterationCost:
        """This model's domains and step overhead on other formulas (a path's transform of them), counters at 0."""
        return IterationCost(prefill_ms, decode_ms, self.prefill_domain, self.decode_domain, self._overhead_ms,
                             block_tokens)

    def fresh(self) -> IterationCost:
        """The same model with its own counters at 0: one per replica and replication."""
        return self.transformed(self.prefill_ms, self.decode_ms, self.block_tokens)

    @property
    def has_step_overhead(self) -> bool:
        """Whether every iteration adds the profile's step_overhead (``overhead_ms``)."""
        return self._overhead_ms is not None

    def keys(self, batch: int, total_context: int, longest: int) -> int:
        """The S a decode step of ``batch`` sequences is priced at: Σ contexts (``total_context``), or with
        padded attention B x ``longest`` rounded up to whole blocks (``longest``: the batch's largest context)."""
        block = self.block_tokens
        if block is None:
            return total_context
        return batch * (-(-longest // block) * block)

    def run_keys(self, batch: int, total_context: int, longest: int, count: int) -> np.ndarray:
        """``keys`` of ``count`` consecutive decode steps of a fixed batch: each sequence gains a token per step,
        so Σ grows by ``batch`` and the longest context by 1 (its padded count by whole blocks, in steps)."""
        block = self.block_tokens
        if block is None:
            return np.arange(total_context, total_context + batch * count, batch)
        # ceil((longest + j) / block) * block * batch, in three array operations (runs are often a few steps)
        first = longest + block - 1
        return np.arange(first, first + count) // block * (block * batch)

    def decode_s(self, batch: int, total_context: np.ndarray) -> np.ndarray:
        """Seconds of decode-only iterations of ``batch`` sequences, one per total_context value.

        Pure: counts nothing, because the fast path evaluates a few iterations past where a run
        may stop; it reports the ones it used through ``count_decodes``.
        """
        if self._overhead_ms is None:
            return self.decode_ms(batch, total_context) / 1000.0
        return (self.decode_ms(batch, total_context) + self._overhead_ms(batch, batch)) / 1000.0

    def decode_one_s(self, batch: int, total_context: int) -> float:
        """decode_s for one iteration, without building an array: the formulas are plain arithmetic
        (+, *, /, np.interp), which give the same float on a scalar as on each element of an array, so
        this equals ``decode_s(batch, np.array([total_context]))[0]`` bit for bit
        (tests/simulator/loop/test_fast_path.py)."""
        if self._overhead_ms is None:
            return float(self.decode_ms(batch, total_context) / 1000.0)
        return float((self.decode_ms(batch, total_context) + self._overhead_ms(batch, batch)) / 1000.0)

    def overhead_ms(self, sequences: int, new_tokens: int) -> float:
        """The iteration's host work outside the forward (0.0 when the profile has no step_overhead)."""
        return 0.0 if self._overhead_ms is None else self._overhead_ms(sequences, new_tokens)

    def count_decodes(self, batch: int, first_context: int, iterations: int) -> None:
        """Record ``iterations`` decode queries that were used, at S = first_context + batch * j.

        The contexts of a run form an arithmetic progression, so the ones inside [lo, hi] are
        counted in closed form rather than one by one.
        """
        self.decode_queries += iterations
        (batch_lo, batch_hi), (lo, hi) = self.decode_domain
        if not batch_lo <= batch <= batch_hi or iterations <= 0:
            self.decode_outside += max(iterations, 0)
            return
        first = 0 if lo <= first_context else math.ceil((lo - first_context) / batch)
        last = iterations - 1
        if hi != math.inf:
            last = min(last, math.floor((hi - first_context) / batch))
        self.decode_outside += iterations - max(0, last - first + 1)

    def count_run(self, batch: int, total_context: int, longest: int, iterations: int) -> None:
        """``count_decodes`` for the S values ``run_keys`` gives (padded: in closed form too).

        Padded, step j reads batch x m_j x block keys, m_j = ceil((longest + j) / block), nondecreasing in j; it
        is inside [lo, hi] while m_lo <= m_j <= m_hi, m_lo = ceil(lo / (batch block)), m_hi = floor(hi / (batch
        block)), i.e. for (m_lo - 1) block - longest < j <= m_hi block - longest.
        """
        block = self.block_tokens
        if block is None:
            self.count_decodes(batch, total_context, iterations)
            return
        self.decode_queries += iterations
        (batch_lo, batch_hi), (lo, hi) = self.decode_domain
        if not batch_lo <= batch <= batch_hi or iterations <= 0:
            self.decode_outside += max(iterations, 0)
            return
        first = 0 if lo == -math.inf else max(0, (math.ceil(lo / (batch * block)) - 1) * block - longest + 1)
        last = iterations - 1
        if hi != math.inf:
            last = min(last, math.floor(hi / (batch * block)) * block - longest)
        self.decode_outside += iterations - max(0, last - first + 1)

    def mixed_s(self, prompts: Sequence[int], batch: int, total_context: int) -> float:
        """Seconds of an iteration that prefills ``prompts`` while ``batch`` sequences decode."""
        ms = float(self.decode_ms(batch, total_context)) if batch > 0 else self.prefill_fixed_ms
        for tokens in prompts:
            ms += self.chunk_work_ms(tokens, 0)
        if batch > 0:
            self.count_decodes(batch, total_context, 1)
        if self._overhead_ms is not None:
            ms += self._overhead_ms(batch + len(prompts), batch + sum(prompts))
        return ms / 1000.0

    def chunked_s(self, chunks: Sequence[tuple[int, int]], batch: int, total_context: int) -> float:
        """Seconds of an iteration that prefills chunks (new_tokens, context_before) while ``batch`` decode.

        Each chunk adds prefill_ms(T, ctx) - prefill_ms(0, 0) to the shared pass: mixed_s with the
        context a chunk continues (chunked prefill, Sarathi-Serve). Each chunk is checked against the
        prefill model's measured domain in both inputs.
        """
        ms = float(self.decode_ms(batch, total_context)) if batch > 0 else self.prefill_fixed_ms
        for tokens, context in chunks:
            ms += self.chunk_work_ms(tokens, context)
        if batch > 0:
            self.count_decodes(batch, total_context, 1)
        if self._overhead_ms is not None:
            ms += self._overhead_ms(batch + len(chunks), batch + sum(tokens for tokens, _ in chunks))
        return ms / 1000.0

    def chunk_work_ms(self, tokens: int, context: int) -> float:
        """One prefill chunk's work above the iteration's fixed cost, prefill_ms(T, ctx) - prefill_ms(0, 0), in ms;
        counts the query, and whether it is outside the prefill model's measured domain."""
        (tok_lo, tok_hi), (ctx_lo, ctx_hi) = self.prefill_domain
        self.prefill_queries += 1
        if not (tok_lo <= tokens <= tok_hi and ctx_lo <= context <= ctx_hi):
            self.prefill_outside += 1
        return float(self.prefill_ms(tokens, context)) - self.prefill_fixed_ms

    def extrapolations(self) -> Extrapolations:
        return Extrapolations(
            self.prefill_queries, self.prefill_outside, self.decode_queries, self.decode_outside
        )
