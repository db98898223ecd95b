"""Profile sections for the optimization paths: paging per link, sequence parallelism per degree,
and KV-compression modes (speculative decoding's sections live in tripath/profile/speculative.py,
re-exported here).

All optional in a profile (a measured profile may cover only some paths). Frozen dataclasses,
validated when built, with ``to_dict`` and ``parse`` like ``tripath/profile/schema.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient, CostModel
from tripath.profile.dequant import DecodeDequant
from tripath.profile.fields import (
    VALUE_SOURCES,
    JsonObject,
    build,
    check_count,
    check_number,
    check_text,
)
from tripath.profile.speculative import Speculative, TaskAcceptance
from tripath.profile.tables import int_keyed, need_coefficient

__all__ = ["CompressionMode", "PagingLink", "SequenceParallel", "SpRow", "Speculative", "TaskAcceptance"]


@dataclass(frozen=True)
class PagingLink:
    """Cost of one KV transfer over a link ("paging_v1": setup_ms + bytes / bandwidth).

    ms_per_2k_tokens restates the bandwidth term for 2048 tokens of this model's KV (the unit
    the seed documents speak in); ``Profile`` checks it against the model's kv_bytes_per_token.
    by_chunk_tokens: optional, the same formula fitted to transfers of pages of each measured chunk
    size (tokens per page -> cost model): small pages pay their per-page setup more often, which
    shows as a lower effective bandwidth. ``cost_for(chunk_tokens)`` reads either.
    """

    cost: CostModel
    ms_per_2k_tokens: float
    by_chunk_tokens: dict[int, CostModel] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.cost, CostModel) or self.cost.inputs != ("bytes",):
            raise InputError(None, "cost", "must be a cost model whose only input is bytes (e.g. paging_v1)")
        object.__setattr__(self, "ms_per_2k_tokens", check_number("ms_per_2k_tokens", self.ms_per_2k_tokens))
        for chunk, model in self.by_chunk_tokens.items():
            check_count(f"by_chunk_tokens.{chunk}", chunk, low=1)
            if not isinstance(model, CostModel) or model.inputs != ("bytes",):
                raise InputError(None, f"by_chunk_tokens.{chunk}", "must be a cost model whose only input is bytes")
        object.__setattr__(self, "by_chunk_tokens", dict(sorted(self.by_chunk_tokens.items())))

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

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cost": self.cost.to_dict(), "ms_per_2k_tokens": self.ms_per_2k_tokens}
        if self.by_chunk_tokens:  # only when measured, so older profiles keep their exact bytes
            out["by_chunk_tokens"] = {str(c): m.to_dict() for c, m in self.by_chunk_tokens.items()}
        return out

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> PagingLink:
        obj = JsonObject(raw, source, path)
        chunks = int_keyed(obj.mapping("by_chunk_tokens", {}), source, obj.where("by_chunk_tokens"),
                            "a chunk size in tokens")
        kwargs = {"cost": CostModel.parse(obj.get("cost"), source, obj.where("cost")),
                  "ms_per_2k_tokens": obj.number("ms_per_2k_tokens"),
                  "by_chunk_tokens": {c: CostModel.parse(v, source, obj.where(f"by_chunk_tokens.{c}"))
                                      for c, v in chunks.items()}}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class SpRow:
    """One measured (or seed) point: speedup over one GPU and merge overhead at a context length."""

    context_tokens: int
    speedup: float
    merge_ms: float

    def __post_init__(self) -> None:
        check_count("context_tokens", self.context_tokens, low=1)
        object.__setattr__(self, "speedup", check_number("speedup", self.speedup, positive=True))
        object.__setattr__(self, "merge_ms", check_number("merge_ms", self.merge_ms))

    def to_dict(self) -> dict[str, Any]:
        return {"context_tokens": self.context_tokens, "speedup": self.speedup, "merge_ms": self.merge_ms}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> SpRow:
        obj = JsonObject(raw, source, path)
        kwargs = {"context_tokens": obj.integer("context_tokens"), "speedup": obj.number("speedup"),
                  "merge_ms": obj.number("merge_ms")}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class SequenceParallel:
    """Sequence parallelism at one degree P: table rows and/or a fitted merge-overhead model."""

    degree: int
    rows: tuple[SpRow, ...]
    merge: CostModel | None
    source: str
    note: str = ""
    # merge of one decode step (P partials of one query per layer) on the sequence's context; None in
    # profiles measured before the seqpar sweep timed decode (the simulator then falls back to ``merge``)
    decode_merge: CostModel | None = None
    # wall time in the collectives of one decode step (all-gathers of (out, lse), token broadcast); None in
    # profiles measured before the seqpar sweep timed it (the simulator then charges no communication)
    decode_comm: CostModel | None = None

    def __post_init__(self) -> None:
        check_count("degree", self.degree, low=2)
        object.__setattr__(self, "rows", tuple(self.rows))
        if not self.rows and self.merge is None:
            raise InputError(None, "rows", "need rows or a merge model (both are empty)")
        lengths = [row.context_tokens for row in self.rows]
        if lengths != sorted(set(lengths)):
            raise InputError(None, "rows", "context_tokens must be strictly increasing")
        if self.merge is not None and self.merge.inputs != ("context_tokens",):
            raise InputError(None, "merge", "must be a cost model whose only input is context_tokens")
        if self.decode_merge is not None and self.decode_merge.inputs != ("context_tokens",):
            raise InputError(None, "decode_merge", "must be a cost model whose only input is context_tokens")
        if self.decode_comm is not None and self.decode_comm.inputs != ("context_tokens",):
            raise InputError(None, "decode_comm", "must be a cost model whose only input is context_tokens")
        check_text("source", self.source, allowed=VALUE_SOURCES)
        check_text("note", self.note, nonempty=False)

    def to_dict(self) -> dict[str, Any]:
        out = {"rows": [row.to_dict() for row in self.rows],
               "merge": None if self.merge is None else self.merge.to_dict(),
               "source": self.source, "note": self.note}
        if self.decode_merge is not None:  # absent key = absent model: older profiles round-trip unchanged
            out["decode_merge"] = self.decode_merge.to_dict()
        if self.decode_comm is not None:
            out["decode_comm"] = self.decode_comm.to_dict()
        return out

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str, degree: int) -> SequenceParallel:
        obj = JsonObject(raw, source, path)
        rows = tuple(SpRow.parse(row, source, f"{obj.where('rows')}[{i}]")
                     for i, row in enumerate(obj.array("rows")))
        merge = obj.get("merge", None)
        decode_merge = obj.get("decode_merge", None)
        decode_comm = obj.get("decode_comm", None)
        kwargs = {"degree": degree, "rows": rows,
                  "merge": None if merge is None else CostModel.parse(merge, source, obj.where("merge")),
                  "source": obj.string("source"), "note": obj.string("note", ""),
                  "decode_merge": (None if decode_merge is None
                                   else CostModel.parse(decode_merge, source, obj.where("decode_merge"))),
                  "decode_comm": (None if decode_comm is None
                                  else CostModel.parse(decode_comm, source, obj.where("decode_comm")))}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class CompressionMode:
    """One KV-compression mode (e.g. int8, int4, mixed) and its costs.

    kv_bytes_ratio: compressed / uncompressed KV bytes per token, in (0, 1];
    decode_overhead_ratio: decode time reading compressed KV; its unit says how: "ratio" (what the
    calibration sweep writes) = whole decode step with the mode / without, any other unit ("1",
    "fraction") = extra attention time as a fraction of it (tripath/simulator/paths/compression.py);
    quality_loss: task-quality loss (unit says which metric); acceptance_drop: absolute drop of
    speculative acceptance when the target reads compressed KV (the negative coupling);
    prefill_overhead_ratio (optional, unit "ratio"): prefill time writing into the compressed store /
    into the paged pool; absent (older profiles) = prefill unchanged; prefill_overhead_points (optional):
    the same ratio per measured prompt length, ((tokens, ratio), ...) by increasing tokens: the simulator
    interpolates it at each chunk's length (the overhead grows with length) and uses it over the scalar;
    decode_extra (optional, tripath/profile/dequant.py): the compressed decode step's extra ms over the
    full-precision one, fitted per (batch, context); the simulator adds it instead of multiplying by
    decode_overhead_ratio (absent: it multiplies by the ratio).
    """

    kv_bytes_ratio: Coefficient
    decode_overhead_ratio: Coefficient
    quality_loss: Coefficient
    acceptance_drop: Coefficient
    note: str = ""
    prefill_overhead_ratio: Coefficient | None = None
    prefill_overhead_points: tuple[tuple[int, float], ...] = ()
    decode_extra: DecodeDequant | None = None

    FIELDS = ("kv_bytes_ratio", "decode_overhead_ratio", "quality_loss", "acceptance_drop")

    def __post_init__(self) -> None:
        for name in self.FIELDS:
            need_coefficient(name, getattr(self, name))
        if self.prefill_overhead_ratio is not None:
            need_coefficient("prefill_overhead_ratio", self.prefill_overhead_ratio)
            check_number("prefill_overhead_ratio.value", self.prefill_overhead_ratio.value, positive=True)
        for i, (tokens, ratio) in enumerate(self.prefill_overhead_points):
            check_number(f"prefill_overhead_points.{i}.tokens", tokens, positive=True)
            check_number(f"prefill_overhead_points.{i}.ratio", ratio, positive=True)
            if i and tokens <= self.prefill_overhead_points[i - 1][0]:
                raise InputError(None, f"prefill_overhead_points.{i}", "prompt lengths must increase")
        if self.decode_extra is not None and not isinstance(self.decode_extra, DecodeDequant):
            raise InputError(None, "decode_extra", "must be a DecodeDequant")
        check_number("kv_bytes_ratio.value", self.kv_bytes_ratio.value, positive=True, high=1.0)
        check_number("acceptance_drop.value", self.acceptance_drop.value, high=1.0)
        check_text("note", self.note, nonempty=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name).to_dict() for name in self.FIELDS}
        if self.prefill_overhead_ratio is not None:  # absent stays absent: old profiles round-trip unchanged
            out["prefill_overhead_ratio"] = self.prefill_overhead_ratio.to_dict()
        if self.prefill_overhead_points:
            out["prefill_overhead_points"] = [[int(n), float(r)] for n, r in self.prefill_overhead_points]
        if self.decode_extra is not None:  # absent stays absent, as prefill_overhead_ratio
            out["decode_extra"] = self.decode_extra.to_dict()
        out["note"] = self.note
        return out

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> CompressionMode:
        obj = JsonObject(raw, source, path)
        kwargs: dict[str, Any] = {name: Coefficient.parse(obj.get(name), source, obj.where(name))
                                  for name in cls.FIELDS}
        prefill = obj.get("prefill_overhead_ratio", None)
        if prefill is not None:
            kwargs["prefill_overhead_ratio"] = Coefficient.parse(prefill, source, obj.where("prefill_overhead_ratio"))
        points = obj.get("prefill_overhead_points", None)
        if points is not None:
            if not isinstance(points, list) or not all(isinstance(p, list) and len(p) == 2 for p in points):
                raise InputError(source, obj.where("prefill_overhead_points"), "a list of [tokens, ratio] pairs")
            kwargs["prefill_overhead_points"] = tuple((p[0], p[1]) for p in points)
        extra = obj.get("decode_extra", None)
        if extra is not None:
            kwargs["decode_extra"] = DecodeDequant.parse(extra, source, obj.where("decode_extra"))
        kwargs["note"] = obj.string("note", "")
        obj.finish()
        return build(cls, source, path, **kwargs)
