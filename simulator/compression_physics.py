"""KV compression in the simulator: bytes per token, decode overhead, and the acceptance it costs.

A mode of the profile's ``compression`` section changes three things:

- bytes per token: b' = ceil(b * kv_bytes_ratio), so the same KV budget holds 1 / ratio times the
  tokens (a larger admissible batch) and the tiered cache moves ratio times the bytes;
- decode time: reading compressed KV means dequantizing it. The calibration sweep
  (calibrate/sweep_compression.py) measures decode_overhead_ratio as (decode step with the mode)
  / (decode step without), unit "ratio", and the decode part of an iteration is multiplied by it.
  A profile that states it as the extra fraction of attention time (unit "1" or "fraction", as
  simulator/profile_paths.py's docstring puts it) gets the attention part multiplied by 1 + value.
  Prefill writes KV but reads the fresh full-precision activations, so it is unchanged;
- acceptance: a speculative target reading compressed KV accepts fewer draft tokens; every
  per-position acceptance drops by acceptance_drop (SEEDS.md 003's negative coupling).

quality_loss is carried for reports; it does not change latency. Compression is a transform of
the cost model (``decode_fn`` wraps the profile's decode formula), so a compressed iteration is
priced by the same IterationCost arithmetic as the baseline (simulator/path_step.py: path_cost).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from simulator.errors import InputError

STEP_RATIO_UNITS = ("ratio",)  # the sweep's unit: a whole-step time ratio


class CompressionPhysics:
    """One compression mode's effect on bytes, decode time and acceptance."""

    def __init__(self, profile: Any, mode: str) -> None:
        m = profile.compression[mode]
        self.mode = mode
        self.kv_bytes_ratio = float(m.kv_bytes_ratio.value)
        self.acceptance_drop = float(m.acceptance_drop.value)
        self.quality_loss = float(m.quality_loss.value)
        overhead = float(m.decode_overhead_ratio.value)
        if m.decode_overhead_ratio.unit.strip().lower() in STEP_RATIO_UNITS:
            if overhead <= 0:  # a step-time ratio of 0 would make decoding free
                raise InputError(None, f"compression.{mode}.decode_overhead_ratio",
                                 f"a step-time ratio (unit 'ratio') must be > 0, got {overhead}")
            self.step_factor, self.attention_factor = overhead, 1.0
        else:
            self.step_factor, self.attention_factor = 1.0, 1.0 + overhead

    def bytes_per_token(self, full_bytes_per_token: int) -> int:
        """Device bytes of one token's KV in this mode (rounded up: a token never takes less)."""
        return max(1, math.ceil(full_bytes_per_token * self.kv_bytes_ratio))

    def decode_fn(self, decode: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """decode_ms(B, S) reading compressed KV (S may be a numpy array: the fast path's)."""
        step, attention = self.step_factor, self.attention_factor
        if attention == 1.0:
            def compressed(batch: Any, total_context: Any) -> Any:
                return step * decode(batch, total_context)
        else:
            def compressed(batch: Any, total_context: Any) -> Any:
                fixed = decode(batch, 0)
                return fixed + attention * (decode(batch, total_context) - fixed)
        return compressed
