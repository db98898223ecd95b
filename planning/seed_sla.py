"""The SLA and load of each seed-matrix cell, derived from the seed's tables and the seed profile.

The seed's decision matrix (SEEDS.md Section 4) states no SLA and no load; its claims are
per-token (decode) latencies of one request at a time (Tables 3.1-3.3) and memory feasibility.
Each cell's ``[sla]``, ``load_fraction`` and ``max_batch_size`` are derived here, from those
tables and the profile's own cost models, never from which candidate wins; the shipped scenario
files carry the rounded results and tests/test_matrix_seed.py checks they still match.

- TPOT P99 target: the seed's P99 latency (Table 3.2, the only table that reports a P99) at the
  upper end of the row's length band. A P99 over prompts uniform in [L, U] is set by prompts
  near U, and this is what the seed itself says a request of length U gets.
- TTFT P99 target: the profile's prefill of the band's longest prompt alone, prefill(U, 0) (the
  seed gives no prefill time; the profile's is a derived compute roofline), plus waiting for one
  request of the band's mean size served alone ahead of it (prefill + decodes at batch 1): the
  smallest target a single stream can physically meet when an arrival finds the GPU busy.
- Load: a Poisson arrival finds two or more requests in an M/M/1 system with probability rho^2
  (PASTA); rho = 0.1 makes that 1%, so at the P99 a request waits for at most one request ahead,
  which is the TTFT target's allowance. The seed's latencies are of requests served alone.
- Batch size 1: the seed profile's KV budget holds one 8K-token request (saturation B* = 1), its
  decode model is fitted at batch 1 only (domain [1, 1]), and its decode step grows with the
  batch's total context (d_ctx dominates), so batching adds no throughput on it, only latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.capacity import saturation
from simulator.profile import Profile

# SEEDS.md Table 3.2, "P99 latency" column (ms) by context length (tokens).
SEED_P99_MS: dict[int, float] = {4096: 45.0, 8192: 80.0, 16384: 120.0, 32768: 200.0, 65536: 350.0}
LOAD_FRACTION = 0.1  # rho with rho^2 = 1% (see the module docstring)
MAX_BATCH_SIZE = 1


@dataclass(frozen=True)
class CellSla:
    """One cell's derived targets and the numbers they came from (ms)."""

    upper_tokens: int
    tpot_ms: float
    prefill_upper_ms: float
    mean_service_ms: float

    def __post_init__(self) -> None:
        if self.upper_tokens not in SEED_P99_MS:
            raise ValueError(f"no seed P99 at {self.upper_tokens} tokens (Table 3.2 has {sorted(SEED_P99_MS)})")

    @property
    def ttft_ms(self) -> float:
        """prefill(U) + one mean request ahead, rounded up to the next second (the files hold it)."""
        return 1000.0 * math.ceil((self.prefill_upper_ms + self.mean_service_ms) / 1000.0)

    def derivation(self) -> str:
        return (f"TPOT {self.tpot_ms:.0f} ms = seed Table 3.2 P99 at {self.upper_tokens} tokens; "
                f"TTFT {self.ttft_ms:.0f} ms = prefill({self.upper_tokens}) {self.prefill_upper_ms:.0f} ms "
                f"+ one mean request served alone {self.mean_service_ms:.0f} ms, rounded up to the second")


def cell_sla(profile: Profile, upper_tokens: int, mean_prompt: float, mean_output: float) -> CellSla:
    """The derived targets of a cell whose prompts reach ``upper_tokens``, with these mean lengths."""
    # one request served alone: the saturation estimate at batch 1 is exactly 1 / its service time
    alone = saturation(profile, mean_prompt, mean_output, 1, 1, int(profile.kv_capacity_bytes))
    if upper_tokens not in SEED_P99_MS:
        raise ValueError(f"no seed P99 at {upper_tokens} tokens (Table 3.2 has {sorted(SEED_P99_MS)})")
    return CellSla(upper_tokens, SEED_P99_MS[upper_tokens], profile.prefill_ms(upper_tokens, 0),
                   1000.0 / alone.requests_per_s_per_replica)
