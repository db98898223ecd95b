"""How many tokens to speculate: a fixed K, or an adaptive K with fallback to plain decoding.

Cost model (units of one plain target decode step): a round with K drafts costs
K * c (draft steps, c = draft/target per-token cost ratio) + v(K) (one target pass over K+1
tokens, v(K) = verify_base + verify_per_token * K, both measured) and emits on average
E(K, a) = (1 - a^(K+1)) / (1 - a) tokens (Leviathan et al. 2023, eq. 1) when each draft
token is accepted with probability a given the earlier ones.  Plain decoding emits 1 token
per unit, so the predicted speedup of K is S(K) = E(K, a) / (K c + v(K)).

The adaptive controller keeps an exponentially weighted acceptance per sequence and per
engine, picks the K that maximises S, falls back to plain decoding (K = 0) when no K beats
``exit_speedup``, and re-probes every ``probe_interval`` plain rounds; it only resumes when
the best S reaches ``enter_speedup`` (> exit), so it does not flap around break-even.  While
a sequence is fallen back its own evidence fades towards the engine's long-run acceptance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SpecCosts:
    """Measured (or seeded) round costs in units of one plain target decode step."""

    c: float  # draft per-token step / target per-token step
    verify_base: float = 1.0  # v(K) = verify_base + verify_per_token * K
    verify_per_token: float = 0.0

    def __post_init__(self) -> None:
        for name in ("c", "verify_base", "verify_per_token"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"SpecCosts.{name}: must be finite and >= 0, got {value}")
        if self.verify_base <= 0:
            raise ValueError(f"SpecCosts.verify_base: must be > 0, got {self.verify_base}")

    def round_cost(self, k: int) -> float:
        return k * self.c + self.verify_base + self.verify_per_token * k


def expected_tokens(k: int, a: float) -> float:
    """E(K, a) = (1 - a^(K+1)) / (1 - a): tokens emitted by a round of K drafts (K + 1 at a = 1)."""
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"a: acceptance must be in [0, 1], got {a}")
    return float(k + 1) if a == 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def predicted_speedup(k: int, a: float, costs: SpecCosts) -> float:
    """Tokens per unit time of K-token speculation relative to plain decoding (K = 0 gives 1/v(0))."""
    if k == 0:
        return 1.0
    return expected_tokens(k, a) / costs.round_cost(k)


def break_even_acceptance(k: int, costs: SpecCosts) -> float:
    """The a at which S(K, a) = 1 (bisection; E is increasing in a); 1.0 if even a = 1 does not pay."""
    if predicted_speedup(k, 1.0, costs) < 1.0:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if predicted_speedup(k, mid, costs) < 1.0 else (lo, mid)
    return hi


def best_k(a: float, costs: SpecCosts, k_max: int) -> tuple[int, float]:
    """argmax over K in 1..k_max of S(K, a), and that S."""
    return max(((k, predicted_speedup(k, a, costs)) for k in range(1, k_max + 1)), key=lambda t: t[1])


class Controller(Protocol):
    """What SpeculativeEngine asks before a round and tells after it."""

    def choose(self, request_id: int) -> int: ...  # K for this sequence's next round (0: plain decoding)

    def observe(self, request_id: int, num_draft: int, num_accepted: int) -> None: ...

    def forget(self, request_id: int) -> None: ...


class FixedK:
    """Always K (the engine caps it by the tokens a request still needs)."""

    def __init__(self, k: int) -> None:
        if k < 0:
            raise ValueError(f"k: must be >= 0, got {k}")
        self.k = k

    def choose(self, request_id: int) -> int:
        return self.k

    def observe(self, request_id: int, num_draft: int, num_accepted: int) -> None:
        pass

    def forget(self, request_id: int) -> None:
        pass


@dataclass(frozen=True)
class ControllerConfig:
    k_max: int = 8
    decay: float = 0.8  # weight of the past in a sequence's EWMA (per round)
    engine_decay: float = 0.98  # the engine's EWMA: a long-run acceptance that fallen-back sequences revert to
    prior_acceptance: float = 0.6  # engine-level starting estimate before any round is observed
    prior_weight: float = 4.0  # pseudo-trials of the engine estimate inside a sequence's estimate
    exit_speedup: float = 1.0  # fall back when the best predicted speedup drops below this
    enter_speedup: float = 1.05  # resume only at or above this (hysteresis band)
    probe_interval: int = 16  # plain rounds between re-probes in fallback
    probe_k: int = 2

    def __post_init__(self) -> None:
        if self.k_max < 1:
            raise ValueError(f"ControllerConfig.k_max: must be >= 1, got {self.k_max}")
        for name in ("decay", "engine_decay"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"ControllerConfig.{name}: must be in [0, 1), got {getattr(self, name)}")
        if not 0.0 <= self.prior_acceptance <= 1.0:
            raise ValueError(f"ControllerConfig.prior_acceptance: must be in [0, 1], got {self.prior_acceptance}")
        if self.prior_weight < 0:
            raise ValueError(f"ControllerConfig.prior_weight: must be >= 0, got {self.prior_weight}")
        if self.enter_speedup < self.exit_speedup:
            raise ValueError("ControllerConfig.enter_speedup: must be >= exit_speedup (hysteresis)")
        if self.probe_interval < 1 or not 1 <= self.probe_k <= self.k_max:
            raise ValueError("ControllerConfig.probe_interval/probe_k: need interval >= 1 and 1 <= probe_k <= k_max")


@dataclass
class _Ewma:
    """Ratio of two EWMAs: accepted tokens over acceptance trials (accepted + rejections)."""

    accepted: float = 0.0
    trials: float = 0.0

    def update(self, decay: float, num_draft: int, num_accepted: int) -> None:
        self.accepted = decay * self.accepted + num_accepted
        self.trials = decay * self.trials + num_accepted + int(num_accepted < num_draft)

    def fade(self, decay: float) -> None:
        """A round without evidence: old evidence counts less (the estimate drifts to its prior)."""
        self.accepted *= decay
        self.trials *= decay


@dataclass
class _SeqState:
    ewma: _Ewma = field(default_factory=_Ewma)
    speculating: bool = True
    plain_rounds: int = 0


class AdaptiveK:
    """Per-sequence K from the EWMA acceptance and the measured costs; fallback with hysteresis."""

    def __init__(self, config: ControllerConfig, costs: SpecCosts) -> None:
        self.config, self.costs = config, costs
        self.engine = _Ewma()
        self.seqs: dict[int, _SeqState] = {}

    @property
    def engine_acceptance(self) -> float:
        cfg = self.config
        prior = cfg.prior_weight * cfg.prior_acceptance
        return (self.engine.accepted + prior) / (self.engine.trials + cfg.prior_weight)

    def acceptance(self, request_id: int) -> float:
        """The sequence's estimate, shrunk towards the engine's by prior_weight pseudo-trials."""
        st = self.seqs.get(request_id)
        w, a0 = self.config.prior_weight, self.engine_acceptance
        if st is None:
            return a0
        return (st.ewma.accepted + w * a0) / (st.ewma.trials + w) if st.ewma.trials + w > 0 else a0

    def choose(self, request_id: int) -> int:
        st = self.seqs.setdefault(request_id, _SeqState())
        k, speedup = best_k(self.acceptance(request_id), self.costs, self.config.k_max)
        if st.speculating and speedup < self.config.exit_speedup:
            st.speculating, st.plain_rounds = False, 0
        elif not st.speculating and speedup >= self.config.enter_speedup:
            st.speculating = True
        if st.speculating:
            return k
        # fallen back: the sequence's own (bad) evidence fades, so its estimate drifts back to the
        # engine's long-run acceptance; a run of rejections does not exclude it for good
        st.ewma.fade(self.config.decay)
        st.plain_rounds += 1
        if st.plain_rounds > self.config.probe_interval:  # re-probe: acceptance may have changed
            st.plain_rounds = 0
            return self.config.probe_k
        return 0

    def observe(self, request_id: int, num_draft: int, num_accepted: int) -> None:
        if num_draft == 0:
            return
        st = self.seqs.setdefault(request_id, _SeqState())
        st.ewma.update(self.config.decay, num_draft, num_accepted)
        self.engine.update(self.config.engine_decay, num_draft, num_accepted)

    def forget(self, request_id: int) -> None:
        self.seqs.pop(request_id, None)
