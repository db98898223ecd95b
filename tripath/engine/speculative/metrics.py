"""Speculative-decoding counters with vLLM's definitions, and the measured costs of a round.

vLLM (v1 spec_decode metrics): num_drafts = rounds that proposed >= 1 token; num_draft_tokens
and num_accepted_tokens summed over them; acceptance rate = accepted / draft tokens; mean
acceptance length = 1 + accepted / num_drafts (the bonus or correction token counts once);
per-position acceptance = drafts whose i-th token was accepted / drafts that proposed an i-th.

Besides these, ``per_token_acceptance`` is the a of the expected-tokens formula
E = (1 - a^(K+1)) / (1 - a): the chance that a draft token is accepted given that all
earlier ones were.  Its maximum-likelihood estimate from truncated geometric rounds is
accepted / (accepted + rounds that stopped at a rejection).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecCounters:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_rejections: int = 0  # rounds that ended at a rejected draft token (not a full accept)
    accepted_per_position: list[int] = field(default_factory=list)
    proposed_per_position: list[int] = field(default_factory=list)

    def record(self, num_draft: int, num_accepted: int) -> None:
        """One round of one sequence: num_draft tokens proposed, the first num_accepted accepted."""
        if not 0 <= num_accepted <= num_draft:
            raise ValueError(f"num_accepted: must be in [0, {num_draft}], got {num_accepted}")
        if num_draft == 0:
            return  # a plain decoding step: vLLM counts no draft
        self.num_drafts += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        self.num_rejections += int(num_accepted < num_draft)
        grow = num_draft - len(self.proposed_per_position)
        if grow > 0:
            self.proposed_per_position += [0] * grow
            self.accepted_per_position += [0] * grow
        for i in range(num_draft):
            self.proposed_per_position[i] += 1
            self.accepted_per_position[i] += int(i < num_accepted)

    def merge(self, other: SpecCounters) -> None:
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        self.num_rejections += other.num_rejections
        for i, (p, a) in enumerate(zip(other.proposed_per_position, other.accepted_per_position, strict=True)):
            if i >= len(self.proposed_per_position):
                self.proposed_per_position.append(0)
                self.accepted_per_position.append(0)
            self.proposed_per_position[i] += p
            self.accepted_per_position[i] += a

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else float("nan")

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else float("nan")

    @property
    def per_position_acceptance(self) -> list[float]:
        return [a / p for a, p in zip(self.accepted_per_position, self.proposed_per_position, strict=True)]

    @property
    def per_token_acceptance(self) -> float:
        trials = self.num_accepted_tokens + self.num_rejections
        return self.num_accepted_tokens / trials if trials else float("nan")

    def to_dict(self) -> dict[str, object]:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "per_token_acceptance": self.per_token_acceptance,
            "per_position_acceptance": self.per_position_acceptance,
        }


@dataclass
class SpecTimings:
    """Wall times (seconds) of the engine's forward passes, for the cost ratio c and the verify cost.

    Only passes of the given batch size are kept so that ratios compare like with like.
    """

    draft_pass_s: list[float] = field(default_factory=list)  # one draft forward pass (one proposed token)
    verify_s: dict[int, list[float]] = field(default_factory=dict)  # K -> target passes over K+1 tokens
    plain_s: list[float] = field(default_factory=list)  # target passes with one token per sequence

    def add_verify(self, k: int, seconds: float) -> None:
        (self.plain_s if k == 0 else self.verify_s.setdefault(k, [])).append(seconds)

    @staticmethod
    def _median(xs: list[float]) -> float:
        if not xs:
            return float("nan")
        s = sorted(xs)
        mid = len(s) // 2
        return s[mid] if len(s) % 2 else 0.5 * (s[mid - 1] + s[mid])

    def target_step_s(self, reference: list[float] | None = None) -> float:
        """Median plain target step (the unit of cost); ``reference`` overrides it (target-only runs)."""
        return self._median(reference if reference is not None else self.plain_s)

    @staticmethod
    def _mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    def cost_ratio(self, target_step_s: float, mean: bool = False) -> float:
        """c = draft per-token step time / target per-token step time (measured; median, or mean).

        Medians describe an undisturbed pass; means include the stalls of a shared machine,
        which end-to-end totals include too (use them when predicting measured totals).
        """
        return (self._mean if mean else self._median)(self.draft_pass_s) / target_step_s

    def verify_cost(self, k: int, target_step_s: float, mean: bool = False) -> float:
        """Target pass over K+1 tokens in units of one plain target step (measured; median, or mean)."""
        return (self._mean if mean else self._median)(self.verify_s.get(k, [])) / target_step_s
