"""Profile sections for the optimization paths: speculative decoding, per-task acceptance,
paging per link, sequence parallelism per degree, and KV-compression modes.

All optional in a profile (a measured profile may cover only some paths). Frozen dataclasses,
validated when built, with ``to_dict`` and ``parse`` like ``simulator/profile_schema.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from simulator.cost_model import Coefficient, CostModel, FitQuality
from simulator.errors import InputError
from simulator.profile_fields import (
    VALUE_SOURCES,
    JsonObject,
    build,
    check_count,
    check_number,
    check_text,
    number_list,
)


def _need_coefficient(name: str, value: object) -> None:
    if not isinstance(value, Coefficient):
        raise InputError(None, name, "must be a Coefficient")


def _int_keyed(raw: dict[str, Any], source: str | None, path: str, what: str) -> dict[int, Any]:
    """A JSON object keyed by integers written as text (JSON keys are strings): {"4": x} -> {4: x}."""
    out = {}
    for text, value in raw.items():
        if not text.isdigit() or int(text) < 1:
            raise InputError(source, f"{path}.{text}", f"key must be {what} (an integer >= 1)")
        out[int(text)] = value
    return dict(sorted(out.items()))


def _interpolate(points: dict[int, float], k: int, anchor: tuple[float, float] | None) -> float:
    """Piecewise-linear value at ``k`` through the measured ``points`` (and ``anchor``, a known point
    below them); beyond the largest point, the last segment's line, never below the largest point."""
    xs = sorted(points)
    pts = ([anchor] if anchor is not None and anchor[0] < xs[0] else []) + [(float(x), points[x]) for x in xs]
    if k in points:
        return points[k]
    if len(pts) == 1:
        return pts[0][1]
    if k <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if k <= x1:
            return y0 + (y1 - y0) * (k - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    return max(y1, y0 + (y1 - y0) * (k - x0) / (x1 - x0))


@dataclass(frozen=True)
class Speculative:
    """Draft model and the cost of one speculative round, in units of one target decode step.

    cost_ratio c = draft per-token cost / target per-token cost; verify_cost_ratio v = cost of the
    verify pass over K+1 tokens / one target decode step. A round costs (K*c + v) target steps.
    ``verify_cost_ratio`` is v at ``k``; the optional ``verify_by_k`` holds v(K) measured at each K of
    a K sweep (K -> coefficient). ``verify_at(K)`` reads either (see its docstring).
    """

    draft_model: str
    k: int
    cost_ratio: Coefficient
    verify_cost_ratio: Coefficient
    fit: FitQuality | None = None
    note: str = ""
    verify_by_k: dict[int, Coefficient] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_text("draft_model", self.draft_model)
        check_count("k", self.k, low=1)
        _need_coefficient("cost_ratio", self.cost_ratio)
        _need_coefficient("verify_cost_ratio", self.verify_cost_ratio)
        check_number("cost_ratio.value", self.cost_ratio.value, positive=True)
        check_number("verify_cost_ratio.value", self.verify_cost_ratio.value, positive=True)
        check_text("note", self.note, nonempty=False)
        for kk, coef in self.verify_by_k.items():
            check_count(f"verify_by_k.{kk}", kk, low=1)
            _need_coefficient(f"verify_by_k.{kk}", coef)
            check_number(f"verify_by_k.{kk}.value", coef.value, positive=True)
        object.__setattr__(self, "verify_by_k", dict(sorted(self.verify_by_k.items())))

    def __hash__(self) -> int:
        # verify_by_k is a dict (unhashable); equal sections have equal names and values, so this agrees with ==.
        return hash((self.draft_model, self.k, self.cost_ratio, self.verify_cost_ratio))

    def verify_at(self, k: int) -> float:
        """v(K) in target decode steps for proposal length ``k``.

        Without ``verify_by_k`` (a single-K profile): ``verify_cost_ratio`` at any K, as before. With
        it: the measured value at K; between measured Ks, linear interpolation; below the smallest, the
        line from v(0) = 1 (verifying one token is one decode step) to it; above the largest, the last
        segment's line (never below the largest measured value)."""
        check_count("k", k, low=1)
        if not self.verify_by_k:
            return self.verify_cost_ratio.value
        return _interpolate({kk: c.value for kk, c in self.verify_by_k.items()}, k, (0.0, 1.0))

    def to_dict(self) -> dict[str, Any]:
        out = {"draft_model": self.draft_model, "k": self.k, "cost_ratio": self.cost_ratio.to_dict(),
               "verify_cost_ratio": self.verify_cost_ratio.to_dict(),
               "fit": None if self.fit is None else self.fit.to_dict(), "note": self.note}
        if self.verify_by_k:  # only when measured, so single-K profiles keep their exact bytes
            out["verify_by_k"] = {str(kk): c.to_dict() for kk, c in self.verify_by_k.items()}
        return out

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> Speculative | None:
        if raw is None:
            return None
        obj = JsonObject(raw, source, path)
        kwargs = {"draft_model": obj.string("draft_model"), "k": obj.integer("k"),
                  "cost_ratio": Coefficient.parse(obj.get("cost_ratio"), source, obj.where("cost_ratio")),
                  "verify_cost_ratio": Coefficient.parse(obj.get("verify_cost_ratio"), source,
                                                         obj.where("verify_cost_ratio")),
                  "fit": FitQuality.parse(obj.get("fit", None), source, obj.where("fit")),
                  "note": obj.string("note", ""),
                  "verify_by_k": {kk: Coefficient.parse(v, source, obj.where(f"verify_by_k.{kk}"))
                                  for kk, v in _int_keyed(obj.mapping("verify_by_k", {}), source,
                                                          obj.where("verify_by_k"), "a proposal length K").items()}}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class TaskAcceptance:
    """Draft-token acceptance for one task at proposal length k.

    mean: the per-token acceptance probability a of the expected-tokens formula;
    per_position: P(draft token i accepted | tokens before it accepted), i = 1..k, or None;
    by_k: optional, the same measured at each K of a K sweep (K -> entry with that k and no by_k of
    its own); when it holds ``k`` it must agree with this entry. ``at(K)`` reads either.
    """

    mean: float
    k: int
    per_position: tuple[float, ...] | None
    source: str
    note: str = ""
    by_k: dict[int, TaskAcceptance] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", check_number("mean", self.mean, high=1.0))
        check_count("k", self.k, low=1)
        if self.per_position is not None:
            values = tuple(check_number(f"per_position[{i}]", p, high=1.0)
                           for i, p in enumerate(self.per_position))
            if len(values) != self.k:
                raise InputError(None, "per_position", f"must have k = {self.k} entries, got {len(values)}")
            object.__setattr__(self, "per_position", values)
        check_text("source", self.source, allowed=VALUE_SOURCES)
        check_text("note", self.note, nonempty=False)
        for kk, entry in self.by_k.items():
            if not isinstance(entry, TaskAcceptance) or entry.k != kk or entry.by_k:
                raise InputError(None, f"by_k.{kk}", f"must be an acceptance entry with k = {kk} and no by_k")
        same = self.by_k.get(self.k)
        if same is not None and not math.isclose(same.mean, self.mean, rel_tol=1e-9, abs_tol=1e-12):
            raise InputError(None, f"by_k.{self.k}.mean", f"must equal mean = {self.mean!r} (same K), "
                             f"got {same.mean!r}")
        object.__setattr__(self, "by_k", dict(sorted(self.by_k.items())))

    def __hash__(self) -> int:
        # by_k is a dict (unhashable); equal entries have equal means and Ks, so this agrees with ==.
        return hash((self.mean, self.k, self.per_position, self.source))

    def at(self, k: int) -> TaskAcceptance:
        """The entry measured at proposal length ``k``: exact when measured, else the measured K nearest to
        ``k`` (ties: the smaller K). Per-token acceptance a barely depends on K, so the nearest K is the
        closest measurement of it; without ``by_k`` this is the entry itself, whatever ``k``."""
        check_count("k", k, low=1)
        measured = {self.k: self, **self.by_k}
        return measured[min(measured, key=lambda kk: (abs(kk - k), kk))]

    def to_dict(self) -> dict[str, Any]:
        out = {"mean": self.mean, "k": self.k,
               "per_position": None if self.per_position is None else list(self.per_position),
               "source": self.source, "note": self.note}
        if self.by_k:  # only when measured, so single-K profiles keep their exact bytes
            out["by_k"] = {str(kk): e.to_dict() for kk, e in self.by_k.items()}
        return out

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> TaskAcceptance:
        obj = JsonObject(raw, source, path)
        per_position = obj.get("per_position", None)
        if per_position is not None:
            per_position = tuple(number_list(per_position, source, obj.where("per_position")))
        by_k = _int_keyed(obj.mapping("by_k", {}), source, obj.where("by_k"), "a proposal length K")
        kwargs = {"mean": obj.number("mean"), "k": obj.integer("k"), "per_position": per_position,
                  "source": obj.string("source"), "note": obj.string("note", ""),
                  "by_k": {kk: cls.parse(v, source, obj.where(f"by_k.{kk}")) for kk, v in by_k.items()}}
        obj.finish()
        return build(cls, source, path, **kwargs)


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
        chunks = _int_keyed(obj.mapping("by_chunk_tokens", {}), source, obj.where("by_chunk_tokens"),
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
        check_text("source", self.source, allowed=VALUE_SOURCES)
        check_text("note", self.note, nonempty=False)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [row.to_dict() for row in self.rows],
                "merge": None if self.merge is None else self.merge.to_dict(),
                "source": self.source, "note": self.note}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str, degree: int) -> SequenceParallel:
        obj = JsonObject(raw, source, path)
        rows = tuple(SpRow.parse(row, source, f"{obj.where('rows')}[{i}]")
                     for i, row in enumerate(obj.array("rows")))
        merge = obj.get("merge", None)
        kwargs = {"degree": degree, "rows": rows,
                  "merge": None if merge is None else CostModel.parse(merge, source, obj.where("merge")),
                  "source": obj.string("source"), "note": obj.string("note", "")}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class CompressionMode:
    """One KV-compression mode (e.g. int8, int4, mixed) and its costs.

    kv_bytes_ratio: compressed / uncompressed KV bytes per token, in (0, 1];
    decode_overhead_ratio: extra decode attention time for dequantization, as a fraction of it;
    quality_loss: task-quality loss (unit says which metric); acceptance_drop: absolute drop of
    speculative acceptance when the target reads compressed KV (the negative coupling).
    """

    kv_bytes_ratio: Coefficient
    decode_overhead_ratio: Coefficient
    quality_loss: Coefficient
    acceptance_drop: Coefficient
    note: str = ""

    FIELDS = ("kv_bytes_ratio", "decode_overhead_ratio", "quality_loss", "acceptance_drop")

    def __post_init__(self) -> None:
        for name in self.FIELDS:
            _need_coefficient(name, getattr(self, name))
        check_number("kv_bytes_ratio.value", self.kv_bytes_ratio.value, positive=True, high=1.0)
        check_number("acceptance_drop.value", self.acceptance_drop.value, high=1.0)
        check_text("note", self.note, nonempty=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name).to_dict() for name in self.FIELDS}
        out["note"] = self.note
        return out

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> CompressionMode:
        obj = JsonObject(raw, source, path)
        kwargs: dict[str, Any] = {name: Coefficient.parse(obj.get(name), source, obj.where(name))
                                  for name in cls.FIELDS}
        kwargs["note"] = obj.string("note", "")
        obj.finish()
        return build(cls, source, path, **kwargs)
