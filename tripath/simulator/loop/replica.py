"""What a replica is configured with, and the per-request ledger every replica fills in.

The loop itself is tripath/simulator/loop/stepper.py: one Stepper per replica, whose exact fast path
(``Stepper.fast_forward`` with a ``RunBooking``, tripath/simulator/loop/run.py) serves the baseline and its
deterministic transforms a run of unchanging iterations per event. The baseline's rules, as configured here:

- At each iteration boundary, requests that emitted their last token leave and free their KV; then waiting
  requests are admitted strictly FCFS (stop at the first that does not fit) while the batch has fewer than
  max_batch_size sequences, the request's KV reservation ((prompt + output) tokens * kv_bytes_per_token, held
  until it finishes, so nothing is ever preempted) fits the free KV, and the iteration's prefill tokens stay
  within max_batched_tokens. The first prefill of an iteration is always allowed, whatever its length, so a
  prompt longer than max_batched_tokens is still served (alone) and never starves.
- Admitted requests are prefilled in that iteration and emit their first token at its end; requests already
  running decode one token each. A request with output_tokens = n finishes at the end of its prefill iteration
  plus n - 1 decode iterations.
- With nothing running and nothing waiting the replica sleeps until a request is routed to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicaConfig:
    """Batching limits and the KV budget of one replica."""

    max_batch_size: int
    max_batched_tokens: int
    kv_capacity_bytes: int
    kv_bytes_per_token: int

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_batched_tokens", "kv_bytes_per_token"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.kv_capacity_bytes < 0:
            raise ValueError(f"kv_capacity_bytes must be >= 0, got {self.kv_capacity_bytes}")


class Ledger:
    """Per-request lengths and the times the replicas fill in, indexed by position in the workload."""

    def __init__(self, prompts: Sequence[int], outputs: Sequence[int], kv_bytes_per_token: int,
                 merge: bool = False) -> None:
        n = len(prompts)
        self.prompt = list(prompts)
        self.output = list(outputs)
        self.reserve = [(p + o) * kv_bytes_per_token for p, o in zip(prompts, outputs, strict=True)]
        self.replica = [-1] * n
        self.admitted = [float("nan")] * n
        self.first_token = [float("nan")] * n
        self.finish = [float("nan")] * n
        self.merge_s = [0.0] * n if merge else None  # SP merge seconds over each request's iterations
        # told of every finish (closed-loop arrivals: tripath/simulator/loop/cluster.py); None: nobody listens
        self.on_finish: Callable[[int, float], None] | None = None

    def finished(self, request: int, end: float) -> None:
        """Record that ``request`` emitted its last token at ``end``, and tell whoever listens."""
        self.finish[request] = end
        if self.on_finish is not None:
            self.on_finish(request, end)
