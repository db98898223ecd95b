"""Profile sections for the optimization paths: paging per link, sequence parallelism per degree,
and KV-compression modes (speculative decoding's sections live in tripath/profile/speculative.py,
re-exported here).

All optional in a profile (a measured profile may cover only some paths). Frozen dataclasses checked
when built and read and written by the profile codec (tripath/profile/codec.py), like
``tripath/profile/schema.py``. Optional fields marked ``omit`` are written only when measured, so
profiles written before they existed keep their exact bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tripath.core.errors import InputError
from tripath.profile.codec import Section, json_field, note_field
from tripath.profile.cost_model import Coefficient, CostModel, coefficient, cost_model_of
from tripath.profile.dequant import DecodeDequant
from tripath.profile.fields import (
    MAX_COST_RATIO,
    MAX_STEP_MS,
    VALUE_SOURCES,
    check_count,
    check_number,
    count,
    entries,
    number,
    text,
)
from tripath.profile.speculative import Speculative, TaskAcceptance

__all__ = ["MISS_KINDS", "CompressionMode", "PagingLink", "SequenceParallel", "SpDecodeRow", "SpRow", "Speculative",
           "TaskAcceptance", "miss_key"]

# The link sets a measured tier miss crosses (host: device<->host; ssd: all four links; direct: no host tier),
# each fitted under the paging key miss_key(kind) by calibrate's tier-miss sweep and read by the simulator.
MISS_KINDS = ("host", "ssd", "direct")


def miss_key(kind: str) -> str:
    """The profile's paging key of the measured misses crossing ``kind``'s links."""
    return f"miss_{kind}"


@dataclass(frozen=True)
class PagingLink(Section):
    """Cost of one KV transfer over a link ("paging_v1": setup_ms + bytes / bandwidth).

    ms_per_2k_tokens restates the bandwidth term for 2048 tokens of this model's KV (the unit
    the seed documents speak in); ``Profile`` checks it against the model's kv_bytes_per_token.
    by_chunk_tokens: optional, the same formula fitted to transfers of pages of each measured chunk
    size (tokens per page -> cost model): small pages pay their per-page setup more often, which
    shows as a lower effective bandwidth. ``cost_for(chunk_tokens)`` reads either.
    """

    cost: CostModel = json_field(cost_model_of("bytes", " (e.g. paging_v1)"))
    ms_per_2k_tokens: float = json_field(number(high=MAX_STEP_MS))
    by_chunk_tokens: dict[int, CostModel] = json_field(entries(cost_model_of("bytes"), counted=True),
                                                       default_factory=dict, omit=True, key="a chunk size in tokens")

    def __hash__(self) -> int:
        return hash((self.cost, self.ms_per_2k_tokens))

    def cost_for(self, chunk_tokens: int | None = None) -> CostModel:
        """The cost model for pages of ``chunk_tokens`` tokens: the one fitted at that chunk size, else the
        measured size nearest on a log scale (ties: the smaller); None or no per-chunk fits: ``cost``."""
        if chunk_tokens is None or not self.by_chunk_tokens:
            return self.cost
        check_count("chunk_tokens", chunk_tokens, low=1)
        nearest = min(self.by_chunk_tokens, key=lambda c: (abs(math.log2(c / chunk_tokens)), c))
        return self.by_chunk_tokens[nearest]

    def marginal_ms(self, nbytes: float) -> float:
        """The bandwidth part of a transfer of ``nbytes`` (the cost minus its fixed setup)."""
        return self.cost.evaluate(bytes=nbytes) - self.cost.evaluate(bytes=0.0)


@dataclass(frozen=True)
class SpRow(Section):
    """One measured (or seed) point: speedup over one GPU and merge overhead at a context length."""

    context_tokens: int = json_field(count(1))
    speedup: float = json_field(number(low=1.0 / MAX_COST_RATIO, high=MAX_COST_RATIO))  # divides the work
    merge_ms: float = json_field(number(high=MAX_STEP_MS))


def _increasing_rows(field: str, rows: tuple[SpRow, ...]) -> tuple[SpRow, ...]:
    """Rows by strictly increasing context length, kept as a tuple."""
    rows = tuple(rows)
    lengths = [row.context_tokens for row in rows]
    if lengths != sorted(set(lengths)):
        raise InputError(None, field, "context_tokens must be strictly increasing")
    return rows


@dataclass(frozen=True)
class SpDecodeRow(Section):
    """One decode step at a batch size: the merge of the ranks' partials and the time in their collectives.

    Both depend on the batch (the partials hold one query per sequence), not on the context, which each rank's
    attention reads from its own shard."""

    batch: int = json_field(count(1))
    merge_ms: float = json_field(number(high=MAX_STEP_MS))
    comm_ms: float = json_field(number(high=MAX_STEP_MS))


def _increasing_batches(field: str, rows: tuple[SpDecodeRow, ...]) -> tuple[SpDecodeRow, ...]:
    """Decode rows by strictly increasing batch, kept as a tuple."""
    rows = tuple(rows)
    batches = [row.batch for row in rows]
    if batches != sorted(set(batches)):
        raise InputError(None, field, "batch must be strictly increasing")
    return rows


@dataclass(frozen=True)
class SequenceParallel(Section):
    """Sequence parallelism at one degree P: table rows and/or a fitted merge-overhead model."""

    degree: int = json_field(count(2), from_key=True)  # the profile's key for this section
    rows: tuple[SpRow, ...] = json_field(_increasing_rows)
    merge: CostModel | None = json_field(cost_model_of("context_tokens"))
    source: str = json_field(text(allowed=VALUE_SOURCES))
    note: str = note_field()
    # merge of one decode step (P partials of one query per layer) on the sequence's context; None in
    # profiles measured before the seqpar sweep timed decode (the simulator then falls back to ``merge``)
    decode_merge: CostModel | None = json_field(cost_model_of("context_tokens"), default=None, omit=True)
    # wall time in the collectives of one decode step (all-gathers of (out, lse), token broadcast); None in
    # profiles measured before the seqpar sweep timed it (the simulator then charges no communication)
    decode_comm: CostModel | None = json_field(cost_model_of("context_tokens"), default=None, omit=True)
    # per batch size: one decode step's merge and collectives (profiles built from published collective timings);
    # where present the simulator interpolates them at the iteration's batch instead of decode_merge / decode_comm
    decode_rows: tuple[SpDecodeRow, ...] = json_field(_increasing_batches, default=(), omit=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.rows and self.merge is None:
            raise InputError(None, "rows", "need rows or a merge model (both are empty)")


def _increasing_points(field: str, points: tuple[tuple[int, float], ...]) -> tuple[tuple[int, float], ...]:
    """(tokens, ratio) pairs, both > 0, by increasing tokens."""
    for i, (tokens, ratio) in enumerate(points):
        check_number(f"{field}.{i}.tokens", tokens, positive=True)
        check_number(f"{field}.{i}.ratio", ratio, positive=True, high=MAX_COST_RATIO)
        if i and tokens <= points[i - 1][0]:
            raise InputError(None, f"{field}.{i}", "prompt lengths must increase")
    return points


def _dequant(field: str, value: object) -> DecodeDequant:
    if not isinstance(value, DecodeDequant):
        raise InputError(None, field, "must be a DecodeDequant")
    return value


@dataclass(frozen=True)
class CompressionMode(Section):
    """One KV-compression mode (e.g. int8, int4, mixed) and its costs.

    kv_bytes_ratio: compressed / uncompressed KV bytes per token, in (0, 1];
    decode_overhead_ratio: decode time reading compressed KV; its unit says how: "ratio" (what the
    calibration sweep writes) = whole decode step with the mode / without, "attention_ratio" (the
    published GPU profiles') = attention time with the mode / without (below 1 where the mode reads
    fewer bytes than it dequantizes), any other unit ("1", "fraction") = extra attention time as a
    fraction of it (tripath/simulator/paths/compression.py);
    quality_loss: task-quality loss (unit says which metric); acceptance_drop: absolute drop of
    speculative acceptance when the target reads compressed KV (the negative coupling);
    prefill_overhead_ratio (optional, unit "ratio"): prefill time writing into the compressed store /
    into the paged pool; absent (older profiles) = prefill unchanged; prefill_overhead_points (optional):
    the same ratio per measured prompt length, ((tokens, ratio), ...) by increasing tokens: the simulator
    interpolates it at each chunk's length (the overhead grows with length) and uses it over the scalar;
    decode_extra (optional, tripath/profile/dequant.py): the compressed decode step's extra ms over the
    full-precision one, fitted per (batch, context); the simulator adds it instead of multiplying by
    decode_overhead_ratio (absent: the ratio alone).
    """

    kv_bytes_ratio: Coefficient = json_field(coefficient(positive=True, high=1.0))
    decode_overhead_ratio: Coefficient = json_field(coefficient(high=MAX_COST_RATIO))
    quality_loss: Coefficient = json_field(coefficient())
    acceptance_drop: Coefficient = json_field(coefficient(high=1.0))
    prefill_overhead_ratio: Coefficient | None = json_field(coefficient(positive=True, high=MAX_COST_RATIO),
                                                            default=None, omit=True)
    prefill_overhead_points: tuple[tuple[int, float], ...] = json_field(
        _increasing_points, default=(), omit=True, shape="a [tokens, ratio] pair")
    decode_extra: DecodeDequant | None = json_field(_dequant, default=None, omit=True)
    note: str = note_field()

    FIELDS = ("kv_bytes_ratio", "decode_overhead_ratio", "quality_loss", "acceptance_drop")
