"""One engine iteration as measured: its phase mix, its latency, and (tiered KV) its paging.

The raw material for calibration (prefill tokens, decode sequences, total context -> latency).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepRecord:
    """One iteration: its phase mix and its latency (seconds, measured after device sync)."""

    step: int
    start_s: float  # time.perf_counter() at the start of the step
    wall_s: float
    batch_size: int  # sequences in the forward pass
    num_tokens: int  # tokens in the forward pass
    prefill_seqs: int
    prefill_tokens: int  # prompt / recompute tokens (chunks that are not a single decode token)
    decode_seqs: int
    total_context: int  # sum over the batch of tokens attended to (cached + new)
    num_preempted: int
    blocks_used: int  # KV blocks held by live sequences after the step
    admitted: tuple[int, ...]  # request ids scheduled for the first time in this step
    first_tokens: tuple[int, ...]  # request ids that produced their first output token in this step
    finished: tuple[int, ...]  # request ids that finished in this step
    # tiered KV only (zero otherwise), measured inside the transfers during this step; keyword-only so
    # subclasses (SpecStepRecord) can keep adding fields without defaults
    paging_bytes_device_host: int = field(default=0, kw_only=True)
    paging_bytes_host_device: int = field(default=0, kw_only=True)
    paging_bytes_host_ssd: int = field(default=0, kw_only=True)
    paging_bytes_ssd_host: int = field(default=0, kw_only=True)
    paging_s_device_host: float = field(default=0.0, kw_only=True)
    paging_s_host_device: float = field(default=0.0, kw_only=True)
    paging_s_host_ssd: float = field(default=0.0, kw_only=True)
    paging_s_ssd_host: float = field(default=0.0, kw_only=True)
    paging_stall_s: float = field(default=0.0, kw_only=True)  # main-thread time paging or waiting for it
    failed: tuple[int, ...] = field(default=(), kw_only=True)  # request ids a tier fault ended in this step
    # (cached tokens, new tokens) per sequence in the forward, in the scheduler's order (decodes first):
    # the step's exact shape, for pricing it as the simulator would (scripts/measurements/step_residuals.py)
    chunk_shapes: tuple[tuple[int, int], ...] = field(default=(), kw_only=True)

    def to_dict(self) -> dict[str, float | int]:
        return {k: v for k, v in self.__dict__.items() if not isinstance(v, tuple)}
