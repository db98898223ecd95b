"""Next-token choice: greedy, or temperature + nucleus (top-p, Holtzman et al. 2020), seeded."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy (argmax); top_p keeps the smallest set of tokens with mass >= top_p."""

    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0) or math.isinf(self.temperature):
            raise ValueError(f"SamplingParams.temperature: must be finite and >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"SamplingParams.top_p: must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def top_p_filter(probs: Tensor, top_p: Tensor) -> Tensor:
    """probs [B, V], top_p [B] -> renormalised probs with everything outside each row's nucleus zeroed."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs  # mass of strictly more likely tokens
    keep_sorted = mass_before < top_p.unsqueeze(1)  # always keeps the most likely token
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    filtered = probs * keep
    return filtered / filtered.sum(-1, keepdim=True)


def sample(logits: Tensor, params: list[SamplingParams], generator: torch.Generator | None) -> Tensor:
    """logits [B, V] -> token ids [B]; rows with temperature 0 are argmax and use no randomness."""
    tokens = logits.argmax(-1)
    stochastic = [i for i, p in enumerate(params) if not p.greedy]
    if not stochastic:
        return tokens
    if generator is None:
        raise ValueError("generator: temperature sampling needs a torch.Generator (randomness is passed in)")
    idx = torch.tensor(stochastic, device=logits.device)
    temps = torch.tensor([params[i].temperature for i in stochastic], device=logits.device)
    top_p = torch.tensor([params[i].top_p for i in stochastic], device=logits.device)
    probs = torch.softmax(logits[idx].float() / temps.unsqueeze(1), dim=-1)  # [S, V]
    probs = top_p_filter(probs, top_p)
    drawn = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    tokens[idx] = drawn
    return tokens
