"""KV compression in the simulator: bytes per token, decode overhead, and the acceptance it costs.

A mode of the profile's ``compression`` section changes three things:

- bytes per token: b' = ceil(b * kv_bytes_ratio), so the same KV budget holds 1 / ratio times the
  tokens (a larger admissible batch) and the tiered cache moves ratio times the bytes;
- decode time: reading compressed KV means dequantizing it. The calibration sweep
  (tripath/calibrate/sweeps/compression.py) measures decode_overhead_ratio as (decode step with the mode)
  / (decode step without), unit "ratio", and the decode part of an iteration is multiplied by it.
  A profile that states it as the extra fraction of attention time (unit "1" or "fraction", as
  tripath/profile/sections.py's docstring puts it) gets the attention part multiplied by 1 + value;
  one that states attention time with the mode / without (unit "attention_ratio": a GPU profile whose
  compressed attention reads fewer bytes, tripath/calibrate/published/compression.py) gets it
  multiplied by the value itself, which may be below 1.
  Dequantization is work per token read, not a multiple of the full-precision step, and one ratio
  measured at batch 1 under-prices served batches (their ratio grows with batch and context); a
  profile with ``decode_extra`` (tripath/profile/dequant.py, fitted on a (batch, context) grid by the
  calibration) adds extra_ms(B, S) = q0 + q_seq B + q_ctx S + q_len S/B to the decode part instead,
  and the ratio is then only a summary.
  Prefill reads the fresh activations but writes every token into the compressed store (quantize,
  scales, staging): the sweep measures prefill_overhead_ratio = (prefill through the store) /
  (prefill through the paged pool), and each prefill chunk's work (its cost above the per-iteration
  fixed cost) is multiplied by it. The ratio grows with length (the store's attention dequantizes
  the prefix), so where the profile has it per measured length (prefill_overhead_points) the factor
  is interpolated linearly at the chunk's context + new tokens (held flat outside the measured
  lengths). A profile without either (older ones) leaves prefill unchanged;
  With speculation (tripath/simulator/paths/step.py) the round's passes are priced on the full-precision step and
  only the verify pass adds dequantization (``round_extra_ms``), where the ratio scaled every pass;
- acceptance: a speculative target reading compressed KV accepts fewer draft tokens; every
  per-position acceptance drops by acceptance_drop (SEEDS.md 003's negative coupling).

quality_loss is carried for reports; it does not change latency. Compression is a transform of
the cost model (``decode_fn`` wraps the profile's decode formula), so a compressed iteration is
priced by the same IterationCost arithmetic as the baseline (tripath/simulator/paths/step.py: path_cost).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tripath.core.errors import InputError
from tripath.profile.sections import CompressionMode

STEP_RATIO_UNITS = ("ratio",)  # the sweep's unit: a whole-step time ratio
ATTENTION_RATIO_UNITS = ("attention_ratio",)  # attention time with the mode / without


class CompressionPhysics:
    """One compression mode's effect on bytes, decode time and acceptance: the profile's ``compression.<mode>``
    section resolved (stateless: one instance serves every replica of a run)."""

    def __init__(self, mode: str, m: CompressionMode) -> None:
        self.mode = mode
        self.kv_bytes_ratio = float(m.kv_bytes_ratio.value)
        self.acceptance_drop = float(m.acceptance_drop.value)
        self.quality_loss = float(m.quality_loss.value)
        prefill = getattr(m, "prefill_overhead_ratio", None)
        self.prefill_factor = 1.0 if prefill is None else float(prefill.value)
        points = getattr(m, "prefill_overhead_points", ())
        self.prefill_tokens = np.array([float(n) for n, _ in points])
        self.prefill_ratios = np.array([float(r) for _, r in points])
        self.decode_extra = getattr(m, "decode_extra", None)
        overhead = float(m.decode_overhead_ratio.value)
        unit = m.decode_overhead_ratio.unit.strip().lower()
        if unit in STEP_RATIO_UNITS or unit in ATTENTION_RATIO_UNITS:
            if overhead <= 0:  # a time ratio of 0 would make decoding (or its attention) free
                raise InputError(None, f"compression.{mode}.decode_overhead_ratio",
                                 f"a time ratio (unit {unit!r}) must be > 0, got {overhead}")
        if unit in STEP_RATIO_UNITS:
            self.step_factor, self.attention_factor = overhead, 1.0
        elif unit in ATTENTION_RATIO_UNITS:
            self.step_factor, self.attention_factor = 1.0, overhead
        else:
            self.step_factor, self.attention_factor = 1.0, 1.0 + overhead

    def bytes_per_token(self, full_bytes_per_token: int) -> int:
        """Device bytes of one token's KV in this mode (rounded up: a token never takes less)."""
        return max(1, math.ceil(full_bytes_per_token * self.kv_bytes_ratio))

    def decode_fn(self, decode: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """decode_ms(B, S) reading compressed KV (S may be a numpy array: the fast path's)."""
        step, attention = self.step_factor, self.attention_factor
        if self.decode_extra is not None:
            extra = self.decode_extra.extra_ms

            def dequantized(batch: Any, total_context: Any) -> Any:
                return decode(batch, total_context) + extra(batch, total_context)
            return dequantized
        if attention == 1.0:
            def compressed(batch: Any, total_context: Any) -> Any:
                return step * decode(batch, total_context)
        else:
            def compressed(batch: Any, total_context: Any) -> Any:
                fixed = decode(batch, 0)
                return fixed + attention * (decode(batch, total_context) - fixed)
        return compressed

    def round_extra_ms(self, batch: int, total_context: int, k: int) -> float:
        """Dequantization in one speculative round of ``batch`` sequences at proposal length ``k`` (needs
        decode_extra): the verify pass runs as B (k + 1) one-token rows of the store's batched decode
        (tripath/engine/speculative/compressed.py), each row reading its sequence's context, so the rows' and tokens'
        terms count k + 1 times and the chunk loop (over the longest sequence) once; the draft's passes read
        its own full-precision KV and dequantize nothing."""
        if self.decode_extra is None:
            raise ValueError("round_extra_ms: the mode has no decode_extra")
        return float(self.decode_extra.extra_ms(batch * (k + 1), total_context * (k + 1)))

    def prefill_fn(self, prefill: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """prefill_ms(tokens, context) writing into the compressed store: the fixed cost f = prefill(0, 0)
        is paid once per iteration whatever the KV format, so only the chunk's work above it scales."""
        factor = self.prefill_factor
        if len(self.prefill_tokens):
            xs, ys = self.prefill_tokens, self.prefill_ratios
            fixed_pts = prefill(0, 0)

            def interpolated(tokens: Any, context: Any) -> Any:
                ratio = np.interp(np.add(tokens, context), xs, ys)
                return fixed_pts + ratio * (prefill(tokens, context) - fixed_pts)
            return interpolated
        if factor == 1.0:
            return prefill
        fixed = prefill(0, 0)

        def compressed(tokens: Any, context: Any) -> Any:
            return fixed + factor * (prefill(tokens, context) - fixed)
        return compressed
