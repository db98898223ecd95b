"""Speculative decoding in the simulator: K per sequence, accepted tokens drawn, cost of a round.

One speculative round per decoding sequence per iteration. The batch runs its draft model for
K_max = max_i K_i steps together and then one target verify pass over K_max + 1 tokens, so the
decode part of the iteration costs (Leviathan et al. 2023; profile.speculative)

    round_ms = (K_max * c + v(K_max)) * decode_ms(B, S)

where c is the draft/target per-token cost ratio and v(K) the verify pass over K+1 tokens in
target decode steps (profile.verify_cost_ratio(K), per K where the profile measured it). A round
with K_max = 0 (every sequence fallen back, or one token left) is a plain decode step. Where the
profile has speculative.round_costs (GPU profiles: the draft's and the target's iteration by batched
tokens, tripath/profile/speculative.py RoundCosts), c and v depend on the batch B and the priced
context S of the iteration: round_ms = (K_max c(B, S) + v(K_max, B, S)) x decode_ms(B, S), so a
verify pass over B (K_max + 1) tokens turns compute-bound at large B; plain decoding is unchanged.

Sequence i emits accepted_i + 1 tokens: draft token j is accepted with the task's conditional
probability p_j (the profile's per-position acceptance where it has it, else its mean a for every
j), the first rejection ends the round, and the target's token after it is always emitted. With
i.i.d. a the mean is E = (1 - a^(K+1)) / (1 - a). Where the profile measured how a varies between
prompts of a task (``between_prompt_sd``), each request draws its own a once from a Beta with the
task's mean and that sd and scales its p_j to it (tripath/simulator/paths/acceptance_spread.py); without it every
request has the task's p_j. K_i is capped at remaining_i - 1 so a sequence
never emits past its output length. KV compression lowers each p_j by its acceptance_drop.

The adaptive policy is tripath/core/speculative.py's AdaptiveK itself (the same rule as the
engine: EWMA acceptance per sequence and per replica, best K by predicted speedup, fallback with
hysteresis). A scenario's fallback_acceptance a_f maps to the controller's exit speedup
S*(a_f) = max_K E(K, a_f) / (K c + v(K)): S* rises with a, so "S* < S*(a_f)" is "a < a_f".

The draft's prompt pass (tripath/engine/speculative/proposers.py::DraftModelProposer): the engine's prefill
iteration runs the target alone and emits the first token; the draft first sees a sequence in the
first draft pass of the sequence's first round with K_i > 0, which feeds every token the draft has
not seen yet (prompt + first token), batched with the other sequences' one-token draft steps.
After a round the draft keeps context + min(K_i - 1, accepted_i) tokens, so the next round feeds 1
token (2 after a full accept): a decode-like pass, priced by K c. A gap of more than 2 tokens (the
first round, or the first after plain rounds of the adaptive controller) is a prefill of the draft,
which ``catch_up`` reports as (tokens, tokens already seen) and PathStep prices at r x the
target's prefill work for that chunk, r = ``prefill_ratio``: the profile's measured
speculative.draft_prefill_ratio, else c (a decode-step ratio, which overstates a prompt pass: per-layer
fixed costs weigh less there; docs/simulator_paths.md). That is the engine's
schedule, so it applies to profiles calibrated on it (source kind "measured"); the seed and
published profiles describe vLLM-style engines, whose draft prefills in the target's prefill step
(``lazy_draft`` False: PathStep charges the prefill x (1 + c) there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tripath.core.speculative import AdaptiveK, ControllerConfig, SpecCosts, best_k, predicted_speedup, round_cost
from tripath.profile.engine_rules import follows_tripath_engine
from tripath.profile.profile import Profile
from tripath.profile.sections import TaskAcceptance
from tripath.profile.speculative import RoundCosts
from tripath.simulator.paths.acceptance_spread import AcceptanceSpread, mean_survival, replica_key
from tripath.simulator.scenario.strategy import PROMPT_LOOKUP_PREFIX, SpeculativeSpec
from tripath.simulator.step_model import DecodeBatch


@dataclass(frozen=True)
class SpeculativeParams:
    """The profile's speculative numbers resolved for a scenario's [strategy.speculative] and tasks, once per run."""

    spec: SpeculativeSpec
    k: int  # the scenario's K, else the profile's speculative.k
    prompt_lookup: bool
    c: float  # draft/target per-token cost ratio; 0 for prompt lookup (no draft model pass)
    prefill_ratio: float  # the draft's prompt pass / the target's (measured, else c); 0 for prompt lookup
    lazy_draft: bool  # the engine feeds the prompt to the draft in the first round (tripath/profile/engine_rules.py)
    verify: tuple[float, ...]  # v(K) for K = 0..k, v(0) = 1 (a plain step)
    per_sequence: float  # round_per_sequence (0 without it, or for prompt lookup)
    per_sequence_k: int  # the profile's K, at which round_per_sequence was measured
    acceptance: tuple[tuple[TaskAcceptance, ...], ...]  # [K - 1][task]: each task's entry at K = 1..k
    round_costs: RoundCosts | None = None  # c(B, S), v(K, B, S) where the profile has them (GPU profiles)

    @classmethod
    def from_profile(cls, spec: SpeculativeSpec, profile: Profile, tasks: Sequence[str]) -> SpeculativeParams:
        section = profile.speculative
        assert section is not None, "check_against_profile: a speculative strategy needs the profile's section"
        k = spec.k or section.k
        lookup = spec.proposer == "prompt_lookup"
        keys = [PROMPT_LOOKUP_PREFIX + task if lookup else task for task in tasks]
        per_seq = getattr(section, "round_per_sequence", None)
        return cls(
            spec, k, lookup,
            0.0 if lookup else float(section.cost_ratio.value),
            0.0 if lookup else float(section.prefill_ratio),
            not lookup and follows_tripath_engine(profile),
            (1.0, *(profile.verify_cost_ratio(j) for j in range(1, k + 1))),
            # prompt lookup has no draft pass but the coefficient was measured with one: left out there too
            0.0 if per_seq is None or lookup else float(per_seq.value),
            int(section.k),
            tuple(tuple(profile.acceptance_for(key, j) for key in keys) for j in range(1, k + 1)),
            getattr(section, "round_costs", None),
        )

    def round_factor(self, k: int, batch: int, context: float) -> float:
        """K c + v(K) in decode steps of this batch: c(B, S), v(K, B, S) with round_costs (prompt lookup: v
        alone), else the profile's batch-1 ratios (round_cost, bit for bit as before); 1 at K = 0."""
        if self.round_costs is None:
            return round_cost(k, self.c, self.verify[k])
        return self.round_costs.round_factor(k, batch, context, draft=not self.prompt_lookup)

    def entries(self, k: int) -> tuple[TaskAcceptance, ...]:
        """Each task's acceptance entry at proposal length k (1 <= k <= self.k)."""
        return self.acceptance[k - 1]


def acceptance_table(params: SpeculativeParams, k: int, drop: float) -> np.ndarray:
    """p[task, j] for j = 0..k-1: P(draft token j+1 accepted | earlier ones accepted), after the drop."""
    return np.clip(_raw_table(params.entries(k), k) - drop, 0.0, 1.0)


def expected_survival(params: SpeculativeParams, k: int, drop: float) -> np.ndarray:
    """C[t, j-1] = P(at least j of k drafts accepted), averaged over requests where the profile has a spread
    (the per-request draws' mean law); else the cumprod of ``acceptance_table``, bit for bit."""
    entries = params.entries(k)
    table = _raw_table(entries, k)
    means, sds = _spreads(entries)
    if not (sds > 0).any():
        return np.cumprod(np.clip(table - drop, 0.0, 1.0), axis=1)
    return mean_survival(means, sds, table, drop)


def _spreads(entries: Sequence[TaskAcceptance]) -> tuple[np.ndarray, np.ndarray]:
    """(mean a, between-prompt sd) per task; sd 0 where absent, or where a = 0 or 1 (no law spreads around it)."""
    sds = np.array([float(getattr(e, "between_prompt_sd", None) or 0.0) for e in entries])
    means = np.array([float(e.mean) for e in entries])
    sds[(means <= 0.0) | (means >= 1.0)] = 0.0
    return means, sds


def _raw_table(entries: Sequence[TaskAcceptance], k: int) -> np.ndarray:
    table = np.empty((len(entries), k))
    for row, entry in enumerate(entries):
        probs = list(entry.per_position or ())[:k]
        probs += [entry.mean] * (k - len(probs))  # positions beyond the measured K: the mean a
        table[row] = probs
    return table


def acceptance_spread(entries: Sequence[TaskAcceptance], k: int, drop: float, rng: np.random.Generator
                      ) -> AcceptanceSpread | None:
    """Per-request acceptance where some task's entry has a between-prompt spread; None (one a per task,
    the task's own) where none has."""
    means, sds = _spreads(entries)
    if not (sds > 0).any():
        return None
    return AcceptanceSpread(means, sds, _raw_table(entries, k), drop, replica_key(rng))


def linear_verify(params: SpeculativeParams, k: int) -> tuple[float, float]:
    """(verify_base, verify_per_token) of the controller's v(K) line through v(1) and v(k)."""
    v1, vk = params.verify[1], params.verify[k]
    per_token = (vk - v1) / (k - 1) if k > 1 else 0.0
    base = v1 - per_token
    return (base, per_token) if base > 0 else (vk, 0.0)


class SpeculativePhysics:
    """K choice, acceptance draws and round cost for one replica (state: the adaptive controller)."""

    def __init__(self, params: SpeculativeParams, rng: np.random.Generator, acceptance_drop: float = 0.0) -> None:
        spec = params.spec
        self.k = params.k
        self.prompt_lookup = params.prompt_lookup
        # Prompt lookup proposes by matching n-grams of the context: no draft model pass (c = 0).
        self.c = params.c
        # the draft's prompt pass / the target's: measured where the profile has it, else c (its decode ratio)
        self.prefill_ratio = params.prefill_ratio
        self.lazy_draft = params.lazy_draft
        self._params = params
        # measured profiles' extra per additional sequence in a round (batch_extra); prompt lookup: 0, its verify
        # stays batch-1
        self.per_sequence = params.per_sequence
        self.per_sequence_k = params.per_sequence_k  # the K it was measured at
        entries = params.entries(self.k)
        self.probs = np.clip(_raw_table(entries, self.k) - acceptance_drop, 0.0, 1.0)
        self.survival = np.cumprod(self.probs, axis=1)  # C[t, j-1] = P(at least j drafts accepted)
        # -C: non-decreasing along j (a cumulative product of probabilities never grows), for draw's binary search
        self._descending = -self.survival
        # each request its own a where the profile measured the between-prompt spread (acceptance_spread.py)
        self.spread = acceptance_spread(entries, self.k, acceptance_drop, rng)
        self._positions = np.arange(self.k)
        self.rng = rng
        self.controller: AdaptiveK | None = None
        self._draft_seen: dict[int, int] = {}  # request -> tokens with draft K/V (absent: none yet)
        if spec.adaptive:
            base, per_token = linear_verify(params, self.k)
            costs = SpecCosts(self.c, base, per_token)
            exit_speedup = 1.0  # the engine's default: fall back where no K beats plain decoding
            if spec.fallback_acceptance is not None:
                a_f = spec.fallback_acceptance
                exit_speedup = best_k(lambda k: predicted_speedup(k, a_f, costs), self.k)[1]
            default = ControllerConfig()
            config = ControllerConfig(k_max=self.k, exit_speedup=exit_speedup,
                                      enter_speedup=exit_speedup * default.enter_speedup / default.exit_speedup,
                                      probe_k=min(default.probe_k, self.k))
            self.controller = AdaptiveK(config, costs)

    def round_factor(self, k_max: int, batch: int = 1, context: float = 0.0) -> float:
        """Cost of the batch's round in its own target decode steps: K c + v(K); 1 for a plain step. With the
        profile's round_costs, c(B, S) and v(K, B, S) at this batch and priced context (SpeculativeParams)."""
        return self._params.round_factor(k_max, batch, context)

    def batch_extra(self, batch: int, k_max: int) -> float:
        """What sequences beyond the first add to a round, in batch-1 target decode steps: (B - 1) w K / k.

        w = the profile's round_per_sequence (measured at its K = k by tripath/calibrate/sweeps/spec_batch.py): each
        sequence's K draft tokens, K + 1 verify rows and bookkeeping, which the batch-1 ratio K c + v(K) times
        the batch's decode step leaves out. Scaled by K_max / k: that work is per proposed token (an assumption
        between measured Ks; docs/speculative.md). 0 without the coefficient (the rule before) or at K_max = 0.
        """
        if self.per_sequence == 0.0 or k_max == 0 or batch <= 1:
            return 0.0
        return (batch - 1) * self.per_sequence * k_max / self.per_sequence_k

    def choose(self, decodes: DecodeBatch) -> np.ndarray:
        """K per sequence: fixed or adaptive, capped so it never emits past its output length."""
        cap = np.array(decodes.remaining, dtype=np.int64) - 1
        if self.controller is None:
            return np.minimum(cap, self.k)
        choose = self.controller.choose
        return np.minimum(cap, np.array([choose(r) for r in decodes.requests], dtype=np.int64))

    def draw(self, decodes: DecodeBatch, ks: np.ndarray, k_max: int | None = None) -> np.ndarray:
        """Accepted draft tokens per sequence, by inverting the distribution of the run of acceptances.

        P(accepted >= j) = p_1 ... p_j =: C_j, decreasing in j, so with one uniform u per sequence
        accepted = #{j <= K_i : u < C_j} has exactly the law of "leading successes among K_i
        Bernoulli(p_j) trials", with one draw per sequence per round instead of K. ``k_max``: max(ks), or None.
        """
        if k_max is None:  # the caller's max(ks), where it has it
            k_max = int(ks.max()) if len(ks) else 0
        if k_max == 0:
            accepted = np.zeros(len(decodes), dtype=np.int64)
        else:
            u = self.rng.random(len(decodes))
            if self.spread is None and self._descending.shape[0] == 1:
                # one task: C is non-increasing, so the j with u < C_j are a prefix, and accepted = min(K_i,
                # #{j <= k_max : C_j > u}), the count a binary search on -C gives (the same integers, fewer calls)
                accepted = np.minimum(self._descending[0, :k_max].searchsorted(-u), ks)
            else:
                if self.spread is None:
                    survival = self.survival[decodes.tasks, :k_max]
                else:  # each request's own run-length law (its own a)
                    survival = self.spread.survival(decodes.requests, decodes.tasks, k_max)
                runs = u[:, None] < survival
                runs &= self._positions[:k_max] < ks[:, None]  # positions past K_i were never proposed
                accepted = runs.sum(axis=1, dtype=np.int64)
        if self.spread is not None:
            for request, remaining, acc in zip(decodes.requests, decodes.remaining, accepted.tolist(), strict=True):
                if acc + 1 >= remaining:  # finished: its row is not needed again
                    self.spread.forget(request)
        return accepted

    def catch_up(self, decodes: DecodeBatch, ks: np.ndarray) -> list[tuple[int, int]]:
        """(tokens fed, tokens the draft already had) of each draft prefill in this round's first draft pass.

        A sequence proposing (K_i > 0) feeds the draft context_i - seen_i tokens; gaps of 1-2 tokens are the
        decode-like pass K c already prices, longer gaps (the first round: the whole prompt + first token)
        are prefills. Nothing without ``lazy_draft`` (prompt lookup has no draft; vLLM-style: prefilled already).
        """
        if not self.lazy_draft:
            return []
        seen = self._draft_seen
        out = []
        for request, context, k in zip(decodes.requests, decodes.contexts, ks.tolist(), strict=True):
            if k > 0:
                done = seen.get(request, 0)
                if context - done > 2:
                    out.append((context - done, done))
        return out

    def commit(self, decodes: DecodeBatch, ks: np.ndarray, accepted: np.ndarray) -> None:
        """What the draft keeps after the round (DraftModelProposer.commit): context + min(K_i - 1, accepted_i)
        tokens where it proposed, unchanged where it did not; finished sequences are forgotten."""
        if not self.lazy_draft:
            return
        seen = self._draft_seen
        for request, context, remaining, k, acc in zip(decodes.requests, decodes.contexts, decodes.remaining,
                                                       ks.tolist(), accepted.tolist(), strict=True):
            if acc + 1 >= remaining:
                seen.pop(request, None)
            elif k > 0:
                seen[request] = context + min(k - 1, acc)

    def observe(self, decodes: DecodeBatch, ks: np.ndarray, accepted: np.ndarray) -> None:
        """Tell the adaptive controller what each round did; forget sequences that just finished."""
        if self.controller is None:
            return
        controller = self.controller
        for request, remaining, k, acc in zip(decodes.requests, decodes.remaining, ks.tolist(), accepted.tolist(),
                                              strict=True):
            controller.observe(request, k, acc)
            if acc + 1 >= remaining:
                controller.forget(request)
