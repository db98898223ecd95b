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

Without ``decode_extra`` (older profiles) the simulator multiplies the step by the mode's single
``decode_overhead_ratio`` (tripath/simulator/paths/compression.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient, FitQuality
from tripath.profile.fields import JsonObject, build, check_number, check_text
from tripath.profile.tables import need_coefficient

COEFFICIENTS = ("q0", "q_seq", "q_ctx", "q_len")
UNITS = {"q0": "ms", "q_seq": "ms/sequence", "q_ctx": "ms/token", "q_len": "ms/token of the longest sequence"}


@dataclass(frozen=True)
class DecodeDequant:
    """extra_ms(B, S) of one compressed decode step over the full-precision one (module docstring).

    coefficients: q0, q_seq, q_ctx, q_len (each >= 0); points: the measured grid,
    ((batch, total_context, full-precision step ms, compressed step ms), ...); fit: how well the
    formula matches the points' differences.
    """

    coefficients: dict[str, Coefficient]
    points: tuple[tuple[int, int, float, float], ...] = ()
    fit: FitQuality | None = None
    note: str = ""
    _q: tuple[float, ...] = field(init=False, repr=False, compare=False)  # resolved once: the hot path

    def __post_init__(self) -> None:
        if set(self.coefficients) != set(COEFFICIENTS):
            raise InputError(None, "coefficients", f"must name exactly {', '.join(COEFFICIENTS)}; got "
                             f"{', '.join(sorted(self.coefficients)) or 'none'}")
        for name in COEFFICIENTS:
            need_coefficient(f"coefficients.{name}", self.coefficients[name])
        for i, point in enumerate(self.points):
            if len(point) != 4:
                raise InputError(None, f"points.{i}", "must be [batch, total_context, fp_ms, mode_ms]")
            batch, context, fp_ms, mode_ms = point
            check_number(f"points.{i}.batch", batch, low=1)
            check_number(f"points.{i}.total_context", context, low=batch)
            check_number(f"points.{i}.fp_ms", fp_ms, positive=True)
            check_number(f"points.{i}.mode_ms", mode_ms, positive=True)
        check_text("note", self.note, nonempty=False)
        object.__setattr__(self, "_q", tuple(float(self.coefficients[n].value) for n in COEFFICIENTS))

    def extra_ms(self, batch: Any, total_context: Any) -> Any:
        """ms added to a decode step of ``batch`` sequences holding ``total_context`` tokens (arrays allowed)."""
        q0, q_seq, q_ctx, q_len = self._q
        longest = np.divide(total_context, np.maximum(batch, 1))  # an even batch: its longest sequence
        return q0 + q_seq * batch + q_ctx * total_context + q_len * longest

    def to_dict(self) -> dict[str, Any]:
        return {"formula": "extra_ms = q0 + q_seq*B + q_ctx*S + q_len*S/B",
                "coefficients": {n: self.coefficients[n].to_dict() for n in COEFFICIENTS},
                "points": [[int(b), int(s), float(f), float(m)] for b, s, f, m in self.points],
                "fit": None if self.fit is None else self.fit.to_dict(), "note": self.note}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> DecodeDequant:
        obj = JsonObject(raw, source, path)
        obj.string("formula", "")  # documentation for readers of the JSON; the math is this class's
        coefs = obj.mapping("coefficients")
        kwargs: dict[str, Any] = {
            "coefficients": {n: Coefficient.parse(v, source, f"{obj.where('coefficients')}.{n}")
                             for n, v in coefs.items()},
            "fit": FitQuality.parse(obj.get("fit", None), source, obj.where("fit")),
            "note": obj.string("note", "")}
        points = obj.array("points", [])
        if not all(isinstance(p, list) and len(p) == 4 for p in points):
            raise InputError(source, obj.where("points"), "a list of [batch, total_context, fp_ms, mode_ms]")
        kwargs["points"] = tuple((p[0], p[1], p[2], p[3]) for p in points)
        obj.finish()
        return build(cls, source, path, **kwargs)
