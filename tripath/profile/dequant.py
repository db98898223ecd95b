"""The decode step's extra time for reading compressed KV: dequantization, measured per (batch, context).

A compressed store (tripath/engine/kv/compressed_store.py) keeps only codes, scales and zero points, so
every decode step dequantizes every cached token it attends to, a chunk of blocks at a time
(tripath/engine/kv/compressed_attention.py). The work is therefore additive on top of the full-precision
step, not a multiple of it:

    extra_ms(B, S) = q0 + q_seq * B + q_ctx * S + q_len * S / B

q_ctx: per cached token read and dequantized (the batched decode reads every sequence's blocks);
q_len: per token of the longest sequence, the chunk loop's fixed work per chunk of blocks
(ceil(longest / chunk_tokens) chunk iterations, each a fixed number of small tensor ops, shared by
the batch); the simulator knows only B and S, so it takes the longest sequence as S / B (an even
batch, the shape of the calibration grid); q_seq: per decoding sequence (the store's writes and the
block bookkeeping); q0: per step. The calibration's compression sweep measures the full-precision step
(the paged pool) and the compressed one over a grid of (batch, context per sequence) in one run and
fits the difference (tripath/calibrate/sweeps/compression_decode.py); ``points`` keeps the measured grid.

Older profiles have no ``decode_extra``: the simulator then multiplies the step by the mode's single
``decode_overhead_ratio`` alone (tripath/simulator/paths/compression.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tripath.core.errors import InputError
from tripath.profile.codec import Section, json_field, note_field
from tripath.profile.cost_model import Coefficient, FitQuality, coefficient
from tripath.profile.fields import MAX_STEP_MS, check_number

COEFFICIENTS = ("q0", "q_seq", "q_ctx", "q_len")
UNITS = {"q0": "ms", "q_seq": "ms/sequence", "q_ctx": "ms/token", "q_len": "ms/token of the longest sequence"}
# Written into the JSON for its readers; the math is DecodeDequant.extra_ms, whatever a file says here.
FORMULA = "extra_ms = q0 + q_seq*B + q_ctx*S + q_len*S/B"


def _coefficients(field: str, coefficients: dict[str, Coefficient]) -> dict[str, Coefficient]:
    """Exactly q0, q_seq, q_ctx, q_len, kept in that order."""
    if set(coefficients) != set(COEFFICIENTS):
        raise InputError(None, field, f"must name exactly {', '.join(COEFFICIENTS)}; got "
                         f"{', '.join(sorted(coefficients)) or 'none'}")
    check = coefficient(high=MAX_STEP_MS)
    return {name: check(f"{field}.{name}", coefficients[name]) for name in COEFFICIENTS}


def _points(field: str, points: tuple[tuple[int, int, float, float], ...]) -> tuple[tuple[int, int, float, float], ...]:
    """Measured (batch, total_context, fp_ms, mode_ms) rows: batch >= 1, context >= batch, both times > 0."""
    for i, point in enumerate(points):
        if len(point) != 4:
            raise InputError(None, f"{field}.{i}", "must be [batch, total_context, fp_ms, mode_ms]")
        batch, context, fp_ms, mode_ms = point
        check_number(f"{field}.{i}.batch", batch, low=1)
        check_number(f"{field}.{i}.total_context", context, low=batch)
        check_number(f"{field}.{i}.fp_ms", fp_ms, positive=True, high=MAX_STEP_MS)
        check_number(f"{field}.{i}.mode_ms", mode_ms, positive=True, high=MAX_STEP_MS)
    return points


@dataclass(frozen=True)
class DecodeDequant(Section):
    """extra_ms(B, S) of one compressed decode step over the full-precision one (module docstring).

    coefficients: q0, q_seq, q_ctx, q_len (each >= 0); points: the measured grid,
    ((batch, total_context, full-precision step ms, compressed step ms), ...); fit: how well the
    formula matches the points' differences.
    """

    formula: str = json_field(default=FORMULA, init=False)
    coefficients: dict[str, Coefficient] = json_field(_coefficients)
    points: tuple[tuple[int, int, float, float], ...] = json_field(
        _points, default=(), shape="[batch, total_context, fp_ms, mode_ms]")
    fit: FitQuality | None = None
    note: str = note_field()
    _q: tuple[float, ...] = field(init=False, repr=False, compare=False)  # resolved once: the hot path

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_q", tuple(float(self.coefficients[n].value) for n in COEFFICIENTS))

    def extra_ms(self, batch: Any, total_context: Any) -> Any:
        """ms added to a decode step of ``batch`` sequences holding ``total_context`` tokens (arrays allowed)."""
        q0, q_seq, q_ctx, q_len = self._q
        longest = np.divide(total_context, np.maximum(batch, 1))  # an even batch: its longest sequence
        return q0 + q_seq * batch + q_ctx * total_context + q_len * longest
