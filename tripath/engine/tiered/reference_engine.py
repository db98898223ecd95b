"""Greedy serving over a TieredKVCache: requests interleave step by step, a tier fault fails only its request.

This is the tiered path's own small serving loop (batch 1 per forward pass, requests taken round
robin), kept for the paging measurements (tripath/engine/tiered/paging_meter.py) and as a reference; to serve
many sequences with continuous batching on tiered KV use Engine(model, EngineConfig(tiered=...))
(tripath/engine/tiered/store.py, tripath/engine/tiered/batch_attention.py).
A TierFault (disk full, missing or corrupt page, unwritable directory, device pool exhausted)
while running request r ends r with the fault's message and frees r's pages; every other request
keeps its pages and continues, and later requests are served normally.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.attention import TieredAttention
from tripath.engine.tiered.cache import TieredKVCache
from tripath.engine.tiered.tiers import TierConfig, TierFault


@dataclass(frozen=True)
class TieredResult:
    request_id: int
    output_ids: tuple[int, ...]
    error: str | None = None  # "<FaultClass>: message" when a tier fault ended the request

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _Live:
    request_id: int
    prompt_ids: list[int]
    max_new_tokens: int
    output_ids: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)  # last-position logits per step, if kept


class TieredEngine:
    """Round-robin greedy generation of several requests whose KV lives in one set of tiers."""

    def __init__(self, model: LlamaModel, tier_config: TierConfig, sink_tokens: int = 4,
                 window_tokens: int = 256, prefetch: bool = True, keep_logits: bool = False) -> None:
        self.model = model.eval()
        param = next(model.parameters())
        self.device = param.device
        self.cache = TieredKVCache(model.config, tier_config, param.dtype, param.device, sink_tokens,
                                   window_tokens, prefetch)
        self.keep_logits = keep_logits
        self.live: dict[int, _Live] = {}
        self.results: dict[int, TieredResult] = {}
        self.logits: dict[int, list[torch.Tensor]] = {}  # per finished request, when keep_logits
        self._next_id = 0

    def add_request(self, prompt_ids: list[int], max_new_tokens: int) -> int:
        if not prompt_ids or max_new_tokens < 1:
            raise ValueError("prompt_ids must be non-empty and max_new_tokens >= 1")
        total = len(prompt_ids) + max_new_tokens - 1
        if total > self.model.config.max_position_embeddings:
            raise ValueError(f"prompt + output needs {total} positions, the model has "
                             f"{self.model.config.max_position_embeddings}")
        rid = self._next_id
        self._next_id += 1
        self.live[rid] = _Live(rid, list(prompt_ids), max_new_tokens)
        return rid

    @torch.inference_mode()
    def _forward(self, req: _Live) -> torch.Tensor:
        """One prefill (first call) or decode step of req; returns the last position's logits [V]."""
        if req.output_ids:
            ids, start = [req.output_ids[-1]], len(req.prompt_ids) + len(req.output_ids) - 1
        else:
            ids, start = req.prompt_ids, 0
        tokens = torch.tensor([ids], device=self.device)  # [1, Tn]
        positions = torch.arange(start, start + len(ids), device=self.device).unsqueeze(0)  # [1, Tn]
        last = torch.tensor([len(ids) - 1], device=self.device)
        attention = TieredAttention(self.cache, req.request_id)
        return self.model(tokens, positions, attention, logits_index=last)[0, -1]

    def step(self) -> None:
        """One forward pass for every live request, in id order."""
        for rid in sorted(self.live):
            req = self.live[rid]
            try:
                logits = self._forward(req)
            except TierFault as fault:
                self._finish(req, f"{type(fault).__name__}: {fault}")
                continue
            if self.keep_logits:
                req.logits.append(logits.clone())
            req.output_ids.append(int(logits.argmax()))
            if len(req.output_ids) >= req.max_new_tokens:
                self._finish(req, None)

    def _finish(self, req: _Live, error: str | None) -> None:
        self.cache.free(req.request_id)
        del self.live[req.request_id]
        self.results[req.request_id] = TieredResult(req.request_id, tuple(req.output_ids), error)
        if self.keep_logits:
            self.logits[req.request_id] = req.logits

    def run(self) -> list[TieredResult]:
        """Serve every live request to the end; results in request-id order."""
        ids = sorted(self.live)
        while self.live:
            self.step()
        return [self.results[i] for i in ids]

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> TieredResult:
        rid = self.add_request(prompt_ids, max_new_tokens)
        while rid in self.live:
            self.step()
        return self.results[rid]

    def close(self) -> None:
        """Free the tiers; the SSD tier's temp directory and files are removed."""
        for rid in list(self.live):
            self.cache.free(rid)
        self.live.clear()
        self.cache.close()

    def __enter__(self) -> TieredEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
