"""Where an Engine keeps its sequences' K/V: the interface the serving loop calls (the choice among back ends,
``make_backend``, is tripath/engine/backends.py, above both ``kv`` and ``tiered``).

A back end owns the block accounting the Scheduler reserves against (``manager``) and the K/V behind
it. Per step the loop calls ``prepare`` (before the forward: apply copy-on-write block copies, drop
what finished sequences left behind), ``attention`` (the callable the model's forward writes and
attends through), ``faults`` (requests that pass ended, with why) and ``step_fields`` (what the
back end measured, for the StepRecord). ``check_request`` says why a sequence of that many KV slots
can never fit, ``kv_bytes`` what the K/V tensors hold resident, ``close`` releases what outlives a step.
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor

from tripath.engine.kv.paged import KVCacheManager
from tripath.engine.kv.paged_attention import SequenceChunk


class StepAttention(Protocol):
    """The attention callable of one forward pass: LlamaModel's AttentionFn plus the packed positions [1, N]."""

    positions: Tensor

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor: ...


class KVBackend(Protocol):
    manager: KVCacheManager

    def check_request(self, kv_tokens: int) -> str | None: ...

    def prepare(self, copies: list[tuple[int, int]]) -> None: ...

    def attention(self, chunks: list[SequenceChunk], request_ids: list[int]) -> StepAttention: ...

    def faults(self, attention: StepAttention) -> dict[int, str]: ...

    def step_fields(self) -> dict[str, Any]: ...

    def kv_bytes(self) -> int: ...

    def close(self) -> None: ...
