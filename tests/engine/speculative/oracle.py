"""A test instrument shared by the speculative-engine tests: a proposer that knows the target's greedy continuation."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence as Seq

import torch

from tripath.engine.sequence import Sequence
from tripath.engine.speculative.proposers import Proposal, _pack


class OracleProposer:
    """Proposes the target's known greedy continuation, right for the first ``right[request_id]`` tokens of each
    round and wrong (the next token id) after, so rounds have full accepts, partial ones and rejections; requests
    are looked up by id in ``reference`` and ``right`` (lists or dicts)."""

    def __init__(self, reference: Seq[list[int]] | Mapping[int, list[int]], right: Seq[int] | Mapping[int, int],
                 vocab: int) -> None:
        self.reference, self.right, self.vocab = reference, right, vocab

    def propose(self, seqs: list[Sequence], ks: list[int]) -> Proposal:
        out = []
        for s, k in zip(seqs, ks, strict=True):
            ref = self.reference[s.request_id][len(s.output_ids) : len(s.output_ids) + k]
            out.append([t if j < self.right[s.request_id] else (t + 1) % self.vocab for j, t in enumerate(ref)])
        eye = torch.eye(self.vocab)
        return _pack(out, [[eye[t] for t in toks] for toks in out], max(ks), self.vocab, torch.device("cpu"))

    def commit(self, seq: Sequence) -> None:
        pass

    def free(self, request_id: int) -> None:
        pass
