"""One request inside the engine: its tokens, how many of them have K/V in the cache, its state."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from tripath.engine.sampling import SamplingParams


class SequenceStatus(Enum):
    WAITING = "waiting"  # queued, or preempted and requeued (its cache was freed: it recomputes)
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    """tokens = prompt + generated; tokens[:num_computed] have K/V in the cache.

    A step computes tokens[num_computed : num_computed + chunk]; when that reaches the end of
    ``tokens`` the step's logits at the last position give the next token.  This one rule
    covers prefill, chunked prefill, decode and recompute after preemption.
    """

    request_id: int
    prompt_ids: list[int]
    max_new_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    output_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    status: SequenceStatus = SequenceStatus.WAITING
    num_preemptions: int = 0
    admitted: bool = False  # scheduled at least once (admission time is the first step's start)

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError(f"request {self.request_id}: prompt_ids must not be empty")
        if self.max_new_tokens < 1:
            raise ValueError(
                f"request {self.request_id}: max_new_tokens must be >= 1, got {self.max_new_tokens}"
            )

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_uncomputed(self) -> int:
        return self.num_tokens - self.num_computed

    @property
    def max_total_tokens(self) -> int:
        """Tokens that need cache slots over the whole life: the last generated token is never fed back."""
        return len(self.prompt_ids) + self.max_new_tokens - 1

    @property
    def is_decode(self) -> bool:
        """Its next chunk is the single token it just generated (not a prompt or a recompute)."""
        return bool(self.output_ids) and self.num_uncomputed == 1

    @property
    def finished(self) -> bool:
        return len(self.output_ids) >= self.max_new_tokens

    def token_slice(self, start: int, end: int) -> list[int]:
        n_prompt = len(self.prompt_ids)
        if end <= n_prompt:
            return self.prompt_ids[start:end]
        if start >= n_prompt:  # decode: no O(length) concatenation on the hot path
            return self.output_ids[start - n_prompt : end - n_prompt]
        return self.prompt_ids[start:] + self.output_ids[: end - n_prompt]
