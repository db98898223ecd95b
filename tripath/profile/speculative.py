"""Profile sections for speculative decoding: draft/verify costs per proposal length K, per-task acceptance.

Optional in a profile; frozen dataclasses validated when built, with ``to_dict`` and ``parse`` like
``tripath/profile/schema.py``. Re-exported by ``tripath/profile/sections.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient, FitQuality
from tripath.profile.fields import (
    VALUE_SOURCES,
    JsonObject,
    build,
    check_count,
    check_number,
    check_text,
    number_list,
)
from tripath.profile.tables import int_keyed, interpolate, need_coefficient


@dataclass(frozen=True)
class Speculative:
    """Draft model and the cost of one speculative round, in units of one target decode step.

    cost_ratio c = draft per-token cost / target per-token cost; verify_cost_ratio v = cost of the
    verify pass over K+1 tokens / one target decode step. A round costs (K*c + v) target steps.
    ``verify_cost_ratio`` is v at ``k``; the optional ``verify_by_k`` holds v(K) measured at each K of
    a K sweep (K -> coefficient). ``verify_at(K)`` reads either (see its docstring). The optional
    ``draft_prefill_ratio`` r = the draft's prompt-pass work / the target's for the same prompt (the
    token-dependent part of a prefill); absent, the draft's prompt pass is priced at c.
    """

    draft_model: str
    k: int
    cost_ratio: Coefficient
    verify_cost_ratio: Coefficient
    fit: FitQuality | None = None
    note: str = ""
    verify_by_k: dict[int, Coefficient] = field(default_factory=dict)
    draft_prefill_ratio: Coefficient | None = None
    # extra batch-1 target decode steps each sequence beyond the first adds to a round at K = k (measured by
    # tripath/calibrate/sweeps/spec_batch.py); absent: a round at batch B is the batch-1 ratio x the batch's decode step
    round_per_sequence: Coefficient | None = None

    def __post_init__(self) -> None:
        check_text("draft_model", self.draft_model)
        check_count("k", self.k, low=1)
        need_coefficient("cost_ratio", self.cost_ratio)
        need_coefficient("verify_cost_ratio", self.verify_cost_ratio)
        check_number("cost_ratio.value", self.cost_ratio.value, positive=True)
        check_number("verify_cost_ratio.value", self.verify_cost_ratio.value, positive=True)
        check_text("note", self.note, nonempty=False)
        for kk, coef in self.verify_by_k.items():
            check_count(f"verify_by_k.{kk}", kk, low=1)
            need_coefficient(f"verify_by_k.{kk}", coef)
            check_number(f"verify_by_k.{kk}.value", coef.value, positive=True)
        object.__setattr__(self, "verify_by_k", dict(sorted(self.verify_by_k.items())))
        if self.draft_prefill_ratio is not None:
            need_coefficient("draft_prefill_ratio", self.draft_prefill_ratio)
            check_number("draft_prefill_ratio.value", self.draft_prefill_ratio.value, positive=True)
        if self.round_per_sequence is not None:
            need_coefficient("round_per_sequence", self.round_per_sequence)
            check_number("round_per_sequence.value", self.round_per_sequence.value)

    @property
    def prefill_ratio(self) -> float:
        """The draft's prompt pass / the target's: ``draft_prefill_ratio`` where measured, else c."""
        ratio = self.draft_prefill_ratio if self.draft_prefill_ratio is not None else self.cost_ratio
        return float(ratio.value)

    def __hash__(self) -> int:
        # verify_by_k is a dict (unhashable); equal sections have equal names and values, so this agrees with ==.
        return hash((self.draft_model, self.k, self.cost_ratio, self.verify_cost_ratio))

    def verify_at(self, k: int) -> float:
        """v(K) in target decode steps for proposal length ``k``.

        Without ``verify_by_k`` (a single-K profile): ``verify_cost_ratio`` at every K. With
        it: the measured value at K; between measured Ks, linear interpolation; below the smallest, the
        line from v(0) = 1 (verifying one token is one decode step) to it; above the largest, the last
        segment's line (never below the largest measured value)."""
        check_count("k", k, low=1)
        if not self.verify_by_k:
            return self.verify_cost_ratio.value
        return interpolate({kk: c.value for kk, c in self.verify_by_k.items()}, k, (0.0, 1.0))

    def to_dict(self) -> dict[str, Any]:
        out = {"draft_model": self.draft_model, "k": self.k, "cost_ratio": self.cost_ratio.to_dict(),
               "verify_cost_ratio": self.verify_cost_ratio.to_dict(),
               "fit": None if self.fit is None else self.fit.to_dict(), "note": self.note}
        if self.verify_by_k:  # only when measured, so single-K profiles keep their exact bytes
            out["verify_by_k"] = {str(kk): c.to_dict() for kk, c in self.verify_by_k.items()}
        if self.draft_prefill_ratio is not None:  # likewise: only when measured
            out["draft_prefill_ratio"] = self.draft_prefill_ratio.to_dict()
        if self.round_per_sequence is not None:  # likewise
            out["round_per_sequence"] = self.round_per_sequence.to_dict()
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
                                  for kk, v in int_keyed(obj.mapping("verify_by_k", {}), source,
                                                          obj.where("verify_by_k"), "a proposal length K").items()}}
        ratio = obj.get("draft_prefill_ratio", None)
        kwargs["draft_prefill_ratio"] = (None if ratio is None else
                                         Coefficient.parse(ratio, source, obj.where("draft_prefill_ratio")))
        per_seq = obj.get("round_per_sequence", None)
        kwargs["round_per_sequence"] = (None if per_seq is None else
                                        Coefficient.parse(per_seq, source, obj.where("round_per_sequence")))
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class TaskAcceptance:
    """Draft-token acceptance for one task at proposal length k.

    mean: the per-token acceptance probability a of the expected-tokens formula;
    per_position: P(draft token i accepted | tokens before it accepted), i = 1..k, or None;
    by_k: optional, the same measured at each K of a K sweep (K -> entry with that k and no by_k of
    its own); when it holds ``k`` it must agree with this entry. ``at(K)`` reads either.
    between_prompt_sd: optional, the standard deviation of the per-token acceptance between prompts of the
    task (the spread of the prompts' own a, their sampling noise removed), over ``n_prompts`` prompts; the
    simulator gives each request its own a from a Beta with this mean and sd. It must be below
    sqrt(mean (1 - mean)), the sd of the widest law on [0, 1] with that mean.
    """

    mean: float
    k: int
    per_position: tuple[float, ...] | None
    source: str
    note: str = ""
    by_k: dict[int, TaskAcceptance] = field(default_factory=dict)
    between_prompt_sd: float | None = None
    n_prompts: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", check_number("mean", self.mean, high=1.0))
        self._check_spread()
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

    def _check_spread(self) -> None:
        if (self.between_prompt_sd is None) != (self.n_prompts is None):
            raise InputError(None, "between_prompt_sd", "between_prompt_sd and n_prompts go together")
        if self.between_prompt_sd is None:
            return
        sd = check_number("between_prompt_sd", self.between_prompt_sd)
        object.__setattr__(self, "between_prompt_sd", sd)
        check_count("n_prompts", self.n_prompts, low=2)
        widest = math.sqrt(self.mean * (1.0 - self.mean))
        if sd > 0 and sd >= widest:
            raise InputError(None, "between_prompt_sd", f"must be below sqrt(mean (1 - mean)) = {widest:.4g} "
                             f"(no law on [0, 1] with mean {self.mean:.4g} is wider), got {sd!r}")

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
        if self.between_prompt_sd is not None:  # likewise: only when measured
            out["between_prompt_sd"], out["n_prompts"] = self.between_prompt_sd, self.n_prompts
        return out

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> TaskAcceptance:
        obj = JsonObject(raw, source, path)
        per_position = obj.get("per_position", None)
        if per_position is not None:
            per_position = tuple(number_list(per_position, source, obj.where("per_position")))
        by_k = int_keyed(obj.mapping("by_k", {}), source, obj.where("by_k"), "a proposal length K")
        kwargs = {"mean": obj.number("mean"), "k": obj.integer("k"), "per_position": per_position,
                  "source": obj.string("source"), "note": obj.string("note", ""),
                  "by_k": {kk: cls.parse(v, source, obj.where(f"by_k.{kk}")) for kk, v in by_k.items()},
                  "between_prompt_sd": obj.number("between_prompt_sd", None),
                  "n_prompts": obj.integer("n_prompts", None)}
        obj.finish()
        return build(cls, source, path, **kwargs)
