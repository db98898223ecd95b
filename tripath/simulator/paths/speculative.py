"""Speculative decoding in the simulator: K per sequence, accepted tokens drawn, cost of a round.

One speculative round per decoding sequence per iteration. The batch runs its draft model for
K_max = max_i K_i steps together and then one target verify pass over K_max + 1 tokens, so the
decode part of the iteration costs (Leviathan et al. 2023; profile.speculative)

    round_ms = (K_max * c + v(K_max)) * decode_ms(B, S)

where c is the draft/target per-token cost ratio and v(K) the verify pass over K+1 tokens in
target decode steps (profile.verify_cost_ratio(K), per K where the profile measured it). A round
with K_max = 0 (every sequence fallen back, or one token left) is a plain decode step.

Sequence i emits accepted_i + 1 tokens: draft token j is accepted with the task's conditional
probability p_j (the profile's per-position acceptance where it has it, else its mean a for every
j), the first rejection ends the round, and the target's token after it is always emitted. With
i.i.d. a the mean is E = (1 - a^(K+1)) / (1 - a). Where the profile measured how a varies between
prompts of a task (``between_prompt_sd``), each request draws its own a once from a Beta with the
task's mean and that sd and scales its p_j to it (tripath/simulator/paths/acceptance_spread.py); without it every
request has the task's p_j. K_i is capped at remaining_i - 1 so a sequence
never emits past its output length. KV compression lowers each p_j by its acceptance_drop.

The adaptive policy is tripath/engine/speculative/controller.py's AdaptiveK itself (the same rule as the
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
fixed costs weigh less there; docs/simulator_paths.md). That is real_engine's
schedule, so it applies to profiles calibrated on it (source kind "measured"); the seed and
published profiles describe vLLM-style engines, whose draft prefills in the target's prefill step
(``lazy_draft`` False: PathStep charges the prefill x (1 + c) there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# the controller is pure Python (no torch): importing it keeps one rule for engine and simulator.
from tripath.engine.speculative.controller import AdaptiveK, ControllerConfig, SpecCosts, best_k
from tripath.profile.engine_rules import follows_real_engine
from tripath.simulator.paths.acceptance_spread import AcceptanceSpread, mean_survival, replica_key
from tripath.simulator.scenario.strategy import PROMPT_LOOKUP_PREFIX, SpeculativeSpec
from tripath.simulator.step_model import DecodeBatch


def acceptance_entries(profile: Any, tasks: Sequence[str], k: int, prompt_lookup: bool) -> list[Any]:
    """The profile's acceptance entry of each task at proposal length k (TaskAcceptance)."""
    return [profile.acceptance_for(PROMPT_LOOKUP_PREFIX + task if prompt_lookup else task, k) for task in tasks]


def acceptance_table(profile: Any, tasks: Sequence[str], k: int, prompt_lookup: bool,
                     drop: float) -> np.ndarray:
    """p[task, j] for j = 0..k-1: P(draft token j+1 accepted | earlier ones accepted), after the drop."""
    return np.clip(_raw_table(acceptance_entries(profile, tasks, k, prompt_lookup), k) - drop, 0.0, 1.0)


def expected_survival(profile: Any, tasks: Sequence[str], k: int, prompt_lookup: bool, drop: float) -> np.ndarray:
    """C[t, j-1] = P(at least j of k drafts accepted), averaged over requests where the profile has a spread
    (the per-request draws' mean law); else the cumprod of ``acceptance_table``, bit for bit."""
    entries = acceptance_entries(profile, tasks, k, prompt_lookup)
    table = _raw_table(entries, k)
    means, sds = _spreads(entries)
    if not (sds > 0).any():
        return np.cumprod(np.clip(table - drop, 0.0, 1.0), axis=1)
    return mean_survival(means, sds, table, drop)


def _spreads(entries: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(mean a, between-prompt sd) per task; sd 0 where absent, or where a = 0 or 1 (no law spreads around it)."""
    sds = np.array([float(getattr(e, "between_prompt_sd", None) or 0.0) for e in entries])
    means = np.array([float(e.mean) for e in entries])
    sds[(means <= 0.0) | (means >= 1.0)] = 0.0
    return means, sds


def _raw_table(entries: Sequence[Any], k: int) -> np.ndarray:
    table = np.empty((len(entries), k))
    for row, entry in enumerate(entries):
        probs = list(entry.per_position or ())[:k]
        probs += [entry.mean] * (k - len(probs))  # positions beyond the measured K: the mean a
        table[row] = probs
    return table


def acceptance_spread(entries: Sequence[Any], k: int, drop: float, rng: np.random.Generator
                      ) -> AcceptanceSpread | None:
    """Per-request acceptance where some task's entry has a between-prompt spread; None (one a per task)
    where none has."""
    means, sds = _spreads(entries)
    if not (sds > 0).any():
        return None
    return AcceptanceSpread(means, sds, _raw_table(entries, k), drop, replica_key(rng))


def linear_verify(profile: Any, k: int) -> tuple[float, float]:
    """(verify_base, verify_per_token) of the controller's v(K) line through v(1) and v(k)."""
    v1, vk = profile.verify_cost_ratio(1), profile.verify_cost_ratio(k)
    per_token = (vk - v1) / (k - 1) if k > 1 else 0.0
    base = v1 - per_token
    return (base, per_token) if base > 0 else (vk, 0.0)


class SpeculativePhysics:
    """K choice, acceptance draws and round cost for one replica (state: the adaptive controller)."""

    def __init__(self, spec: SpeculativeSpec, profile: Any, tasks: Sequence[str], rng: np.random.Generator,
                 acceptance_drop: float = 0.0) -> None:
        self.k = spec.k or profile.speculative.k
        self.prompt_lookup = spec.proposer == "prompt_lookup"
        # Prompt lookup proposes by matching n-grams of the context: no draft model pass (c = 0).
        self.c = 0.0 if self.prompt_lookup else float(profile.speculative.cost_ratio.value)
        # the draft's prompt pass / the target's: measured where the profile has it, else c (its decode ratio)
        self.prefill_ratio = 0.0 if self.prompt_lookup else float(profile.speculative.prefill_ratio)
        # real_engine feeds the prompt to the draft in the first round (tripath/profile/engine_rules.py)
        self.lazy_draft = not self.prompt_lookup and follows_real_engine(profile)
        self._verify = [1.0] + [profile.verify_cost_ratio(k) for k in range(1, self.k + 1)]
        # measured profiles' extra per additional sequence in a round (batch_extra); prompt lookup has no draft
        # pass but the coefficient was measured with one, so it is left out there too (its verify stays batch-1)
        per_seq = getattr(profile.speculative, "round_per_sequence", None)
        self.per_sequence = 0.0 if per_seq is None or self.prompt_lookup else float(per_seq.value)
        self.per_sequence_k = int(profile.speculative.k)  # the K it was measured at
        entries = acceptance_entries(profile, tasks, self.k, self.prompt_lookup)
        self.probs = np.clip(_raw_table(entries, self.k) - acceptance_drop, 0.0, 1.0)
        self.survival = np.cumprod(self.probs, axis=1)  # C[t, j-1] = P(at least j drafts accepted)
        # each request its own a where the profile measured the between-prompt spread (acceptance_spread.py)
        self.spread = acceptance_spread(entries, self.k, acceptance_drop, rng)
        self._positions = np.arange(self.k)
        self.rng = rng
        self.controller: AdaptiveK | None = None
        self._draft_seen: dict[int, int] = {}  # request -> tokens with draft K/V (absent: none yet)
        if spec.adaptive:
            base, per_token = linear_verify(profile, self.k)
            costs = SpecCosts(self.c, base, per_token)
            exit_speedup = 1.0  # the engine's default: fall back where no K beats plain decoding
            if spec.fallback_acceptance is not None:
                exit_speedup = best_k(spec.fallback_acceptance, costs, self.k)[1]
            default = ControllerConfig()
            config = ControllerConfig(k_max=self.k, exit_speedup=exit_speedup,
                                      enter_speedup=exit_speedup * default.enter_speedup / default.exit_speedup,
                                      probe_k=min(default.probe_k, self.k))
            self.controller = AdaptiveK(config, costs)

    def round_factor(self, k_max: int) -> float:
        """Cost of the batch's round in target decode steps: K c + v(K); 1 for a plain step."""
        return 1.0 if k_max == 0 else k_max * self.c + self._verify[k_max]

    def batch_extra(self, batch: int, k_max: int) -> float:
        """What sequences beyond the first add to a round, in batch-1 target decode steps: (B - 1) w K / k.

        w = the profile's round_per_sequence (measured at its K = k by tripath/calibrate/sweeps/spec_batch.py): each
        sequence's K draft tokens, K + 1 verify rows and bookkeeping, which the batch-1 ratio K c + v(K) times
        the batch's decode step leaves out. Scaled by K_max / k: that work is per proposed token (an assumption
        between measured Ks; docs/speculative.md). 0 without the coefficient (the batch-1 ratio alone) or at K_max = 0.
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

    def draw(self, decodes: DecodeBatch, ks: np.ndarray) -> np.ndarray:
        """Accepted draft tokens per sequence, by inverting the distribution of the run of acceptances.

        P(accepted >= j) = p_1 ... p_j =: C_j, decreasing in j, so with one uniform u per sequence
        accepted = #{j <= K_i : u < C_j} has exactly the law of "leading successes among K_i
        Bernoulli(p_j) trials", with one draw per sequence per round instead of K.
        """
        k_max = int(ks.max()) if len(ks) else 0
        if k_max == 0:
            accepted = np.zeros(len(decodes), dtype=np.int64)
        else:
            u = self.rng.random(len(decodes))
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
