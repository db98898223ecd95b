"""Break-even acceptance of speculative decoding: below it, speculation costs more than it gains.

A round of K drafts and one verify pass emits E(K, a) tokens and costs K c + v_eff target decode steps
(c = draft/target step cost ratio); the break-even a* solves E(K, a*) = K c + v_eff, which exists when
1 < K c + v_eff < K + 1 (tripath/core/speculative.py: E and the bisection).

Under load (batch b, context C tokens per sequence) the verify pass stops being free of its
extra tokens: at batch 1 decoding is bound by reading the weights, and verifying K + 1 tokens
costs the profile's v(K) target steps; as the batch grows the b (K + 1) verified tokens become
compute-bound. We model

    v_eff(b) = max(v(K) * decode_ms(b, b C), prefill_ms(b (K + 1), C)) / decode_ms(b, b C)

i.e. the larger of the memory-bound verify and the same tokens costed as a prefill chunk (the
profile's compute model; it slightly over-counts attention inside the chunk). The draft cost
ratio c is the profile's batch-1 value at every batch: an assumption (the draft batches too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tripath.core.speculative import SpecCosts, breakeven_acceptance, latency_ratio
from tripath.profile.profile import Profile

# What the seed documents claim (SEEDS.md): the first, ~60% at K = 5 (c about 0.3); the second,
# below ~50% speculative decoding is slower end to end than the baseline.
SEED_CLAIMS = ((0.60, "000 (choosing a path): below ~60% acceptance draft + verify exceed the gain (K = 5)"),
               (0.50, "003 (stacking pitfalls): below ~50% acceptance end-to-end latency is worse"))


def effective_verify_ratio(profile: Profile, k: int, batch: int, context_tokens: float) -> float:
    """v_eff at this batch and per-sequence context (the module docstring's model)."""
    step = profile.decode_ms(batch, batch * context_tokens)
    memory_bound = profile.verify_cost_ratio(k) * step
    compute_bound = profile.prefill_ms(batch * (k + 1), context_tokens)
    return max(memory_bound, compute_bound) / step


@dataclass(frozen=True)
class BreakEvenRow:
    k: int
    cost_ratio: float
    batch: int
    verify_ratio: float
    acceptance: float | None  # None: never pays

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "cost_ratio": self.cost_ratio, "batch": self.batch,
                "verify_ratio_effective": self.verify_ratio, "breakeven_acceptance": self.acceptance}


@dataclass(frozen=True)
class BreakEven:
    profile_key: str
    profile_source: str
    context_tokens: float
    profile_cost_ratio: float
    rows: tuple[BreakEvenRow, ...]
    tasks: dict[str, dict[str, Any]]  # per task: acceptance and whether it pays at the profile's K, batch 1
    claims: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"profile": {"key": self.profile_key, "source": self.profile_source},
                "numbers_from": f"computed from the '{self.profile_source}' profile's costs "
                                f"(c, v(K), decode and prefill models); not simulated",
                "context_tokens": self.context_tokens, "profile_cost_ratio": self.profile_cost_ratio,
                "rows": [r.to_dict() for r in self.rows], "tasks": self.tasks, "seed_claims": list(self.claims)}


def breakeven(profile: Profile, ks: Sequence[int] = (1, 2, 3, 4, 5, 6, 8),
              cost_ratios: Sequence[float] | None = None, batches: Sequence[int] = (1, 8, 32, 64),
              context_tokens: float = 8192.0) -> BreakEven:
    """The break-even grid over K x c x batch from the profile, per-task verdicts and the seeds' claims."""
    if profile.speculative is None:
        raise ValueError(f"profile {profile.key_str()} has no speculative section: no draft cost to compare")
    c0 = float(profile.speculative.cost_ratio.value)
    ratios = sorted({round(c0, 6), *(cost_ratios or (0.1, 0.2, 0.3, 0.4, 0.5))})
    rows = []
    for k in ks:
        for batch in batches:
            v = effective_verify_ratio(profile, k, batch, context_tokens)
            for c in ratios:
                rows.append(BreakEvenRow(k, c, batch, v, breakeven_acceptance(k, SpecCosts(c, v))))
    k0 = profile.speculative.k
    star = breakeven_acceptance(k0, SpecCosts(c0, effective_verify_ratio(profile, k0, 1, context_tokens)))
    tasks = {}
    for task in sorted(profile.acceptance):
        a = profile.acceptance_for(task, k0).mean
        tasks[task] = {"acceptance": a, "k": k0, "breakeven": star,
                       "pays": star is not None and a > star,
                       "latency_ratio": latency_ratio(k0, a, SpecCosts(c0, profile.verify_cost_ratio(k0)))}
    claims = []
    for level, text in SEED_CLAIMS:
        near = [r for r in rows if r.batch == 1 and r.acceptance is not None and abs(r.acceptance - level) <= 0.05]
        claims.append({"claim": text, "acceptance": level,
                       "profile_breakeven_at_profile_k_batch1": star,
                       "holds_for_profile": star is not None and abs(star - level) <= 0.05,
                       "holds_at_batch1_for": [{"k": r.k, "c": r.cost_ratio, "breakeven": r.acceptance}
                                               for r in near]})
    return BreakEven(profile.key_str(), profile.source, context_tokens, c0, tuple(rows), tasks, tuple(claims))
