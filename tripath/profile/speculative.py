"""Profile sections for speculative decoding: draft/verify costs per proposal length K, per-task acceptance.

Optional in a profile; frozen dataclasses checked when built and read and written by the profile codec
(tripath/profile/codec.py), like ``tripath/profile/schema.py``. Re-exported by ``tripath/profile/sections.py``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from tripath.core.errors import InputError
from tripath.profile.codec import Section, json_field, note_field
from tripath.profile.cost_model import Coefficient, FitQuality, coefficient
from tripath.profile.fields import (
    MAX_COST_RATIO,
    MAX_STEP_MS,
    VALUE_SOURCES,
    check_count,
    count,
    each,
    entries,
    number,
    text,
)


def interpolate(points: dict[int, float], k: int, anchor: tuple[float, float] | None) -> float:
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


def _step_points(field: str, points: object) -> tuple[tuple[int, float], ...]:
    """At least two (tokens >= 1, ms > 0) pairs, tokens strictly increasing (measured medians may dip: kept)."""
    rows = tuple(points)  # type: ignore[arg-type]
    if len(rows) < 2:
        raise InputError(None, field, f"must hold at least 2 [tokens, ms] points, got {len(rows)}")
    for i, (tokens, ms) in enumerate(rows):
        check_count(f"{field}[{i}][0]", tokens, low=1)
        number(positive=True, high=MAX_STEP_MS)(f"{field}[{i}][1]", ms)
        if i and tokens <= rows[i - 1][0]:
            raise InputError(None, f"{field}[{i}][0]", f"tokens must increase, got {tokens} after {rows[i - 1][0]}")
    return tuple((int(t), float(ms)) for t, ms in rows)


@dataclass(frozen=True)
class StepCurve(Section):
    """One model's iteration on the GPU: the non-attention time by batched tokens T, plus attention per cached
    token read.

    points: (T, ms) of the whole iteration without attention (linear layers, norms, tensor-parallel
    all-reduces, embedding, at full depth), piecewise linear between points; below the first point its value,
    beyond the last the last segment's line (the compute-bound regime is linear in T). attention_per_token:
    ms per cached token one pass reads (decode attention is memory-bound: each cached K/V is read once per
    pass, whatever the number of queries). ``source`` labels the points (VALUE_SOURCES).
    """

    model: str = json_field(text())
    tp: int = json_field(count(1))
    points: tuple[tuple[int, float], ...] = json_field(_step_points, shape="a pair [tokens, ms]")
    attention_per_token: Coefficient = json_field(coefficient(positive=True, high=MAX_STEP_MS, unit="ms/token"))
    source: str = json_field(text(allowed=VALUE_SOURCES))
    note: str = note_field()
    _tokens: tuple[int, ...] = field(init=False, repr=False, compare=False)  # the points' T, for bisect

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_tokens", tuple(t for t, _ in self.points))

    def linear_ms(self, tokens: float) -> float:
        """The non-attention iteration time at ``tokens`` batched tokens (the points' piecewise-linear curve)."""
        xs = self._tokens
        pts = self.points
        if tokens <= xs[0]:
            return pts[0][1]
        i = min(bisect.bisect_left(xs, tokens), len(xs) - 1)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)

    def pass_ms(self, tokens: float, context: float) -> float:
        """One forward pass over ``tokens`` batched tokens that reads ``context`` cached tokens in all."""
        return self.linear_ms(tokens) + self.attention_per_token.value * context


@dataclass(frozen=True)
class RoundCosts(Section):
    """A speculative round's cost by batch B, total context S (cached tokens over the batch) and K, on a GPU.

        verify_ms(B, K, S) = target(B (K+1) tokens) + target attention x S   (K+1 queries read the KV once)
        draft_ms(B, S)     = draft(B tokens) + draft attention x S
        c(B, S)    = draft_ms(B, S) / verify_ms(B, 0, S)
        v(K, B, S) = verify_ms(B, K, S) / verify_ms(B, 0, S)

    A round costs (K c + v) plain target decode steps; verify_ms(B, 0, S) is that plain step on these curves.
    """

    target: StepCurve
    draft: StepCurve
    note: str = note_field()

    def verify_ms(self, batch: float, k: int, context: float) -> float:
        """The target's pass over B (K+1) tokens reading S cached tokens (K = 0: a plain decode step)."""
        return self.target.pass_ms(batch * (k + 1), context)

    def draft_ms(self, batch: float, context: float) -> float:
        """One draft step of B sequences (one token each) reading S cached tokens."""
        return self.draft.pass_ms(batch, context)

    def cost_ratio(self, batch: float, context: float) -> float:
        """c(B, S): one draft step / one plain target decode step."""
        return self.draft_ms(batch, context) / self.verify_ms(batch, 0, context)

    def verify_ratio(self, k: int, batch: float, context: float) -> float:
        """v(K, B, S): the verify pass over K+1 tokens per sequence / one plain target decode step."""
        return self.verify_ms(batch, k, context) / self.verify_ms(batch, 0, context)

    def round_factor(self, k: int, batch: float, context: float, draft: bool = True) -> float:
        """K c(B, S) + v(K, B, S) in plain target decode steps; 1 at K = 0; without ``draft`` (prompt lookup: no
        draft model) v alone."""
        if k == 0:
            return 1.0
        plain = self.verify_ms(batch, 0, context)
        drafts = k * self.draft_ms(batch, context) if draft else 0.0
        return (drafts + self.verify_ms(batch, k, context)) / plain


# a round's cost ratios: target decode steps, > 0 and within fields.py's MAX_COST_RATIO
_RATIO = coefficient(positive=True, high=MAX_COST_RATIO)


@dataclass(frozen=True)
class Speculative(Section):
    """Draft model and the cost of one speculative round, in units of one target decode step.

    cost_ratio c = draft per-token cost / target per-token cost; verify_cost_ratio v = cost of the
    verify pass over K+1 tokens / one target decode step. A round costs (K*c + v) target steps.
    ``verify_cost_ratio`` is v at ``k``; the optional ``verify_by_k`` holds v(K) measured at each K of
    a K sweep (K -> coefficient). ``verify_at(K)`` reads either (see its docstring). The optional
    ``draft_prefill_ratio`` r = the draft's prompt-pass work / the target's for the same prompt (the
    token-dependent part of a prefill); absent, the draft's prompt pass is priced at c.
    """

    draft_model: str = json_field(text())
    k: int = json_field(count(1))
    cost_ratio: Coefficient = json_field(_RATIO)
    verify_cost_ratio: Coefficient = json_field(_RATIO)
    fit: FitQuality | None = None
    note: str = note_field()
    # written only when measured, so single-K profiles keep their exact bytes (likewise the two below)
    verify_by_k: dict[int, Coefficient] = json_field(entries(_RATIO, counted=True),
                                                     default_factory=dict, omit=True, key="a proposal length K")
    draft_prefill_ratio: Coefficient | None = json_field(_RATIO, default=None, omit=True)
    # extra batch-1 target decode steps each sequence beyond the first adds to a round at K = k (measured by
    # tripath/calibrate/sweeps/spec_batch.py); absent: a round at batch B is the batch-1 ratio x the batch's decode step
    round_per_sequence: Coefficient | None = json_field(coefficient(high=MAX_COST_RATIO), default=None, omit=True)
    # GPU profiles: the round's cost by batch and context (RoundCosts); absent, the batch-1 ratios above price
    # every batch. With it the scalars hold its batch-1 values (the adaptive controller and break-even read them)
    round_costs: RoundCosts | None = json_field(default=None, omit=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.round_costs is not None and self.round_per_sequence is not None:
            raise InputError(None, "round_costs", "round_costs and round_per_sequence both price a round at "
                             "batch > 1: give one")

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

        Without ``verify_by_k`` (a single-K profile): ``verify_cost_ratio`` at any K. With
        it: the measured value at K; between measured Ks, linear interpolation; below the smallest, the
        line from v(0) = 1 (verifying one token is one decode step) to it; above the largest, the last
        segment's line (never below the largest measured value)."""
        check_count("k", k, low=1)
        if not self.verify_by_k:
            return self.verify_cost_ratio.value
        return interpolate({kk: c.value for kk, c in self.verify_by_k.items()}, k, (0.0, 1.0))


# A scenario's own acceptance table (tripath/simulator/paths/run_costs.py) labels the entries it puts in a run's
# profile so.
SCENARIO_SOURCE = "scenario"
ACCEPTANCE_SOURCES = (*VALUE_SOURCES, SCENARIO_SOURCE)


@dataclass(frozen=True)
class TaskAcceptance(Section):
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

    mean: float = json_field(number(high=1.0))
    k: int = json_field(count(1))
    per_position: tuple[float, ...] | None = json_field(each(number(high=1.0)))
    source: str = json_field(text(allowed=ACCEPTANCE_SOURCES))
    note: str = note_field()
    # written only when measured, so single-K profiles keep their exact bytes (likewise the spread)
    by_k: dict[int, TaskAcceptance] = json_field(default_factory=dict, omit=True, key="a proposal length K")
    between_prompt_sd: float | None = json_field(number(), default=None, omit=True)
    n_prompts: int | None = json_field(count(2), default=None, omit=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_spread()
        if self.per_position is not None and len(self.per_position) != self.k:
            raise InputError(None, "per_position", f"must have k = {self.k} entries, got {len(self.per_position)}")
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
        sd = self.between_prompt_sd
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
