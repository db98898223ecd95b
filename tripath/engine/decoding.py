"""How the serving loop (tripath/engine/engine.py) turns a step's logits into tokens: the decoding strategy.

Engine schedules, builds the one forward pass and books the results; the strategy decides what is
proposed beyond each decoding sequence's next token and which tokens are kept.  Per step the loop calls
``propose`` (draft tokens per scheduled chunk, reserved beforehand through ``lookahead``),
``attention`` (the back end's callable, or a variant for passes that may be rolled back), ``accept``
(per sampling chunk: drafts accepted and tokens emitted), ``settle`` (after a chunk's sequence has
its new length: roll caches back to it) and ``record`` (the step's record).

``DecodeStrategy`` is plain decoding: it proposes nothing, samples one token per chunk and every
bookkeeping hook is a no-op, so a strategy overrides only what it changes.  ``PlainDecoding`` is that
base as it stands; speculative decoding is tripath/engine/speculative/decoding.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import Tensor

from tripath.engine.sampling import sample
from tripath.engine.scheduler import ScheduledChunk
from tripath.engine.sequence import Sequence
from tripath.engine.step_record import StepRecord

if TYPE_CHECKING:
    import torch

    from tripath.engine.engine_config import EngineConfig
    from tripath.engine.kv.backend import KVBackend, StepAttention
    from tripath.engine.kv.paged_attention import SequenceChunk


class DecodeStrategy:
    """One token per sequence that reaches the end of its tokens, drawn by the sampler; hooks do nothing."""

    # draft slots a decoding sequence wants reserved this step (the Scheduler's hook); None: never any
    lookahead: Callable[[Sequence], int] | None = None

    def bind(self, backend: KVBackend, config: EngineConfig, generator: torch.Generator | None) -> None:
        """Once, from Engine.__init__: the engine's KV back end, settings and sampling generator.
        Raises ValueError when the strategy cannot serve this back end."""
        self.backend, self.generator = backend, generator

    def check_request(self, prompt_len: int, max_new_tokens: int) -> str | None:
        """Why the strategy can never serve a request of this size, or None."""
        return None

    def propose(self, chunks: list[ScheduledChunk]) -> list[list[int]]:
        """Draft tokens per scheduled chunk ([] for none)."""
        return [[] for _ in chunks]

    def attention(self, chunks: list[SequenceChunk], request_ids: list[int]) -> StepAttention:
        """The step's attention callable (the back end's own)."""
        return self.backend.attention(chunks, request_ids)

    def accept(self, seqs: list[Sequence], logits: Tensor,
               spans: list[tuple[int, int]]) -> list[tuple[int, list[int]]]:
        """Per sampling sequence: (drafts accepted, tokens emitted).  logits [S, V]: one row per sequence
        (no drafts), sampled in one call."""
        tokens = sample(logits, [s.sampling for s in seqs], self.generator).tolist()
        return [(0, [int(t)]) for t in tokens]

    def settle(self, seq: Sequence) -> None:
        """After a chunk's sequence has its new length (roll caches back to it)."""

    def preempted(self, seq: Sequence) -> None:
        """The scheduler freed ``seq``'s blocks for recompute."""

    def finished(self, seq: Sequence) -> None:
        """``seq`` finished or was ended by a tier fault."""

    def request_fields(self, request_id: int) -> dict[str, int]:
        """Extra RequestRecord fields of a finished request."""
        return {}

    def release(self, request_id: int) -> None:
        """Forget a finished request."""

    def record(self, fields: dict[str, Any], forward_s: float) -> StepRecord:
        """The step's record from the engine's fields (and the forward's wall time)."""
        return StepRecord(**fields)


class PlainDecoding(DecodeStrategy):
    """Plain decoding: the base strategy, nothing overridden."""
