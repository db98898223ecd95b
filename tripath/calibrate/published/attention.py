"""Attention per layer derived from FLOPs and bytes, at efficiencies fitted on Vidur's real attention rows.

Where Vidur has no attention profile for a model (Llama-3) or a tensor-parallel degree, attention
per layer and GPU is derived from the roofline of the resource that bounds it, each at an
efficiency fitted on the real Llama-2 attention rows on A100 (``vidur.attention_rows``):

    decode  ms = t_dec + bytes / (HBM bandwidth x e_dec)
            bytes = B x (kv + 1) x 2 x kv_heads x head_dim x 2     (K and V of every cached token, fp16)
    prefill ms = t_pre + F_ctx / (peak x e_ctx) + F_causal / (peak x e_causal)
            F_ctx = 4 x q_heads x head_dim x T x C,  F_causal = 4 x q_heads x head_dim x T x (T + 1) / 2

(heads per GPU: the model's over tp; 4 = two matmuls, QK^T and PV, of 2 FLOPs per multiply-add).
t_dec and t_pre are the fixed cost of one kernel call, which dominates short contexts. Prefill
has two efficiencies because the rows say so: pairs against cached context run at about twice
the rate of the causal pairs inside the chunk (partly masked diagonal tiles, fewer tiles per
head when nothing is cached). All parameters come from one bounded least-squares fit on
relative residuals (``tripath.calibrate.fit.relative_least_squares``); the fit error per row set
is reported beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tripath.calibrate.fit import relative_least_squares, sig6

DTYPE_BYTES = 2  # Vidur profiled fp16
MS = 1e3


@dataclass(frozen=True)
class AttentionShape:
    """Heads of one GPU's attention (the model's heads over tp)."""

    q_heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, heads: int, kv_heads: int, head_dim: int, tp: int) -> AttentionShape:
        if heads % tp or kv_heads % tp:
            raise ValueError(f"tp {tp} does not divide {heads} query heads and {kv_heads} KV heads")
        return cls(heads // tp, kv_heads // tp, head_dim)

    def decode_bytes(self, batch: np.ndarray, kv: np.ndarray) -> np.ndarray:
        """K and V bytes one decode step reads: every sequence's cached tokens and its new one."""
        return batch * (kv + 1) * 2 * self.kv_heads * self.head_dim * DTYPE_BYTES

    def prefill_flops(self, chunk: np.ndarray, kv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(FLOPs against the cached context, FLOPs of the causal pairs inside the chunk)."""
        per_pair = 4 * self.q_heads * self.head_dim
        return per_pair * chunk * kv, per_pair * chunk * (chunk + 1) / 2


@dataclass(frozen=True)
class AttentionRows:
    """One model's real attention per layer: decode (batch_size, kv_cache_size, ms), prefill (chunk, kv, ms)."""

    label: str
    shape: AttentionShape
    decode: pd.DataFrame
    prefill: pd.DataFrame


@dataclass(frozen=True)
class AttentionFit:
    """Fitted kernel floors and efficiencies on one GPU's roofline, and the fit error per row set."""

    peak_tflops: float
    memory_tbps: float
    decode_floor_ms: float
    decode_efficiency: float
    prefill_floor_ms: float
    context_efficiency: float
    causal_efficiency: float
    mape: dict[str, tuple[float, float]]  # row-set label -> (decode MAPE, prefill MAPE)

    def decode_ms(self, shape: AttentionShape, batch: np.ndarray, kv: np.ndarray) -> np.ndarray:
        roofline = shape.decode_bytes(batch, kv) / (self.memory_tbps * 1e12) * MS
        return self.decode_floor_ms + roofline / self.decode_efficiency

    def prefill_ms(self, shape: AttentionShape, chunk: np.ndarray, kv: np.ndarray) -> np.ndarray:
        context, causal = shape.prefill_flops(chunk, kv)
        peak = self.peak_tflops * 1e12
        return (self.prefill_floor_ms + context / peak * MS / self.context_efficiency
                + causal / peak * MS / self.causal_efficiency)

    def describe(self) -> str:
        errors = "; ".join(f"{label}: decode {d:.1%}, prefill {p:.1%}" for label, (d, p) in self.mape.items())
        return (f"decode = {self.decode_floor_ms:.4g} ms + K/V bytes / ({self.memory_tbps:g} TB/s x "
                f"{self.decode_efficiency:.3g}); prefill = {self.prefill_floor_ms:.4g} ms + context FLOPs / "
                f"({self.peak_tflops:g} TFLOP/s x {self.context_efficiency:.3g}) + causal FLOPs / "
                f"({self.peak_tflops:g} TFLOP/s x {self.causal_efficiency:.3g}); fit MAPE {errors}")


def _arrays(frame: pd.DataFrame, x: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (frame[x].to_numpy(float), frame["kv_cache_size"].to_numpy(float), frame["ms"].to_numpy(float))


def fit_attention(rows: list[AttentionRows], peak_tflops: float, memory_tbps: float) -> AttentionFit:
    """Floors and efficiencies fitted on every row set together (parameters rounded to 6 digits)."""
    decode = [(r.shape, *_arrays(r.decode, "batch_size")) for r in rows]
    prefill = [(r.shape, *_arrays(r.prefill, "prefill_chunk_size")) for r in rows]
    bw, peak = memory_tbps * 1e12, peak_tflops * 1e12
    d_cols = np.vstack([np.column_stack([np.ones_like(y), s.decode_bytes(b, kv) / bw * MS])
                        for s, b, kv, y in decode])
    d_y = np.concatenate([y for *_, y in decode])
    p_cols = np.vstack([np.column_stack([np.ones_like(y), *(f / peak * MS for f in s.prefill_flops(t, kv))])
                        for s, t, kv, y in prefill])
    p_y = np.concatenate([y for *_, y in prefill])
    d = [sig6(float(c)) for c in relative_least_squares(d_cols, d_y)]
    p = [sig6(float(c)) for c in relative_least_squares(p_cols, p_y)]
    if min(d[1], p[1], p[2]) <= 0:
        raise ValueError("attention fit: a roofline term came out zero; the rows do not determine an efficiency")
    fit = AttentionFit(peak_tflops, memory_tbps, d[0], sig6(1 / d[1]), p[0], sig6(1 / p[1]), sig6(1 / p[2]), {})
    mape = {}
    for r, (s, b, kv, y), (_, t, c, yp) in zip(rows, decode, prefill, strict=True):
        mape[r.label] = (sig6(float(np.mean(np.abs(fit.decode_ms(s, b, kv) - y) / y))),
                         sig6(float(np.mean(np.abs(fit.prefill_ms(s, t, c) - yp) / yp))))
    return replace(fit, mape=mape)
