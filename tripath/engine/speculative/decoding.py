"""Speculative decoding as Engine's decoding strategy (tripath/engine/decoding.py): draft-propose, target-verify.

Each step, every decoding sequence gets its own K from the controller, capped so a request never
overshoots max_new_tokens; the scheduler reserves K slots past its next token (preempting as for any
growth).  The proposer drafts K tokens, the engine's ONE forward pass scores [last token, d_1..d_K]
of every such sequence together with the step's prefill chunks, rejection sampling (greedy: argmax
matching) accepts a prefix of n drafts per sequence and adds one target token, and both KV caches
are truncated back to exactly the accepted tokens (KVCacheManager.truncate).  K = 0 is plain
decoding: the rows and the sampler call are exactly PlainDecoding's.

With EngineConfig.kv_compression the target's KV lives in a CompressedKVStore: the verify pass
does not seal, the store is rolled back, then sealed (tripath/engine/speculative/compressed.py).
A preempted sequence's draft cache is dropped with the target's; the draft catches up when it
decodes again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from tripath.core.speculative import Controller, FixedK
from tripath.engine.decoding import DecodeStrategy
from tripath.engine.kv.compressed_backend import CompressedBackend
from tripath.engine.kv.paged_backend import PagedBackend
from tripath.engine.sampling import sample
from tripath.engine.scheduler import ScheduledChunk
from tripath.engine.sequence import Sequence
from tripath.engine.speculative.compressed import VerifyAttention, rollback
from tripath.engine.speculative.metrics import SpecCounters, SpecTimings
from tripath.engine.speculative.proposers import Proposal, Proposer
from tripath.engine.speculative.rejection import greedy_verify, rejection_sample, sampling_probs
from tripath.engine.step_record import StepRecord

if TYPE_CHECKING:
    from tripath.engine.engine_config import EngineConfig
    from tripath.engine.kv.backend import KVBackend, StepAttention
    from tripath.engine.kv.paged_attention import SequenceChunk


@dataclass(frozen=True)
class SpecStepRecord(StepRecord):
    """A StepRecord (the same calibration fields) plus what the speculative round did."""

    draft_s: float  # wall time of the proposer (draft passes or lookups)
    verify_s: float  # wall time of the single target pass (with verification)
    draft_passes: int
    num_drafts: int  # sequences that proposed >= 1 token
    draft_tokens: int
    accepted_tokens: int
    emitted_tokens: int  # tokens appended to outputs this step (prefills' first tokens included)
    ks: tuple[int, ...]  # tokens proposed per decoding sequence (0: plain decoding)


class SpeculativeDecoding(DecodeStrategy):
    """``proposer`` drafts (a DraftModelProposer needs a pool of at least the engine's num_blocks blocks of its
    block_size), ``controller`` picks K per sequence and round (FixedK(4))."""

    def __init__(self, proposer: Proposer, controller: Controller | None = None) -> None:
        self.proposer = proposer
        self.controller = controller if controller is not None else FixedK(4)
        self.counters = SpecCounters()  # engine-wide
        self.request_counters: dict[int, SpecCounters] = {}
        self.timings = SpecTimings()  # only batch-1 passes (see _record_timing)
        self._backend: PagedBackend | CompressedBackend | None = None
        self.generator: torch.Generator | None = None
        self._step: dict[str, Any] = {}  # this step's rounds, between propose and record

    def bind(self, backend: KVBackend, config: EngineConfig, generator: torch.Generator | None) -> None:
        if self._backend is not None:
            raise ValueError("SpeculativeDecoding: already serves an engine; make one per engine")
        if config.tiered is not None:
            raise ValueError("EngineConfig.tiered: speculative decoding has no tiered KV")
        if not isinstance(backend, PagedBackend | CompressedBackend):
            raise ValueError(f"speculative decoding needs a paged or compressed KV back end, "
                             f"not {type(backend).__name__}")
        self._backend, self.generator = backend, generator

    @property
    def backend(self) -> PagedBackend | CompressedBackend:
        if self._backend is None:
            raise RuntimeError("SpeculativeDecoding: not bound to an Engine")
        return self._backend

    def check_request(self, prompt_len: int, max_new_tokens: int) -> str | None:
        draft = getattr(self.proposer, "model", None)
        total = prompt_len + max_new_tokens
        # the draft sees positions up to total - 3 (its last proposal is never fed)
        if draft is not None and total > draft.config.max_position_embeddings + 1:
            return (f"prompt + output = {total} tokens exceeds the draft's max_position_embeddings "
                    f"{draft.config.max_position_embeddings} (+ 1)")
        return None

    def lookahead(self, seq: Sequence) -> int:
        # K <= remaining - 1: the round's K+1 tokens never pass max_new_tokens (nor the request's KV budget)
        return max(0, min(self.controller.choose(seq.request_id), seq.max_new_tokens - len(seq.output_ids) - 1))

    def propose(self, chunks: list[ScheduledChunk]) -> list[list[int]]:
        rounds = [i for i, ch in enumerate(chunks) if ch.seq.is_decode]
        seqs = [chunks[i].seq for i in rounds]
        ks = [chunks[i].num_lookahead for i in rounds]
        passes_before = len(getattr(self.proposer, "pass_seconds", []))
        t0 = time.perf_counter()
        proposal = self.proposer.propose(seqs, ks) if any(ks) else None
        draft_s = time.perf_counter() - t0
        num_draft = proposal.num_draft.tolist() if proposal is not None else [0] * len(rounds)
        drafts: list[list[int]] = [[] for _ in chunks]
        for r, i in enumerate(rounds):
            if num_draft[r]:
                drafts[i] = proposal.tokens[r, : num_draft[r]].tolist()
        self._step = {"round_of": {s.request_id: r for r, s in enumerate(seqs)}, "num_draft": num_draft,
                      "proposal": proposal, "draft_s": draft_s, "passes_before": passes_before, "accepted": {},
                      "emitted": 0, "chunks": len(chunks)}
        return drafts

    def attention(self, chunks: list[SequenceChunk], request_ids: list[int]) -> StepAttention:
        backend = self.backend
        if isinstance(backend, CompressedBackend):  # sealing waits for the rollback (settle)
            return VerifyAttention(backend.store, chunks, backend.group)
        return backend.attention(chunks, request_ids)

    def accept(self, seqs: list[Sequence], logits: Tensor,
               spans: list[tuple[int, int]]) -> list[tuple[int, list[int]]]:
        """Per sampling sequence: drafts accepted and tokens emitted.  Rows without drafts go through the
        plain sampler in one call (same rows, same order, same generator use as PlainDecoding)."""
        step, generator = self._step, self.generator
        index = step["round_of"]  # request id -> its round (decoding sequences)
        nd = [step["num_draft"][index[s.request_id]] if s.request_id in index else 0 for s in seqs]
        accepted, emitted = [0] * len(seqs), [[] for _ in seqs]
        plain = [i for i in range(len(seqs)) if nd[i] == 0]
        if plain:
            last = torch.stack([logits[spans[i][1] - 1] for i in plain])  # [P, V]
            toks = sample(last, [seqs[i].sampling for i in plain], generator)
            for i, t in zip(plain, toks.tolist(), strict=True):
                emitted[i] = [int(t)]
        proposal: Proposal | None = step["proposal"]
        spec = [i for i in range(len(seqs)) if nd[i]]
        for greedy in (True, False):
            rows = [i for i in spec if seqs[i].sampling.greedy == greedy]
            if not rows or proposal is None:
                continue
            k = max(nd[i] for i in rows)
            target = logits.new_zeros(len(rows), k + 1, logits.shape[-1])
            for r, i in enumerate(rows):
                a, b = spans[i]
                target[r, : b - a] = logits[a:b]  # [K_i + 1, V] -> padded [K + 1, V]
            idx = torch.tensor([index[seqs[i].request_id] for i in rows], device=proposal.tokens.device)
            tokens = proposal.tokens[idx, :k].to(logits.device)
            num = proposal.num_draft[idx].to(logits.device)
            if greedy:
                n, out = greedy_verify(tokens, num, target)
            else:
                assert proposal.probs is not None  # a sampled row has its q
                p = sampling_probs(target, [seqs[i].sampling for i in rows])
                q = proposal.probs[idx, :k].to(logits.device)
                n, out = rejection_sample(tokens, num, q, p, generator)
            for r, (i, ni) in enumerate(zip(rows, n.tolist(), strict=True)):
                accepted[i] = ni
                emitted[i] = out[r, : ni + 1].tolist()
        step["accepted"] = {s.request_id: a for s, a in zip(seqs, accepted, strict=True)}
        step["emitted"] = sum(len(e) for e in emitted)
        return list(zip(accepted, emitted, strict=True))

    def settle(self, seq: Sequence) -> None:
        """Rejected drafts leave the target's cache (and the compressed store, which then seals what it can)."""
        backend = self.backend
        if isinstance(backend, CompressedBackend):
            rollback(backend.store, backend.manager, seq.request_id, seq.num_computed)
        else:
            backend.manager.truncate(seq.request_id, seq.num_computed)
        r = self._step["round_of"].get(seq.request_id)
        if r is None:  # a prefill or recompute chunk: no round
            return
        num_draft, accepted = self._step["num_draft"][r], self._step["accepted"].get(seq.request_id, 0)
        self.proposer.commit(seq)
        self.controller.observe(seq.request_id, num_draft, accepted)
        self.counters.record(num_draft, accepted)
        self.request_counters.setdefault(seq.request_id, SpecCounters()).record(num_draft, accepted)

    def preempted(self, seq: Sequence) -> None:
        self.proposer.free(seq.request_id)  # the draft recomputes too (and its pool never outgrows the target's)

    def finished(self, seq: Sequence) -> None:
        backend = self.backend
        if isinstance(backend, CompressedBackend):
            backend.drop_freed()  # its staged blocks go now, not next step
        self.proposer.free(seq.request_id)
        self.controller.forget(seq.request_id)

    def request_fields(self, request_id: int) -> dict[str, int]:
        counters = self.request_counters.get(request_id, SpecCounters())
        return {"draft_rounds": counters.num_drafts, "accepted_tokens": counters.num_accepted_tokens}

    def release(self, request_id: int) -> None:
        self.request_counters.pop(request_id, None)

    def record(self, fields: dict[str, Any], forward_s: float) -> SpecStepRecord:
        step = self._step
        num_draft = step["num_draft"]
        passes = getattr(self.proposer, "pass_seconds", [])
        alone = len(num_draft) == 1 and step["chunks"] == 1  # one decoding sequence, no prefill
        if alone:  # batch-1 pass times feed the measured c and v(K)
            self.timings.add_verify(num_draft[0], forward_s)
            # a decode-like pass: one sequence, at most the 2-token catch-up after a full accept (not a draft prefill)
            self.timings.draft_pass_s += [s for b, n, s in passes[step["passes_before"]:] if b == 1 and n <= 2]
        return SpecStepRecord(
            **fields,
            draft_s=step["draft_s"],
            verify_s=forward_s,
            draft_passes=len(passes) - step["passes_before"],
            num_drafts=sum(1 for n in num_draft if n),
            draft_tokens=sum(num_draft),
            accepted_tokens=sum(step["accepted"].values()),  # rows without drafts accept 0
            emitted_tokens=step["emitted"],
            ks=tuple(num_draft),
        )
