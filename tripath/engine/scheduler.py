"""Iteration-level (continuous) batching, as Orca / vLLM: who runs in the next forward pass.

Each step: running sequences first (in admission order), then waiting ones FCFS, within
``max_batch_size`` live sequences and ``max_batched_tokens`` tokens per step (the same
setting names as the simulator's [batching] section).  When the block pool cannot hold a
running sequence's next tokens, the most recently admitted sequence is preempted by
recompute: its blocks are freed and it goes back to the head of the queue.  A decoding strategy
may ask for lookahead slots past a decoding sequence's next token (speculative drafts, as vLLM's
num_lookahead_slots): they are reserved with it and count against the token budget.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tripath.engine.kv.paged import KVCacheManager
from tripath.engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class SchedulerConfig:
    max_batch_size: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill: bool = True  # split a prompt that exceeds the step's remaining token budget

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size: must be >= 1, got {self.max_batch_size}")
        if self.max_batched_tokens < 1:
            raise ValueError(f"max_batched_tokens: must be >= 1, got {self.max_batched_tokens}")


@dataclass(frozen=True)
class ScheduledChunk:
    seq: Sequence
    num_new: int  # tokens computed this step: seq.tokens[num_computed : num_computed + num_new]
    num_lookahead: int = 0  # slots reserved past them for the strategy's drafts (decoding sequences only)


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk]  # one-token chunks first (attention batches them in one call)
    preempted: list[Sequence] = field(default_factory=list)
    copies: list[tuple[int, int]] = field(default_factory=list)  # copy-on-write block copies to apply


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv: KVCacheManager,
                 lookahead: Callable[[Sequence], int] | None = None) -> None:
        self.config = config
        self.kv = kv
        self.lookahead = lookahead  # draft slots a decoding sequence wants this step; None: never any
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def _preempt(self, seq: Sequence) -> None:
        """Recompute-style preemption: drop the cache, keep the tokens, requeue at the head."""
        self.kv.free(seq.request_id)
        seq.num_computed = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.WAITING
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence) -> None:
        self.kv.free(seq.request_id)
        seq.status = SequenceStatus.FINISHED
        self.running.remove(seq)

    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_batched_tokens
        out = SchedulerOutput(chunks=[])
        for seq in list(self.running):
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            n = min(seq.num_uncomputed, budget)
            if n == 0:
                break
            k = min(self.lookahead(seq), budget - n) if self.lookahead is not None and seq.is_decode else 0
            while not self.kv.can_reserve(seq.request_id, seq.num_computed + n + k):
                victim = self.running[-1]  # the most recently admitted goes first
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is not SequenceStatus.RUNNING:
                break
            out.copies += self.kv.reserve(seq.request_id, seq.num_computed + n + k)
            out.chunks.append(ScheduledChunk(seq, n, k))
            budget -= n + k
        # admit new work only when nothing had to be preempted: memory is tight otherwise
        while (
            not out.preempted
            and self.waiting
            and budget > 0
            and len(self.running) < self.config.max_batch_size
        ):
            seq = self.waiting[0]
            cached = self.kv.cached_prefix(seq) if seq.num_computed == 0 else 0  # prefix caching: not recomputed
            n = seq.num_uncomputed - cached
            if n > budget:
                if not self.config.chunked_prefill:
                    break
                n = budget
            if not self.kv.can_reserve(seq.request_id, seq.num_computed + cached + n):
                break
            out.copies += self.kv.reserve(seq.request_id, seq.num_computed + cached + n)
            seq.num_computed += cached
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            out.chunks.append(ScheduledChunk(seq, n))
            budget -= n
        out.chunks.sort(key=lambda c: c.num_new != 1)  # stable: decodes first, then multi-token chunks
        return out
