"""The formula registry: every cost model in a profile names one of these, with named coefficients.

A formula is a pure function of keyword-only inputs and coefficients returning milliseconds.
Profiles store only the formula's name and coefficient values, so a formula's math may never
change once shipped: a new shape gets a new name (``prefill_v2``), and old profiles keep meaning
what they meant when they were fitted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tripath.profile.cost_table import decode_table_v1, prefill_table_v1


def prefill_v1(*, new_tokens: float, context_tokens: float, c0: float, c_tok: float, c_attn: float) -> float:
    """One prefill chunk of T new tokens appended after C cached tokens, alone in an iteration.

    ms = c0 + c_tok*T + c_attn*T*(C + (T+1)/2)

    Linear layers cost the same per token (c_tok). Causal attention costs per query-key pair:
    new token i (1..T) attends to C cached keys and to the i new keys up to itself, so the chunk
    has sum_i (C + i) = T*C + T*(T+1)/2 = T*(C + (T+1)/2) pairs.
    """
    t = new_tokens
    return c0 + c_tok * t + c_attn * t * (context_tokens + (t + 1.0) / 2.0)


def decode_v1(*, batch: float, total_context: float, d0: float, d_seq: float, d_ctx: float) -> float:
    """One decode iteration of B sequences that hold S tokens in all.

    ms = d0 + d_seq*B + d_ctx*S

    d0 is the per-iteration fixed cost (reading the weights, launches), shared by the batch;
    d_seq is the per-sequence work (one token through the linear layers); d_ctx is attention,
    which reads every cached key and value once, so it scales with the total context S.
    """
    return d0 + d_seq * batch + d_ctx * total_context


def decode_v2(*, batch: float, total_context: float, d0: float, d_multi: float, d_seq: float,
              d_ctx: float) -> float:
    """decode_v1 plus a step at batch 2: ms = d0 + d_multi*[B >= 2] + d_seq*B + d_ctx*S.

    On CPU BLAS one decoding row runs the linear layers as matrix-vector products (gemv); from two
    rows on they run as matrix-matrix products (gemm), whose fixed cost is higher (docs/fidelity.md;
    scripts/measurements/measure_batch_jump.py). A straight line through all
    batches overprices batch 1 and underprices 2-4; d_multi is that jump. ``batch`` may be a numpy
    array ([B >= 2] is then elementwise). Still linear in its coefficients, so tripath.calibrate.fit fits it.
    """
    return d0 + d_multi * (batch >= 2) + d_seq * batch + d_ctx * total_context


def paging_v1(*, bytes: float, setup_ms: float, bandwidth_gbps: float) -> float:
    """One transfer of ``bytes`` over a link: ms = setup_ms + bytes / bandwidth.

    bandwidth_gbps is in GB/s (1e9 bytes/s), so bytes / (gbps * 1e9) seconds = bytes / (gbps * 1e6) ms.
    """
    return setup_ms + bytes / (bandwidth_gbps * 1e6)


def sp_merge_v1(*, context_tokens: float, m0: float, m_ctx: float) -> float:
    """Sequence-parallel merge and communication overhead at one degree: ms = m0 + m_ctx*C.

    Merging partial attention exchanges per-shard outputs and log-sum-exps whose size grows with
    the sequence, so the overhead is a fixed part plus a part linear in the context length.
    """
    return m0 + m_ctx * context_tokens


def overhead_v1(*, sequences: float, new_tokens: float, o0: float, o_seq: float, o_tok: float) -> float:
    """Host work of one served engine step outside the model forward: ms = o0 + o_seq*N + o_tok*T.

    N sequences scheduled in the iteration (decoding and prefilling), T new tokens it packs. Once per
    iteration the engine schedules, builds each sequence's block table and the packed inputs, samples
    one row per sequence and books the outputs (Vidur's per-iteration "CPU overhead": schedule,
    prepare inputs, sampler, process outputs), none of which the forward-only sweeps time.
    """
    return o0 + o_seq * sequences + o_tok * new_tokens


@dataclass(frozen=True)
class Formula:
    """A registered cost formula: its name, input names, coefficient names, and the function.

    ``positive`` names coefficients that divide, each a bandwidth in GB/s: held to tripath/profile/fields.py's
    MIN_LINK_GBPS (> 0, so a transfer's time stays finite) where every other coefficient is >= 0 and <= MAX_STEP_MS.
    ``table``: the formula reads a measured grid (tripath/profile/cost_table.py, the cost model's ``table``)
    instead of coefficients; it has none, and is never fitted.
    """

    name: str
    inputs: tuple[str, ...]
    coefficients: tuple[str, ...]
    fn: Callable[..., float]
    positive: frozenset[str] = frozenset()
    table: bool = False


FORMULAS: dict[str, Formula] = {
    f.name: f
    for f in (
        Formula("prefill_v1", ("new_tokens", "context_tokens"), ("c0", "c_tok", "c_attn"), prefill_v1),
        Formula("decode_v1", ("batch", "total_context"), ("d0", "d_seq", "d_ctx"), decode_v1),
        Formula("decode_v2", ("batch", "total_context"), ("d0", "d_multi", "d_seq", "d_ctx"), decode_v2),
        Formula("paging_v1", ("bytes",), ("setup_ms", "bandwidth_gbps"), paging_v1,
                frozenset({"bandwidth_gbps"})),
        Formula("sp_merge_v1", ("context_tokens",), ("m0", "m_ctx"), sp_merge_v1),
        Formula("overhead_v1", ("sequences", "new_tokens"), ("o0", "o_seq", "o_tok"), overhead_v1),
        Formula("prefill_table_v1", ("new_tokens", "context_tokens"), (), prefill_table_v1, table=True),
        Formula("decode_table_v1", ("batch", "total_context"), (), decode_table_v1, table=True),
    )
}

