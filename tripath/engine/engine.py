"""The serving engine: continuous batching over a KV back end (tripath/engine/kv/backend.py), one forward pass per step.

``add_request`` queues a prompt; ``step`` schedules, runs the model once over every
scheduled sequence's new tokens (and the drafts of a speculative strategy: tripath/engine/decoding.py),
keeps what the strategy accepts, retires finished sequences and returns a StepRecord with the
wall time measured after device synchronisation: the raw material for calibration (prefill
tokens, decode sequences, total context -> latency).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from tripath.engine.batch import Part, pack
from tripath.engine.decoding import DecodeStrategy, PlainDecoding
from tripath.engine.engine_config import EngineConfig, RequestRejected
from tripath.engine.kv.backend import KVBackend, make_backend
from tripath.engine.model.fusion import fuse_projections
from tripath.engine.model.model import LlamaModel
from tripath.engine.sampling import SamplingParams
from tripath.engine.scheduler import Scheduler, SchedulerConfig
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
        start = time.perf_counter()
        plan = self.scheduler.schedule()
        if not plan.chunks:
            raise RuntimeError("step() with nothing schedulable; check has_unfinished first")
        for seq in plan.preempted:
            self.strategy.preempted(seq)
        self.backend.prepare(plan.copies)
        drafts = self.strategy.propose(plan.chunks)
        forward_start = time.perf_counter()
        parts: list[Part] = []
        prefill_seqs = prefill_tokens = decode_seqs = context = 0
        admitted: list[int] = []
        shapes: list[tuple[int, int]] = []  # (cached, new) per sequence: StepRecord.chunk_shapes
        for ch, extra in zip(plan.chunks, drafts, strict=True):
            seq, n = ch.seq, ch.num_new
            if not seq.admitted:
                seq.admitted = True
                admitted.append(seq.request_id)
            if seq.is_decode:
                decode_seqs += 1
            else:
                prefill_seqs += 1
                prefill_tokens += n
            tokens = seq.token_slice(seq.num_computed, seq.num_computed + n) + extra
            # a chunk that reaches the end of its tokens gives the next one (and verifies its drafts)
            wanted = 1 + len(extra) if seq.num_computed + n == seq.num_tokens else 0
            table = self.kv_manager.block_table(seq.request_id)
            parts.append(Part(seq.request_id, seq.num_computed, tokens, table, wanted, split=bool(extra)))
            shapes.append((seq.num_computed, len(tokens)))
            context += seq.num_computed + len(tokens)
        batch = pack(parts)
        sampled = [i for i, p in enumerate(parts) if p.num_logits]
        attention = self.strategy.attention(batch.chunks, batch.request_ids)
        ids = torch.tensor(batch.token_ids, dtype=torch.int64).to(self.device, non_blocking=True).unsqueeze(0)
        index = torch.tensor(batch.rows, dtype=torch.int64).to(self.device, non_blocking=True)
        logits = self.model(ids, attention.positions, attention, logits_index=index)[0]  # [R, V]
        results = self.strategy.accept([plan.chunks[i].seq for i in sampled], logits,
                                       [batch.spans[i] for i in sampled])  # .tolist() inside waits for the device
        forward_s = time.perf_counter() - forward_start
        first, finished = [], []
        failed = self.backend.faults(attention)  # those requests end here, the rest go on
        outcome = dict(zip(sampled, results, strict=True))
        for i, ch in enumerate(plan.chunks):
            seq = ch.seq
            accepted, emitted = outcome.get(i, (0, []))
            seq.num_computed += ch.num_new + accepted
            if seq.request_id in failed:
                self.errors[seq.request_id] = failed[seq.request_id]
                self.scheduler.finish(seq)
                self.strategy.finished(seq)
                continue
            if emitted and not seq.output_ids:
                first.append(seq.request_id)
            seq.output_ids += emitted
            self.strategy.settle(seq)
            if emitted and seq.finished:
                self.scheduler.finish(seq)
                self.strategy.finished(seq)
                finished.append(seq.request_id)
        self._sync()  # .tolist() already waited for the device; this also covers non-CUDA-stream backends
        wall = time.perf_counter() - start
        self._steps += 1
        fields = dict(
            step=self._steps - 1,
            start_s=start,
            wall_s=wall,
            batch_size=len(plan.chunks),
            num_tokens=len(batch.token_ids),
            prefill_seqs=prefill_seqs,
            prefill_tokens=prefill_tokens,
            decode_seqs=decode_seqs,
            total_context=context,
            num_preempted=len(plan.preempted),
            blocks_used=self.kv_manager.blocks_used,
            admitted=tuple(admitted),
            first_tokens=tuple(first),
            finished=tuple(finished),
            chunk_shapes=tuple(shapes),
            failed=tuple(failed),
            **self.backend.step_fields(),
        )
        return self.strategy.record(fields, forward_s)

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
