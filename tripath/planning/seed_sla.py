"""The SLA and load of each seed-matrix cell, derived from the seed's tables and the seed profile.

The seed's decision matrix (SEEDS.md Section 4) states no SLA and no load; its claims are
per-token (decode) latencies of one request at a time (Tables 3.1-3.3) and memory feasibility.
Each cell's ``[sla]``, ``load_fraction`` and ``max_batch_size`` are derived here, from those
tables and the profile's own cost models, never from which candidate wins; the shipped scenario
files carry the rounded results and tests/planning/test_matrix_seed.py checks they still match.

- TPOT P99 target: the seed's P99 latency (Table 3.2, the only table that reports a P99) at the
  upper end of the row's length band. A P99 over prompts uniform in [L, U] is set by prompts
  near U, and this is what the seed itself says a request of length U gets.
- TTFT P99 target: the profile's prefill of the band's longest prompt alone, prefill(U, 0) (the
  seed gives no prefill time; the profile's is a derived compute roofline), plus the P99 wait of
  a single stream at the cell's load on the seed's premise that the requests fit: one request
  at a time, each served in S = prefill(P) + (O - 1) decode(1, P + O/2) (batch 1, KV no object).
  An arrival finds the GPU busy with probability rho and then waits the residual R of the request
  in service (at most one ahead at the P99, see Load), whose tail is the equilibrium one,
  P(R > t) = E[(S - t)+] / E[S] (length-biased: arrivals land in long services more often). The
  P99 wait t solves rho P(R > t) = 1%, over the band's lengths drawn from the scenario's own
  workload (20,000 draws, seed 0).
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
from typing import Any

import numpy as np

from tripath.planning.scenario_dict import build, with_fields
from tripath.profile.profile import Profile
from tripath.simulator.scenario.workload import generate_arrays

# SEEDS.md Table 3.2, "P99 latency" column (ms) by context length (tokens).
SEED_P99_MS: dict[int, float] = {4096: 45.0, 8192: 80.0, 16384: 120.0, 32768: 200.0, 65536: 350.0}
# SEEDS.md Table 3.3, "1 GPU" column (ms per token, no paging): what the profile's decode is fitted to.
SEED_1GPU_MS: dict[int, float] = {4096: 45.0, 8192: 80.0, 16384: 160.0, 32768: 320.0}
# Each seed-matrix cell's upper prompt length (its scenario file's prompt_tokens.high).
CELL_UPPER: dict[str, int] = {"dialogue-medium": 16384, "math-medium": 16384, "summarization-very-long": 32768,
                              "fixed-length-multi-gpu": 32768, "very-long-single-gpu": 65536}
LOAD_FRACTION = 0.1  # rho with rho^2 = 1% (see the module docstring)
MAX_BATCH_SIZE = 1
P99_TAIL = 0.01


@dataclass(frozen=True)
class CellSla:
    """One cell's derived targets and the numbers they came from (ms)."""

    upper_tokens: int
    tpot_ms: float
    prefill_upper_ms: float
    wait_p99_ms: float

    def __post_init__(self) -> None:
        if self.upper_tokens not in SEED_P99_MS:
            raise ValueError(f"no seed P99 at {self.upper_tokens} tokens (Table 3.2 has {sorted(SEED_P99_MS)})")
        if not self.wait_p99_ms >= 0.0:
            raise ValueError(f"wait_p99_ms must be >= 0, got {self.wait_p99_ms}")

    @property
    def ttft_ms(self) -> float:
        """prefill(U) + the P99 wait, rounded up to the next second (the files hold it)."""
        return 1000.0 * math.ceil((self.prefill_upper_ms + self.wait_p99_ms) / 1000.0)

    def derivation(self) -> str:
        return (f"TPOT {self.tpot_ms:.0f} ms = seed Table 3.2 P99 at {self.upper_tokens} tokens; "
                f"TTFT {self.ttft_ms:.0f} ms = prefill({self.upper_tokens}) {self.prefill_upper_ms:.0f} ms "
                f"+ P99 wait behind one request served alone at load {LOAD_FRACTION} {self.wait_p99_ms:.0f} ms, "
                f"rounded up to the second")


def residual_quantile(service_ms: np.ndarray, tail: float) -> float:
    """t with P(R > t) = tail for the residual R of a service drawn length-biased from these samples:
    P(R > t) = E[(S - t)+] / E[S] (renewal theory), piecewise linear in t, solved exactly."""
    if not 0.0 < tail < 1.0:
        raise ValueError(f"tail must be in (0, 1), got {tail}")
    s = np.sort(np.asarray(service_ms, dtype=float))[::-1]  # descending
    total = s.sum()
    # for t between s[k] and s[k-1] (the k largest above t): E[(S - t)+] * n = prefix_k - k t
    k = np.arange(1, s.size + 1)
    t = (np.cumsum(s) - tail * total) / k
    lower = np.append(s[1:], 0.0)
    inside = np.flatnonzero((lower <= t) & (t <= s))
    return float(t[inside[0]]) if inside.size else 0.0


def service_samples(profile: Profile, data: dict[str, Any], source: str | None, n: int = 20_000,
                    seed: int = 0) -> np.ndarray:
    """Single-stream service times (ms) of n requests drawn from the scenario's own length distributions."""
    variant = with_fields(data, {"workload.requests": n, "workload.duration_s": None,
                                 "workload.arrival.load_fraction": None, "workload.arrival.rate_per_s": 1.0})
    _, prompts, outputs, _, _ = generate_arrays(build(variant, source).workload, np.random.default_rng(seed), 1.0)
    p, o = prompts.astype(float), outputs.astype(float)
    # decode_v1 is linear in context, so O - 1 steps at contexts P+1..P+O-1 cost O - 1 steps at P + O/2
    return np.array([profile.prefill_ms(pi, 0) + (oi - 1.0) * profile.decode_ms(1, pi + oi / 2.0)
                     for pi, oi in zip(p, o, strict=True)])


def cell_sla(profile: Profile, upper_tokens: int, service_ms: np.ndarray) -> CellSla:
    """The derived targets of a cell whose prompts reach ``upper_tokens``, with these service times."""
    if upper_tokens not in SEED_P99_MS:
        raise ValueError(f"no seed P99 at {upper_tokens} tokens (Table 3.2 has {sorted(SEED_P99_MS)})")
    wait = residual_quantile(service_ms, P99_TAIL / LOAD_FRACTION)
    return CellSla(upper_tokens, SEED_P99_MS[upper_tokens], profile.prefill_ms(upper_tokens, 0), wait)


def tpot_target_note(scenario: str) -> str | None:
    """Why a TPOT target from Table 3.2 is hard to meet on a profile fitted to Table 3.3 (None off the matrix)."""
    upper = CELL_UPPER.get(scenario)
    if upper is None:
        return None
    p99 = SEED_P99_MS[upper]
    plain = SEED_1GPU_MS.get(upper)
    if plain is None:
        return (f"the TPOT target ({p99:.0f} ms) is Table 3.2's P99 at {upper} tokens, with paging; Table 3.3 stops "
                f"at 32K (320 ms without paging) and the profile's decode, fitted to it, is linear in context, so a "
                f"{upper}-token request decodes at about twice that before paging")
    return (f"the TPOT target ({p99:.0f} ms) is Table 3.2's P99 at {upper} tokens, with paging, yet Table 3.3 gives "
            f"{plain:.0f} ms at {upper} on one GPU without paging, and the profile's decode is fitted to Table 3.3: "
            f"a path must cut per-token time at {upper} by {1 - p99 / plain:.0%} (before paging) to meet it")
