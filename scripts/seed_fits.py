"""The seed document's tables and the least-squares fits the seed profile is built from.

Used by scripts/make_seed_profile.py. Lengths written "4K" in the document are read as 4096
tokens. All fits are non-negative linear least squares (scipy.optimize.lsq_linear), so no
coefficient can come out negative; fit quality is the mean / worst absolute percentage error on
the rows used (with the rounded coefficients that are stored) and a leave-one-out holdout error.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import lsq_linear

from tripath.core.speculative import SpecCosts, breakeven_acceptance, latency_ratio
from tripath.profile.profile import FitQuality, ModelSpec

SEED_DOCUMENT = "000_3cff22d029debaea.txt"
SPEC_K = 5
KV_BUDGET_TOKENS = 8192  # Table 3.2: 8K fits on the GPU, 16K pages

# Table 3.1 — task, acceptance a, latency change (fraction) at K = 5.
TABLE_3_1 = (("dialogue", 0.75, -0.25), ("math", 0.55, 0.0), ("code", 0.68, -0.15),
             ("summarization", 0.72, -0.20))
# Table 3.2 — sequence length (tokens), paging latency (ms).
TABLE_3_2 = ((4096, 0.0), (8192, 0.0), (16384, 35.0), (32768, 85.0), (65536, 150.0))
# Table 3.3 — length, 1-GPU ms, 2-GPU SP ms, speedup as printed, merge overhead ms.
TABLE_3_3 = ((4096, 45.0, 25.0, 1.8, 5.0), (8192, 80.0, 45.0, 1.8, 5.0), (16384, 160.0, 90.0, 1.8, 10.0),
             (32768, 320.0, 175.0, 1.8, 15.0))

# LLaMA-2-70B (published config: 80 layers, 64 heads, 8 KV heads, head_dim 128, hidden 8192,
# FFN 28672, vocab 32000). Params counted from the shapes: per layer q,o 8192^2 each, k,v
# 8192*1024 each, 3 FFN matrices 8192*28672, 2 norms; plus embeddings, LM head and final norm.
_LAYERS, _HIDDEN, _KV_DIM, _FFN, _VOCAB = 80, 8192, 8 * 128, 28672, 32000
_PER_LAYER = 2 * _HIDDEN * _HIDDEN + 2 * _HIDDEN * _KV_DIM + 3 * _HIDDEN * _FFN + 2 * _HIDDEN
PARAMS = _LAYERS * _PER_LAYER + 2 * _VOCAB * _HIDDEN + _HIDDEN  # 68,976,648,192
KV_BYTES_PER_TOKEN = 2 * _LAYERS * _KV_DIM * 2  # K and V, fp16: 327,680 = 0.3125 MiB
MODEL = ModelSpec("llama-2-70b", _LAYERS, 64, 8, 128, _HIDDEN, PARAMS, 2, KV_BYTES_PER_TOKEN, PARAMS * 2,
                  "published architecture; params counted from the layer shapes (FFN 28672, vocab 32000); "
                  "weight_bytes = params x 2 (fp16)")

A100_PEAK_FLOPS = 312e12  # A100 dense fp16/bf16 tensor-core peak (published)
UTILISATION = 0.5  # assumed fraction of peak for large matmuls; stated wherever it is used
LINE_METHOD = "non-negative least squares (intercept, slope); leave-one-out holdout"
SP_USE = "sequence_parallel.2"


def sig6(x: float) -> float:
    """Round to 6 significant digits, so the stored number does not depend on BLAS last bits."""
    return float(f"{x:.6g}")


def _lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    return lsq_linear(a, y, bounds=(0.0, np.inf), method="bvls").x


def _ape(predicted: np.ndarray, observed: np.ndarray) -> np.ndarray:
    return np.abs(predicted - observed) / np.abs(observed)


def _quality(a: np.ndarray, y: np.ndarray, predicted: np.ndarray, offset: np.ndarray | None,
             method: str, data: str) -> FitQuality:
    """Train error of the stored prediction, and leave-one-out error of refits (y - offset ~ a)."""
    offset = np.zeros_like(y) if offset is None else offset
    held = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        x = _lstsq(a[keep], (y - offset)[keep])
        held.append(float(_ape(a[i] @ x + offset[i], y[i])))
    train = _ape(predicted, y)
    return FitQuality(len(y), sig6(float(train.mean())), sig6(float(train.max())), sig6(float(np.mean(held))),
                      method, data)


def fit_decode() -> tuple[dict[str, float], FitQuality, str]:
    """decode_v1 at batch 1: ms = (d0 + d_seq) + d_ctx*S fitted to Table 3.3's 1-GPU column.

    At batch 1 only d0 + d_seq is identifiable; d_seq is derived (roofline) and d0 is the rest.
    """
    s = np.array([row[0] for row in TABLE_3_3], dtype=float)
    y = np.array([row[1] for row in TABLE_3_3])
    a = np.column_stack([np.ones_like(s), s])  # [n, 2]: intercept, context
    intercept, slope = _lstsq(a, y)
    d_seq = sig6(2 * PARAMS / (A100_PEAK_FLOPS * UTILISATION) * 1e3)
    note = (f"2*params FLOPs per sequence per step at A100 fp16 peak {A100_PEAK_FLOPS / 1e12:g} TFLOP/s x "
            f"utilisation {UTILISATION:g}; the seed has no batched decode numbers")
    if intercept < d_seq:
        raise ValueError(f"fitted intercept {intercept} < derived d_seq {d_seq}: d0 would be negative")
    coeffs = {"d0": sig6(intercept - d_seq), "d_seq": d_seq, "d_ctx": sig6(slope)}
    predicted = coeffs["d0"] + coeffs["d_seq"] + coeffs["d_ctx"] * s
    fit = _quality(a, y, predicted, None, LINE_METHOD, "SEEDS.md Table 3.3, 1-GPU latency, 4K-32K, batch 1")
    return coeffs, fit, note


def fit_paging() -> tuple[float, float, FitQuality]:
    """paging_v1 on the device-host link: ms = setup + bytes/bandwidth, Table 3.2 rows that page."""
    rows = [(length, ms) for length, ms in TABLE_3_2 if length > KV_BUDGET_TOKENS]
    mbytes = np.array([(length - KV_BUDGET_TOKENS) * KV_BYTES_PER_TOKEN / 1e6 for length, _ in rows])
    y = np.array([ms for _, ms in rows])
    a = np.column_stack([np.ones_like(mbytes), mbytes])  # [n, 2]: setup, ms per MB = 1/GBps
    setup, ms_per_mb = _lstsq(a, y)
    setup, bandwidth = sig6(setup), sig6(1.0 / ms_per_mb)
    predicted = setup + mbytes / bandwidth
    fit = _quality(a, y, predicted, None, LINE_METHOD,
                   "SEEDS.md Table 3.2, rows 16K/32K/64K vs MB paged = KV beyond the 8K-token budget")
    return setup, bandwidth, fit


def fit_sp_merge() -> tuple[float, float, FitQuality]:
    """sp_merge_v1 at degree 2: merge ms = m0 + m_ctx*C, Table 3.3."""
    c = np.array([row[0] for row in TABLE_3_3], dtype=float)
    y = np.array([row[4] for row in TABLE_3_3])
    a = np.column_stack([np.ones_like(c), c])  # [n, 2]
    m0, m_ctx = (sig6(v) for v in _lstsq(a, y))
    fit = _quality(a, y, m0 + m_ctx * c, None, LINE_METHOD, "SEEDS.md Table 3.3, merge overhead at 4K-32K")
    return m0, m_ctx, fit


def fit_acceptance_cost_ratio() -> tuple[float, FitQuality, float]:
    """c from Table 3.1: latency ratio (1 + change) = (K*c + 1)/E(a), linear in c with offset 1/E(a)."""
    e = np.array([latency_ratio(SPEC_K, a, SpecCosts(0.0)) for _, a, _ in TABLE_3_1])  # = 1/E(a)
    y = np.array([1.0 + change for _, _, change in TABLE_3_1])
    a = (SPEC_K * e)[:, None]  # [n, 1]: d ratio / d c
    c = sig6(float(_lstsq(a, y - e)[0]))
    predicted = np.array([latency_ratio(SPEC_K, acc, SpecCosts(c)) for _, acc, _ in TABLE_3_1])
    fit = _quality(a, y, predicted, e, "non-negative least squares of (K*c + 1)/E(a) on c; leave-one-out "
                   "holdout", "SEEDS.md Table 3.1, latency ratio 1 + change at K=5")
    star = breakeven_acceptance(SPEC_K, SpecCosts(c))
    assert star is not None  # 1 < K c + 1 < K + 1 for the fitted c
    return c, fit, star


def samples_rows() -> list[tuple[object, ...]]:
    """The seed table rows the fits used: (table, series, label, x, x_unit, y, y_unit, used_by)."""
    rows: list[tuple[object, ...]] = []
    for length, one, two, _speedup, merge in TABLE_3_3:
        label = f"{length // 1024}K"
        rows.append(("3.3", "latency_1gpu", label, length, "tokens", one, "ms", "costs.decode"))
        rows.append(("3.3", "latency_2gpu_sp", label, length, "tokens", two, "ms", SP_USE + ".rows"))
        rows.append(("3.3", "merge_overhead", label, length, "tokens", merge, "ms", SP_USE + ".merge"))
    for length, ms in TABLE_3_2:
        if length > KV_BUDGET_TOKENS:
            paged = (length - KV_BUDGET_TOKENS) * KV_BYTES_PER_TOKEN
            rows.append(("3.2", "paging_latency", f"{length // 1024}K", paged, "bytes", ms, "ms",
                         "paging.device_host"))
    for task, acc, change in TABLE_3_1:
        rows.append(("3.1", "latency_ratio", task, acc, "acceptance", round(1.0 + change, 6), "ratio",
                     "speculative.cost_ratio"))
    return rows

