"""Profile sections for the optimization paths: speculative decoding, per-task acceptance,
paging per link, sequence parallelism per degree, and KV-compression modes.

All optional in a profile (a measured profile may cover only some paths). Frozen dataclasses,
validated when built, with ``to_dict`` and ``parse`` like ``simulator/profile_schema.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Speculative:
    """Draft model and the cost of one speculative round, in units of one target decode step.

    cost_ratio c = draft per-token cost / target per-token cost; verify_cost_ratio v = cost of the
    verify pass over K+1 tokens / one target decode step. A round costs (K*c + v) target steps.
    """

    draft_model: str
    k: int
    cost_ratio: Coefficient
    verify_cost_ratio: Coefficient
    fit: FitQuality | None = None
    note: str = ""

    def __post_init__(self) -> None:
        check_text("draft_model", self.draft_model)
        check_count("k", self.k, low=1)
        _need_coefficient("cost_ratio", self.cost_ratio)
        _need_coefficient("verify_cost_ratio", self.verify_cost_ratio)
        check_number("cost_ratio.value", self.cost_ratio.value, positive=True)
        check_number("verify_cost_ratio.value", self.verify_cost_ratio.value, positive=True)
        check_text("note", self.note, nonempty=False)

    def to_dict(self) -> dict[str, Any]:
        return {"draft_model": self.draft_model, "k": self.k, "cost_ratio": self.cost_ratio.to_dict(),
                "verify_cost_ratio": self.verify_cost_ratio.to_dict(),
                "fit": None if self.fit is None else self.fit.to_dict(), "note": self.note}

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
                  "note": obj.string("note", "")}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class TaskAcceptance:
    """Draft-token acceptance for one task at proposal length k.

    mean: the per-token acceptance probability a of the expected-tokens formula;
    per_position: P(draft token i accepted | tokens before it accepted), i = 1..k, or None.
    """

    mean: float
    k: int
    per_position: tuple[float, ...] | None
    source: str
    note: str = ""

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

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "k": self.k,
                "per_position": None if self.per_position is None else list(self.per_position),
                "source": self.source, "note": self.note}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> TaskAcceptance:
        obj = JsonObject(raw, source, path)
        per_position = obj.get("per_position", None)
        if per_position is not None:
            per_position = tuple(number_list(per_position, source, obj.where("per_position")))
        kwargs = {"mean": obj.number("mean"), "k": obj.integer("k"), "per_position": per_position,
                  "source": obj.string("source"), "note": obj.string("note", "")}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class PagingLink:
    """Cost of one KV transfer over a link ("paging_v1": setup_ms + bytes / bandwidth).

    ms_per_2k_tokens restates the bandwidth term for 2048 tokens of this model's KV (the unit
    the seed documents speak in); ``Profile`` checks it against the model's kv_bytes_per_token.
    """

    cost: CostModel
    ms_per_2k_tokens: float

    def __post_init__(self) -> None:
        if not isinstance(self.cost, CostModel) or self.cost.inputs != ("bytes",):
            raise InputError(None, "cost", "must be a cost model whose only input is bytes (e.g. paging_v1)")
        object.__setattr__(self, "ms_per_2k_tokens", check_number("ms_per_2k_tokens", self.ms_per_2k_tokens))

    def marginal_ms(self, nbytes: float) -> float:
        """The bandwidth part of a transfer of ``nbytes`` (the cost minus its fixed setup)."""
        return self.cost.evaluate(bytes=nbytes) - self.cost.evaluate(bytes=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"cost": self.cost.to_dict(), "ms_per_2k_tokens": self.ms_per_2k_tokens}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> PagingLink:
        obj = JsonObject(raw, source, path)
        kwargs = {"cost": CostModel.parse(obj.get("cost"), source, obj.where("cost")),
                  "ms_per_2k_tokens": obj.number("ms_per_2k_tokens")}
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
