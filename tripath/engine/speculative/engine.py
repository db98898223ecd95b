"""Speculative decoding engine: draft-propose / target-verify rounds, batched, on paged KV caches.

A step is one round for every running sequence, each with its own K (from the controller,
capped so a request never overshoots max_new_tokens): the proposer drafts K tokens, ONE
target forward pass scores [last token, d_1..d_K] of every sequence together with the
prompts admitted this step, rejection sampling (greedy: argmax matching) accepts a prefix
of n drafts per sequence and adds one target token, and both KV caches are truncated back
to exactly the accepted tokens (KVCacheManager.truncate).  K = 0 is plain decoding: the
target pass and the sampler are exactly those of tripath.engine.engine.Engine.

Admission is simpler than Engine's (no preemption, no chunked prefill): a request is admitted
when the KV blocks of its whole life (prompt + max_new_tokens - 1; a round never reaches
past that because K is capped) fit beside those of the running requests, in both pools.
With EngineConfig.kv_compression the target's KV lives in a CompressedKVStore as in Engine
(tripath/engine/speculative/compressed.py: verify without sealing, roll back, then seal).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import torch

from tripath.core.speculative import Controller, FixedK
from tripath.engine.engine import run_to_completion
from tripath.engine.engine_config import EngineConfig, RequestRejected
from tripath.engine.kv.compressed_backend import CompressedBackend
from tripath.engine.kv.paged_backend import PagedBackend
from tripath.engine.model.fusion import fuse_projections
from tripath.engine.model.model import LlamaModel
from tripath.engine.sampling import SamplingParams, sample
from tripath.engine.sequence import Sequence, SequenceStatus
from tripath.engine.speculative.compressed import compressed_forward, rollback
from tripath.engine.speculative.metrics import SpecCounters, SpecTimings
from tripath.engine.speculative.proposers import PagedChunk, Proposal, Proposer, paged_forward
from tripath.engine.speculative.rejection import greedy_verify, rejection_sample, sampling_probs
from tripath.engine.step_record import StepRecord


@dataclass(frozen=True)
class SpecStepRecord(StepRecord):
    """A StepRecord (the same calibration fields) plus what the speculative round did."""

    draft_s: float  # wall time of the proposer (draft passes or lookups)
    verify_s: float  # wall time of the single target pass
    draft_passes: int
    num_drafts: int  # sequences that proposed >= 1 token
    draft_tokens: int
    accepted_tokens: int
    emitted_tokens: int  # tokens appended to outputs this step (prefills' first tokens included)
    ks: tuple[int, ...]  # tokens proposed per round sequence (0: plain decoding)


class SpeculativeEngine:
    """Engine's add_request / step / generate API; ``proposer`` drafts (a DraftModelProposer needs a
    pool of at least config.num_blocks blocks of config.block_size), ``controller`` picks K (FixedK(4))."""

    def __init__(
        self,
        target: LlamaModel,
        proposer: Proposer,
        config: EngineConfig,
        controller: Controller | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        self.model = fuse_projections(target.eval()) if config.fuse_projections else target.eval()
        self.config = config
        param = next(target.parameters())
        self.device, self.dtype = param.device, param.dtype
        if config.tiered is not None:
            raise ValueError("EngineConfig.tiered: the SpeculativeEngine has no tiered KV")
        # the target's KV compressed as in Engine (tripath/engine/speculative/compressed.py); the draft's stays exact
        self.backend: PagedBackend | CompressedBackend = (
            PagedBackend(target.config, config, self.dtype, self.device) if config.kv_compression is None
            else CompressedBackend(target.config, config, self.dtype, self.device))
        self.kv_manager = self.backend.manager
        self.proposer = proposer
        self.controller = controller if controller is not None else FixedK(4)
        self.generator = generator
        self.sequences: dict[int, Sequence] = {}
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = SpecCounters()  # engine-wide
        self.request_counters: dict[int, SpecCounters] = {}
        self.timings = SpecTimings()  # only batch-1 passes (see record_timing)
        self._committed_blocks = 0
        self._next_id = 0
        self._steps = 0

    # -- requests -------------------------------------------------------------------------------
    def _lifetime_blocks(self, seq: Sequence) -> int:
        return -(-seq.max_total_tokens // self.config.block_size)

    def check_request(self, prompt_len: int, max_new_tokens: int) -> str | None:
        total = prompt_len + max_new_tokens
        limit = self.model.config.max_position_embeddings
        draft = getattr(self.proposer, "model", None)
        if draft is not None:  # the draft sees positions up to total - 3 (its last proposal is never fed)
            limit = min(limit, draft.config.max_position_embeddings + 1)
        if total > limit:
            return f"prompt + output = {total} tokens exceeds max_position_embeddings ({limit}, target and draft)"
        reason = self.kv_manager.check_request(total - 1)
        if reason is not None:
            return reason
        if prompt_len > self.config.max_batched_tokens:
            return f"prompt of {prompt_len} tokens exceeds max_batched_tokens (no chunked prefill here)"
        return None

    def add_request(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        sampling: SamplingParams | None = None,
        request_id: int | None = None,
    ) -> int:
        request_id = self._next_id if request_id is None else request_id
        if request_id in self.sequences:
            raise ValueError(f"request_id {request_id} is already in use")
        self._next_id = max(self._next_id, request_id + 1)
        reason = self.check_request(len(prompt_ids), max_new_tokens)
        if reason is not None:
            raise RequestRejected(f"request {request_id}: {reason}")
        vocab = self.model.config.vocab_size
        if not all(0 <= t < vocab for t in prompt_ids):
            raise ValueError(f"request {request_id}: prompt token ids must be in [0, {vocab})")
        seq = Sequence(request_id, list(prompt_ids), max_new_tokens, sampling or SamplingParams())
        self.sequences[request_id] = seq
        self.request_counters[request_id] = SpecCounters()
        self.waiting.append(seq)
        return request_id

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def _admit(self) -> list[Sequence]:
        budget, admitted = self.config.max_batched_tokens, []
        while self.waiting and len(self.running) < self.config.max_batch_size:
            seq = self.waiting[0]
            blocks = self._lifetime_blocks(seq)
            if len(seq.prompt_ids) > budget or self._committed_blocks + blocks > self.config.num_blocks:
                break
            self.waiting.popleft()
            self._committed_blocks += blocks
            budget -= len(seq.prompt_ids)
            seq.status, seq.admitted = SequenceStatus.RUNNING, True
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    # -- one round ------------------------------------------------------------------------------
    def _choose_ks(self, seqs: list[Sequence]) -> list[int]:
        # K <= remaining - 1: the round's K+1 tokens never pass max_new_tokens (nor the reserved blocks)
        return [min(self.controller.choose(s.request_id), s.max_new_tokens - len(s.output_ids) - 1) for s in seqs]

    @torch.inference_mode()
    def step(self) -> SpecStepRecord:
        start = time.perf_counter()
        rounds = [s for s in self.running if s.output_ids]  # prefilled: decode by speculation
        new = self._admit()
        if not rounds and not new:
            raise RuntimeError("step() with nothing schedulable; check has_unfinished first")
        ks = self._choose_ks(rounds)
        passes_before = len(getattr(self.proposer, "pass_seconds", []))
        t0 = time.perf_counter()
        proposal = self.proposer.propose(rounds, ks) if any(ks) else None
        draft_s = time.perf_counter() - t0
        num_draft = proposal.num_draft.tolist() if proposal is not None else [0] * len(rounds)
        chunks = []
        for i, seq in enumerate(rounds):
            drafts = proposal.tokens[i, : num_draft[i]].tolist() if num_draft[i] else []
            tail = seq.token_slice(seq.num_computed, seq.num_tokens)
            chunks.append(PagedChunk(seq.request_id, seq.num_computed, tail + drafts, 1 + num_draft[i]))
        chunks += [PagedChunk(s.request_id, 0, list(s.prompt_ids), 1) for s in new]
        t0 = time.perf_counter()
        if isinstance(self.backend, PagedBackend):
            logits = paged_forward(self.model, self.backend.kv, self.kv_manager, chunks)
        else:
            logits = compressed_forward(self.model, self.backend.store, self.kv_manager, chunks)
        accepted, emitted = self._verify(rounds, new, num_draft, proposal, logits)
        verify_s = time.perf_counter() - t0  # includes the sampler: .tolist() in _verify synced the device
        first, finished = [], []
        for i, seq in enumerate(rounds + new):
            if not seq.output_ids:
                first.append(seq.request_id)
            seq.num_computed = seq.num_tokens + (accepted[i] if i < len(rounds) else 0)
            seq.output_ids += emitted[i]
            if isinstance(self.backend, PagedBackend):
                self.kv_manager.truncate(seq.request_id, seq.num_computed)  # rejected drafts leave the cache
            else:  # ... and the store, which then seals the blocks the accepted prefix filled
                rollback(self.backend.store, self.kv_manager, seq.request_id, seq.num_computed)
            if i < len(rounds):
                self.proposer.commit(seq)
                self.controller.observe(seq.request_id, num_draft[i], accepted[i])
                self.counters.record(num_draft[i], accepted[i])
                self.request_counters[seq.request_id].record(num_draft[i], accepted[i])
            if seq.finished:
                self._finish(seq)
                finished.append(seq.request_id)
        self._record_timing(rounds, new, num_draft, passes_before, verify_s)
        wall = time.perf_counter() - start
        self._steps += 1
        return SpecStepRecord(
            step=self._steps - 1,
            start_s=start,
            wall_s=wall,
            batch_size=len(chunks),
            num_tokens=sum(len(c.tokens) for c in chunks),
            prefill_seqs=len(new),
            prefill_tokens=sum(len(s.prompt_ids) for s in new),
            decode_seqs=len(rounds),
            total_context=sum(c.num_cached + len(c.tokens) for c in chunks),
            num_preempted=0,
            blocks_used=self.kv_manager.blocks_used,
            admitted=tuple(s.request_id for s in new),
            first_tokens=tuple(first),
            finished=tuple(finished),
            draft_s=draft_s,
            verify_s=verify_s,
            draft_passes=len(getattr(self.proposer, "pass_seconds", [])) - passes_before,
            num_drafts=sum(1 for n in num_draft if n),
            draft_tokens=sum(num_draft),
            accepted_tokens=sum(accepted[: len(rounds)]),
            emitted_tokens=sum(len(e) for e in emitted),
            ks=tuple(num_draft),
        )

    def _verify(
        self,
        rounds: list[Sequence],
        new: list[Sequence],
        num_draft: list[int],
        proposal: Proposal | None,
        logits: list[torch.Tensor],
    ) -> tuple[list[int], list[list[int]]]:
        """Per chunk: accepted drafts and the emitted tokens.  Rows without drafts go through the
        plain sampler in one call (same rows, same order, same generator use as Engine.step)."""
        n_chunks = len(logits)
        accepted, emitted = [0] * n_chunks, [[] for _ in range(n_chunks)]
        seqs = rounds + new
        plain = [i for i in range(n_chunks) if i >= len(rounds) or num_draft[i] == 0]
        if plain:
            last = torch.stack([logits[i][-1] for i in plain])  # [P, V]
            toks = sample(last, [seqs[i].sampling for i in plain], self.generator)
            for i, t in zip(plain, toks.tolist(), strict=True):
                emitted[i] = [int(t)]
        spec = [i for i in range(len(rounds)) if num_draft[i]]
        for greedy in (True, False):
            rows = [i for i in spec if seqs[i].sampling.greedy == greedy]
            if not rows:
                continue
            k = max(num_draft[i] for i in rows)
            v = logits[rows[0]].shape[-1]
            target = torch.zeros(len(rows), k + 1, v, dtype=logits[rows[0]].dtype, device=self.device)
            for r, i in enumerate(rows):
                target[r, : num_draft[i] + 1] = logits[i]  # [K_i + 1, V] -> padded [K + 1, V]
            idx = torch.tensor(rows, device=proposal.tokens.device)
            tokens = proposal.tokens[idx, :k].to(self.device)
            nd = proposal.num_draft[idx].to(self.device)
            if greedy:
                n, out = greedy_verify(tokens, nd, target)
            else:
                p = sampling_probs(target, [seqs[i].sampling for i in rows])
                q = proposal.probs[idx, :k].to(self.device)
                n, out = rejection_sample(tokens, nd, q, p, self.generator)
            for r, (i, ni) in enumerate(zip(rows, n.tolist(), strict=True)):
                accepted[i] = ni
                emitted[i] = out[r, : ni + 1].tolist()
        return accepted, emitted

    def _record_timing(
        self, rounds: list[Sequence], new: list[Sequence], num_draft: list[int], passes_before: int, verify_s: float
    ) -> None:
        """Batch-1 pass times (a lone running sequence, no prefill) feed the measured c and v(K)."""
        if len(rounds) != 1 or new:
            return
        self.timings.add_verify(num_draft[0], verify_s)
        passes = getattr(self.proposer, "pass_seconds", [])[passes_before:]
        # a decode-like pass: one sequence, at most the 2-token catch-up after a full accept (not a draft prefill)
        self.timings.draft_pass_s += [s for b, n, s in passes if b == 1 and n <= 2]

    def _finish(self, seq: Sequence) -> None:
        self.kv_manager.free(seq.request_id)
        if isinstance(self.backend, CompressedBackend):
            self.backend.drop_freed()  # its staged blocks go now, not next step
        self.proposer.free(seq.request_id)
        self.controller.forget(seq.request_id)
        self._committed_blocks -= self._lifetime_blocks(seq)
        seq.status = SequenceStatus.FINISHED
        self.running.remove(seq)

    # -- results --------------------------------------------------------------------------------
    def output(self, request_id: int) -> list[int]:
        return list(self.sequences[request_id].output_ids)

    def release(self, request_id: int) -> None:
        self.sequences.pop(request_id, None)
        self.request_counters.pop(request_id, None)

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int | list[int], sampling: SamplingParams | None = None
    ) -> list[list[int]]:
        """Run prompts to completion; outputs in prompt order."""
        return run_to_completion(self, prompts, max_new_tokens, sampling)
