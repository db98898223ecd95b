"""The serving engine: continuous batching over a KV back end (tripath/engine/kv/backend.py), one forward pass per step.

``add_request`` queues a prompt; ``step`` runs in phases: ``_schedule`` (who runs, the strategy's drafts:
tripath/engine/decoding.py), ``_pack`` (every scheduled sequence's new tokens and drafts as one forward:
tripath/engine/batch.py), ``_forward`` (the model once, the strategy's accept) and ``_book`` (what each
sequence keeps; finished and faulted ones retired), and returns a StepRecord with the
wall time measured after device synchronisation: the raw material for calibration (prefill
tokens, decode sequences, total context -> latency).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from tripath.engine.backends import make_backend
from tripath.engine.batch import Part, StepBatch
from tripath.engine.decoding import DecodeStrategy, PlainDecoding
from tripath.engine.engine_config import EngineConfig, RequestRejected
from tripath.engine.kv.backend import KVBackend, StepAttention
from tripath.engine.model.fusion import fuse_projections
from tripath.engine.model.model import LlamaModel
from tripath.engine.sampling import SamplingParams
from tripath.engine.scheduler import ScheduledChunk, Scheduler, SchedulerConfig, SchedulerOutput
from tripath.engine.sequence import Sequence
from tripath.engine.step_record import StepRecord

__all__ = ["Engine", "run_to_completion"]


class Engine:
    def __init__(self, model: LlamaModel, config: EngineConfig, generator: torch.Generator | None = None,
                 strategy: DecodeStrategy | None = None) -> None:
        self.model = fuse_projections(model.eval()) if config.fuse_projections else model.eval()
        self.config = config
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.backend: KVBackend = make_backend(model.config, config, self.dtype, self.device)
        self.kv_manager = self.backend.manager
        self.errors: dict[int, str] = {}  # request id -> why a tier fault ended it
        self.generator = generator
        self.strategy: DecodeStrategy = strategy if strategy is not None else PlainDecoding()
        try:
            self.strategy.bind(self.backend, config, generator)
        except ValueError:  # a strategy that cannot serve this back end: nothing outlives the refusal
            self.backend.close()
            raise
        sched = SchedulerConfig(config.max_batch_size, config.max_batched_tokens, config.chunked_prefill)
        self.scheduler = Scheduler(sched, self.kv_manager, self.strategy.lookahead)
        self.sequences: dict[int, Sequence] = {}
        self._next_id = 0
        self._steps = 0

    def check_request(self, prompt_len: int, max_new_tokens: int) -> str | None:
        """Why a request of this size can never run here, or None if it can."""
        total = prompt_len + max_new_tokens
        if total > self.model.config.max_position_embeddings:
            return (
                f"prompt + output = {total} tokens exceeds max_position_embeddings "
                f"{self.model.config.max_position_embeddings}"
            )
        reason = self.kv_manager.check_request(total - 1)
        if reason is not None:
            return reason
        if not self.config.chunked_prefill and total - 1 > self.config.max_batched_tokens:
            limit = self.config.max_batched_tokens
            return f"needs a {total - 1}-token (re)compute step, max_batched_tokens is {limit}"
        return self.strategy.check_request(prompt_len, max_new_tokens)

    def add_request(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        sampling: SamplingParams | None = None,
        request_id: int | None = None,
    ) -> int:
        """Queue a request; raises RequestRejected when it can never run (reason in the message)."""
        if request_id is None:
            request_id = self._next_id
        if request_id in self.sequences:
            raise ValueError(f"request_id {request_id} is already in use")
        self._next_id = max(self._next_id, request_id + 1)
        reason = self.check_request(len(prompt_ids), max_new_tokens)
        if reason is not None:
            raise RequestRejected(f"request {request_id}: {reason}")
        vocab = self.model.config.vocab_size
        if prompt_ids and not all(0 <= t < vocab for t in prompt_ids):
            raise ValueError(f"request {request_id}: prompt token ids must be in [0, {vocab})")
        seq = Sequence(request_id, list(prompt_ids), max_new_tokens, sampling or SamplingParams())
        self.errors.pop(request_id, None)  # a reused id starts clean
        self.sequences[request_id] = seq
        self.scheduler.add(seq)
        return request_id

    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def step(self) -> StepRecord:
        """One iteration in three phases: schedule and pack the batch, run the one forward, book the results."""
        start = time.perf_counter()
        plan, drafts = self._schedule()
        forward_start = time.perf_counter()
        batch = self._pack(plan.chunks, drafts)
        attention, results = self._forward(batch)
        forward_s = time.perf_counter() - forward_start
        failed = self.backend.faults(attention)  # those requests end here, the rest go on
        first, finished = self._book(plan.chunks, dict(zip(batch.sampled, results, strict=True)), failed)
        self._sync()  # .tolist() already waited for the device; this also covers non-CUDA-stream backends
        wall = time.perf_counter() - start
        self._steps += 1
        fields = dict(step=self._steps - 1, start_s=start, wall_s=wall, num_preempted=len(plan.preempted),
                      blocks_used=self.kv_manager.blocks_used, first_tokens=tuple(first),
                      finished=tuple(finished), failed=tuple(failed),
                      **batch.fields(), **self.backend.step_fields())
        return self.strategy.record(fields, forward_s)

    def _schedule(self) -> tuple[SchedulerOutput, list[list[int]]]:
        """Who runs this step (preempted sequences told to the strategy, block copies done) and their drafts."""
        plan = self.scheduler.schedule()
        if not plan.chunks:
            raise RuntimeError("step() with nothing schedulable; check has_unfinished first")
        for seq in plan.preempted:
            self.strategy.preempted(seq)
        self.backend.prepare(plan.copies)
        return plan, self.strategy.propose(plan.chunks)

    def _pack(self, chunks: list[ScheduledChunk], drafts: list[list[int]]) -> StepBatch:
        """Every chunk's new tokens (and drafts) as one packed forward, with the step's phase mix."""
        batch = StepBatch(chunks)
        for ch, extra in zip(chunks, drafts, strict=True):
            seq, n = ch.seq, ch.num_new
            if not seq.admitted:
                seq.admitted = True
                batch.admitted.append(seq.request_id)
            tokens = seq.token_slice(seq.num_computed, seq.num_computed + n) + extra
            # a chunk that reaches the end of its tokens gives the next one (and verifies its drafts)
            wanted = 1 + len(extra) if seq.num_computed + n == seq.num_tokens else 0
            table = self.kv_manager.block_table(seq.request_id)
            batch.add(Part(seq.request_id, seq.num_computed, tokens, table, wanted, split=bool(extra)),
                      prefill=not seq.is_decode, num_new=n)
        return batch

    def _forward(self, batch: StepBatch) -> tuple[StepAttention, list[tuple[int, list[int]]]]:
        """The model over the packed batch; the strategy's (accepted, emitted) per sampling chunk."""
        packed = batch.packed
        attention = self.strategy.attention(packed.chunks, packed.request_ids)
        ids = torch.tensor(packed.token_ids, dtype=torch.int64).to(self.device, non_blocking=True).unsqueeze(0)
        index = torch.tensor(packed.rows, dtype=torch.int64).to(self.device, non_blocking=True)
        logits = self.model(ids, attention.positions, attention, logits_index=index)[0]  # [R, V]
        results = self.strategy.accept([batch.chunks[i].seq for i in batch.sampled], logits,
                                       [packed.spans[i] for i in batch.sampled])  # .tolist() inside waits
        return attention, results

    def _book(self, chunks: list[ScheduledChunk], outcome: dict[int, tuple[int, list[int]]],
              failed: dict[int, str]) -> tuple[list[int], list[int]]:
        """Advance every chunk's sequence by what it computed and kept; retire finished and failed ones.
        Returns the request ids that produced their first token and those that finished."""
        first: list[int] = []
        finished: list[int] = []
        for i, ch in enumerate(chunks):
            seq = ch.seq
            accepted, emitted = outcome.get(i, (0, []))
            seq.num_computed += ch.num_new + accepted
            if seq.request_id in failed:
                self.errors[seq.request_id] = failed[seq.request_id]
                self._retire(seq)
                continue
            if emitted and not seq.output_ids:
                first.append(seq.request_id)
            seq.output_ids += emitted
            self.strategy.settle(seq)
            if emitted and seq.finished:
                self._retire(seq)
                finished.append(seq.request_id)
        return first, finished

    def _retire(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        self.strategy.finished(seq)

    def output(self, request_id: int) -> list[int]:
        return list(self.sequences[request_id].output_ids)

    def request_fields(self, request_id: int) -> dict[str, int]:
        """What the strategy adds to a finished request's RequestRecord (speculative: rounds, accepted tokens)."""
        return self.strategy.request_fields(request_id)

    def release(self, request_id: int) -> None:
        """Forget a finished request (its blocks are already free); a tier fault's reason stays in errors."""
        self.sequences.pop(request_id, None)
        self.strategy.release(request_id)

    def close(self) -> None:
        """Release what outlives a step: with tiering, the prefetch thread and the SSD tier's files."""
        self.backend.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int | list[int],
        sampling: SamplingParams | None = None,
    ) -> list[list[int]]:
        """Run prompts to completion with continuous batching; outputs in prompt order."""
        return run_to_completion(self, prompts, max_new_tokens, sampling)


def run_to_completion(
    engine: Any,
    prompts: list[list[int]],
    max_new_tokens: int | list[int],
    sampling: SamplingParams | None = None,
) -> list[list[int]]:
    """Add every prompt, step until all finish, return outputs in prompt order and release them.

    Shared by Engine and SeqParEngine (tripath/engine/seqpar/parallel.py: the same add_request / step / output /
    release API).
    """
    limits = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
    ids = [engine.add_request(p, m, sampling) for p, m in zip(prompts, limits, strict=True)]
    while engine.has_unfinished:
        engine.step()
    outs = [engine.output(i) for i in ids]
    for i in ids:
        engine.release(i)
    return outs
