"""Speculative decoding's cost model and the K controllers, shared by the engine and the simulator.

Cost model (units of one plain target decode step): a round with K drafts costs
K c (draft steps, c = draft/target per-token cost ratio) + v(K) (one target pass over K + 1
tokens) and emits on average E(K, a) = (1 - a^(K+1)) / (1 - a) tokens (Leviathan et al. 2023,
eq. 1) when each draft token is accepted with probability a given the earlier ones.  Plain
decoding emits 1 token per unit, so the predicted speedup of K is S(K, a) = E(K, a) / (K c + v(K))
and speculation pays above the break-even acceptance a*, where S(K, a*) = 1.

The adaptive controller keeps an exponentially weighted acceptance per sequence and per
engine, picks the K that maximises S, falls back to plain decoding (K = 0) when no K beats
``exit_speedup``, and re-probes every ``probe_interval`` plain rounds; it only resumes when
the best S reaches ``enter_speedup`` (> exit), so it does not flap around break-even.  While
a sequence is fallen back its own evidence fades towards the engine's long-run acceptance.
Pure Python (no torch): the simulator runs the engine's rule itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


def expected_tokens(k: int, a: float) -> float:
    """E(K, a) = (1 - a^(K+1)) / (1 - a): tokens one round of K drafts emits (the verify pass adds its own).

    Drafts are accepted with probability a each until the first rejection; a = 1 gives K + 1 (the limit),
    a = 0 gives 1.
    """
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"a: acceptance must be in [0, 1], got {a}")
    return float(k + 1) if a == 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def round_cost(k: int, c: float, verify_base: float, verify_per_token: float = 0.0) -> float:
    """Target decode steps of one round: K c + v(K), v(K) = verify_base + verify_per_token K; 1 at K = 0.

    A measured v(K) at this K is ``verify_base`` with no per-token term; K = 0 is a plain decode step.
    """
    if k == 0:
        return 1.0
    return k * c + verify_base + verify_per_token * k


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
        """K c + v(K) with these costs (``round_cost``)."""
        return round_cost(k, self.c, self.verify_base, self.verify_per_token)


def predicted_speedup(k: int, a: float, costs: SpecCosts) -> float:
    """S(K, a) = E(K, a) / (K c + v(K)): tokens per unit time relative to plain decoding; 1 at K = 0."""
    if k == 0:
        return 1.0
    return expected_tokens(k, a) / costs.round_cost(k)


def latency_ratio(k: int, a: float, costs: SpecCosts) -> float:
    """(K c + v(K)) / E(K, a): per-token latency with speculation over plain decoding's (1 / S); < 1 pays."""
    return costs.round_cost(k) / expected_tokens(k, a)


def best_k(speedup: Callable[[int], float], k_max: int) -> tuple[int, float]:
    """argmax over K in 1..k_max of ``speedup(K)`` (the smallest K on ties), and that speedup."""
    return max(((k, speedup(k)) for k in range(1, k_max + 1)), key=lambda t: t[1])


def breakeven_acceptance(k: int, costs: SpecCosts, tol: float = 1e-13) -> float | None:
    """a* with E(K, a*) = K c + v(K), by bisection (E rises from 1 at a = 0 to K + 1 at a = 1).

    0.0 when speculation pays even at a = 0 (K c + v(K) <= 1), None when it never pays (>= K + 1).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    target = costs.round_cost(k)
    if target <= 1.0:
        return 0.0
    if target >= k + 1:
        return None
    return acceptance_for_tokens(k, target, tol)


def acceptance_for_tokens(k: int, tokens: float, tol: float = 1e-13) -> float:
    """The a with E(K, a) = ``tokens`` (1 <= tokens <= K + 1), by bisection: E's inverse in a.

    Reads a per-token acceptance off a published mean accepted length (tokens per round, bonus included).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not 1.0 <= tokens <= k + 1:
        raise ValueError(f"tokens: E(K, a) lies in [1, K + 1] = [1, {k + 1}], got {tokens}")
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if expected_tokens(k, mid) < tokens:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


class Controller(Protocol):
    """What speculative decoding (tripath/engine/speculative/decoding.py) asks before a round and tells after it."""

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
        a, costs = self.acceptance(request_id), self.costs
        k, speedup = best_k(lambda kk: predicted_speedup(kk, a, costs), self.config.k_max)
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
