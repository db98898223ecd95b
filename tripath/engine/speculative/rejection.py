"""Verification of a speculative proposal: modified rejection sampling and its greedy limit.

Leviathan et al. 2023 (Fast Inference from Transformers via Speculative Decoding), Chen et
al. 2023: draft token x_i ~ q_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); at
the first rejection the replacement is drawn from norm(max(p_i - q_i, 0)); if all proposed
tokens are accepted a bonus token is drawn from the target's next distribution.  The emitted
tokens are then distributed exactly as p, whatever q is.  Greedy verification is the same
rule with one-hot p and q: accept while the draft token is the target's argmax.

Pure tensor functions over a padded batch: row b proposed num_draft[b] <= K tokens.  A
deterministic proposer (prompt lookup) passes a one-hot q, which keeps the rule lossless.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tripath.engine.sampling import SamplingParams, top_p_filter


def _valid(num_draft: Tensor, k: int) -> Tensor:
    """[B, K] mask of the proposal slots that hold a real draft token."""
    return torch.arange(k, device=num_draft.device).unsqueeze(0) < num_draft.unsqueeze(1)


def _emitted(draft_tokens: Tensor, num_accepted: Tensor, last: Tensor) -> Tensor:
    """The round's output per row: accepted drafts then one target token, -1 after: [B, K+1]."""
    b, k = draft_tokens.shape
    out = torch.cat([draft_tokens, draft_tokens.new_zeros(b, 1)], dim=1)  # [B, K+1]
    rows = torch.arange(b, device=out.device)
    out[rows, num_accepted] = last
    keep = torch.arange(k + 1, device=out.device).unsqueeze(0) <= num_accepted.unsqueeze(1)
    return out.masked_fill(~keep, -1)


def greedy_verify(draft_tokens: Tensor, num_draft: Tensor, target_logits: Tensor) -> tuple[Tensor, Tensor]:
    """draft_tokens [B, K], num_draft [B], target_logits [B, K+1, V] -> (num_accepted [B], emitted [B, K+1]).

    Accept while the draft token equals the target argmax; then emit the target argmax at the
    first mismatch (or after the last draft: the bonus token).  Output = greedy target decoding.
    """
    b, k = draft_tokens.shape
    best = target_logits.argmax(-1)  # [B, K+1]
    match = (draft_tokens == best[:, :k]) & _valid(num_draft, k)  # [B, K]
    num_accepted = match.long().cumprod(1).sum(1)  # leading run of matches
    last = best[torch.arange(b, device=best.device), num_accepted]
    return num_accepted, _emitted(draft_tokens, num_accepted, last)


def rejection_sample(
    draft_tokens: Tensor,
    num_draft: Tensor,
    draft_probs: Tensor,
    target_probs: Tensor,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor]:
    """Modified rejection sampling.

    draft_tokens [B, K] (x_i ~ q_i), num_draft [B], draft_probs q [B, K, V], target_probs p [B, K+1, V]
    -> (num_accepted [B], emitted [B, K+1] with -1 after each row's last token).
    """
    b, k = draft_tokens.shape
    device = target_probs.device
    valid = _valid(num_draft, k)
    p_at = target_probs[:, :k].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)  # p_i(x_i): [B, K]
    q_at = draft_probs.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)  # q_i(x_i): [B, K]
    u = torch.rand(b, k, generator=generator, device=device, dtype=target_probs.dtype)
    # u < p/q written without the division: q(x) > 0 for a sampled x; p >= q accepts always (u < 1)
    accept = (u * q_at < p_at) & valid
    num_accepted = accept.long().cumprod(1).sum(1)  # [B]
    rows = torch.arange(b, device=device)
    p_next = target_probs[rows, num_accepted]  # [B, V]
    q_pad = torch.cat([draft_probs, draft_probs.new_zeros(b, 1, draft_probs.shape[-1])], dim=1)  # [B, K+1, V]
    # after a full accept (n == num_draft) q is taken as 0: the bonus token comes from p itself
    rejected = (num_accepted < num_draft).unsqueeze(1)
    q_next = torch.where(rejected, q_pad[rows, num_accepted], torch.zeros_like(p_next))
    residual = (p_next - q_next).clamp_min(0.0)  # max(p - q, 0)
    mass = residual.sum(-1, keepdim=True)
    # mass 0 only when p == q at a rejected slot, which has probability 0; p is then the right law
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_next)
    last = torch.multinomial(residual, 1, generator=generator).squeeze(1)
    return num_accepted, _emitted(draft_tokens, num_accepted, last)


def sampling_probs(logits: Tensor, params: list[SamplingParams]) -> Tensor:
    """logits [B, T, V] -> the distribution plain sampling draws from (temperature, then top-p): [B, T, V].

    Greedy rows become one-hot at the argmax, so rejection sampling reduces to greedy_verify there.
    """
    b, t, v = logits.shape
    out = torch.empty(b, t, v, dtype=torch.float32, device=logits.device)
    for i, sp in enumerate(params):
        if sp.greedy:
            out[i] = torch.nn.functional.one_hot(logits[i].argmax(-1), v).float()
        else:
            probs = torch.softmax(logits[i].float() / sp.temperature, dim=-1)  # [T, V]
            out[i] = top_p_filter(probs, torch.full((t,), sp.top_p, device=logits.device))
    return out
