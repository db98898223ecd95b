"""How the serving loop (tripath/engine/engine.py) turns a step's logits into tokens: the decoding strategy.

Engine schedules, builds the one forward pass and books the results; the strategy decides what is
proposed beyond each decoding sequence's next token and which tokens are kept.  Per step the loop calls
``propose`` (draft tokens per scheduled chunk, reserved beforehand through ``lookahead``),
``attention`` (the back end's callable, or a variant for passes that may be rolled back), ``accept``
(per sampling chunk: drafts accepted and tokens emitted), ``settle`` (after a chunk's sequence has
its new length: roll caches back to it) and ``record`` (the step's record).  ``PlainDecoding`` proposes
nothing and samples one token per chunk; speculative decoding is
tripath/engine/speculative/decoding.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

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


class DecodeStrategy(Protocol):
    # once, from Engine.__init__: the engine's KV back end, settings and sampling generator
    def bind(self, backend: KVBackend, config: EngineConfig, generator: torch.Generator | None) -> None: ...

    def check_request(self, prompt_len: int, max_new_tokens: int) -> str | None: ...

    # draft slots a decoding sequence wants reserved this step (the Scheduler's hook); None: never any
    lookahead: Callable[[Sequence], int] | None

    def propose(self, chunks: list[ScheduledChunk]) -> list[list[int]]: ...  # drafts per chunk ([] for none)

    def attention(self, chunks: list[SequenceChunk], request_ids: list[int]) -> StepAttention: ...

    def accept(self, seqs: list[Sequence], logits: Tensor,
               spans: list[tuple[int, int]]) -> list[tuple[int, list[int]]]: ...

    def settle(self, seq: Sequence) -> None: ...

    def preempted(self, seq: Sequence) -> None: ...

    def finished(self, seq: Sequence) -> None: ...

    def request_fields(self, request_id: int) -> dict[str, int]: ...  # extra RequestRecord fields

    def release(self, request_id: int) -> None: ...

    def record(self, fields: dict[str, Any], forward_s: float) -> StepRecord: ...


class PlainDecoding:
    """One token per sequence that reaches the end of its tokens, drawn by the sampler."""

    def bind(self, backend: KVBackend, config: EngineConfig, generator: torch.Generator | None) -> None:
        self.backend, self.generator = backend, generator

    def check_request(self, prompt_len: int, max_new_tokens: int) -> str | None:
        return None

    lookahead = None

    def propose(self, chunks: list[ScheduledChunk]) -> list[list[int]]:
        return [[] for _ in chunks]

    def attention(self, chunks: list[SequenceChunk], request_ids: list[int]) -> StepAttention:
        return self.backend.attention(chunks, request_ids)

    def accept(self, seqs: list[Sequence], logits: Tensor,
               spans: list[tuple[int, int]]) -> list[tuple[int, list[int]]]:
        """logits [S, V]: one row per sequence (no drafts), sampled in one call."""
        tokens = sample(logits, [s.sampling for s in seqs], self.generator).tolist()
        return [(0, [int(t)]) for t in tokens]

    def settle(self, seq: Sequence) -> None:
        pass

    def preempted(self, seq: Sequence) -> None:
        pass

    def finished(self, seq: Sequence) -> None:
        pass

    def request_fields(self, request_id: int) -> dict[str, int]:
        return {}

    def release(self, request_id: int) -> None:
        pass

    def record(self, fields: dict[str, Any], forward_s: float) -> StepRecord:
        return StepRecord(**fields)

