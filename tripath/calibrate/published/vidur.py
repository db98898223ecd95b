"""Published profiles from Vidur's operator measurements (microsoft/vidur, MIT; data/peer-data/vidur).

Vidur times each operator of a LLaMA layer on real GPUs (per-GPU times at a tensor-parallel
degree). A whole iteration is rebuilt from them as Vidur's own simulator does, per point:

    ms = L x (linear(T) + attention(point) + 2 x all_reduce(T x hidden x 2 bytes) [tp > 1]) + emb(T)

where linear(T) sums the medians of input_layernorm, attn_pre_proj (QKV), attn_rope,
attn_post_proj (O), post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj and two
residual adds at T tokens (linear interpolation between the profiled token counts), and the two
all-reduces per layer are Megatron tensor parallelism's (after attention and after the MLP). The
LM head and sampling are not in Vidur's data and are left out (about 1 % of a step).
prefill_v1 and decode_v1 are then fitted to these rebuilt times with ``tripath.calibrate.fit``.

H100 attention is not in the data: the A100 attention times are scaled by ratios MEASURED in
Vidur's own linear-layer data, H100 / A100 — at <= 16 tokens (memory-bound: weights are read
once) for decode attention, at >= 2048 tokens (compute-bound) for prefill attention. Those
attention coefficients are labelled "projected".

Where no attention file exists (Llama-3; Llama-2-70B at tp 4) attention is DERIVED on A100 from
FLOPs and bytes at efficiencies fitted on the two real Llama-2 attention row sets
(``tripath/calibrate/published/attention.py``), on a grid of the same batches and contexts, with
prefill chunks up to 8192 tokens where the model's linear layers are measured that far.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tripath.calibrate.hardware import SPECS
from tripath.calibrate.published.attention import AttentionFit, AttentionRows, AttentionShape, fit_attention
from tripath.calibrate.samples import Sample
from tripath.engine.model.config import PRESETS

LINEAR_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
              "mlp_up_proj", "mlp_act", "mlp_down_proj", "add", "add")  # two residual adds per layer

DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
DECODE_KV = (32, 512, 1024, 2048, 3072, 4032)
PREFILL_CHUNKS = (64, 128, 256, 512, 1024, 2048)
PREFILL_KV = (0, 512, 1024, 2048, 3072)
DERIVED_PREFILL_CHUNKS = (*PREFILL_CHUNKS, 4096, 8192)  # kept where the linear layers are measured


@dataclass(frozen=True)
class VidurModel:
    """One (model, tp) and where its files are under the data root."""

    name: str  # profile model name
    hf_dir: str  # meta-llama/<this>
    preset: str  # tripath.engine.model.config.PRESETS name
    tp: int
    hidden: int
    attention: str | None  # relative path of the attention file used; None: derived
    attention_format: str  # "sampled" (new format, medians), "old" (Vidur's earlier attention.csv) or "derived"

    @property
    def shape(self) -> AttentionShape:
        config = PRESETS[self.preset]
        return AttentionShape.of(config.num_heads, config.num_kv_heads, int(config.head_dim), self.tp)


MODELS = {
    "llama-2-7b": VidurModel("llama-2-7b", "Llama-2-7b-hf", "llama2-7b", 1, 4096,
                             "compute/a100/meta-llama/Llama-2-7b-hf/attention_sampled_rows.csv", "sampled"),
    "llama-2-70b": VidurModel("llama-2-70b", "Llama-2-70b-hf", "llama2-70b", 2, 8192,
                              "a100/attention.csv", "old"),
    "llama-2-70b-tp4": VidurModel("llama-2-70b", "Llama-2-70b-hf", "llama2-70b", 4, 8192, None, "derived"),
    "llama-3-8b": VidurModel("llama-3-8b", "Meta-Llama-3-8B", "llama3-8b", 1, 4096, None, "derived"),
    "llama-3-70b-tp4": VidurModel("llama-3-70b", "Meta-Llama-3-70B", "llama3-70b", 4, 8192, None, "derived"),
}
FIT_MODELS = ("llama-2-7b", "llama-2-70b")  # the real A100 attention rows the derivation is fitted on
GPUS = {"a100-80gb": "a100", "h100-sxm": "h100"}
# (gpu, model) pairs whose linear layers Vidur measured: these become published profiles
MEASURED = (("a100-80gb", "llama-2-7b"), ("a100-80gb", "llama-2-70b"), ("a100-80gb", "llama-3-8b"),
            ("a100-80gb", "llama-3-70b-tp4"), ("h100-sxm", "llama-2-7b"), ("h100-sxm", "llama-2-70b"),
            ("h100-sxm", "llama-2-70b-tp4"))
# what --extract copies in full: every mlp.csv of these models, both network files of these clusters
MLP_FILES = (("a100", "Llama-2-7b-hf"), ("a100", "Llama-2-70b-hf"), ("a100", "Meta-Llama-3-8B"),
             ("a100", "Meta-Llama-3-70B"), ("h100", "Llama-2-7b-hf"), ("h100", "Llama-2-70b-hf"))
NETWORKS = ("a100_dgx", "h100_dgx", "a100_pairwise_nvlink", "h100_pairwise_nvlink")
NETWORK_FILES = ("send_recv.csv", "all_reduce.csv")


def compute_path(root: Path, gpu_dir: str, hf_dir: str) -> Path:
    return root / "data/profiling/compute" / gpu_dir / "meta-llama" / hf_dir / "mlp.csv"


def mlp_path(root: Path, gpu: str, model: VidurModel) -> Path:
    return compute_path(root, GPUS[gpu], model.hf_dir)


def network_path(root: Path, network: str, name: str) -> Path:
    return root / "data/profiling/network" / network / name


def all_reduce_path(root: Path, gpu: str) -> Path:
    return network_path(root, f"{GPUS[gpu]}_dgx", "all_reduce.csv")


def linear_table(root: Path, gpu: str, model: VidurModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token counts, per-layer linear ms, embedding ms) at this model's tp."""
    df = pd.read_csv(mlp_path(root, gpu, model))
    df = df[df.num_tensor_parallel_workers == model.tp]
    per_layer = sum(df[f"time_stats.{op}.median"] for op in LINEAR_OPS)
    table = pd.DataFrame({"tokens": df.num_tokens, "linear": per_layer, "emb": df["time_stats.emb.median"]})
    table = table.groupby("tokens", as_index=False).mean()  # a few token counts were profiled twice
    return table.tokens.to_numpy(float), table.linear.to_numpy(float), table.emb.to_numpy(float)


def collective_medians(df: pd.DataFrame, collective: str, workers: int, per_node: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(message bytes, median ms) of one (collective, num_workers, devices_per_node) in a Vidur network table,
    a size profiled twice taking their mean; empty arrays without rows."""
    column = f"time_stats.{collective}.median"
    df = df[(df.num_workers == workers) & (df.devices_per_node == per_node) & (df.collective == collective)]
    table = df.groupby("size", as_index=False)[column].mean()
    return table["size"].to_numpy(float), table[column].to_numpy(float)


def all_reduce_table(root: Path, gpu: str, workers: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(message bytes, ms) of an all-reduce over ``workers`` GPUs inside one node (NVLink)."""
    return collective_medians(pd.read_csv(all_reduce_path(root, gpu)), "all_reduce", workers, workers)


def all_reduce_ms(nbytes: float, sizes: np.ndarray, ms: np.ndarray) -> float:
    """Interpolated in the measured sizes; past the largest at its bandwidth (a large all-reduce is bandwidth-bound)."""
    if nbytes > sizes[-1]:
        return float(ms[-1] * nbytes / sizes[-1])
    return float(np.interp(nbytes, sizes, ms))


def attention_rows(root: Path, model: VidurModel) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A100 attention per layer: decode (batch, kv, ms) and prefill (chunk, kv, ms), on the sweep grid."""
    if model.attention is None:
        raise ValueError(f"{model.name} tp{model.tp}: no attention file; its attention is derived")
    df = pd.read_csv(root / "data/profiling" / model.attention)
    if model.attention_format == "sampled":
        decode = df[df.phase == "decode"].rename(columns={"attn_time_median_ms": "ms"})
        prefill = df[df.phase == "prefill"].rename(columns={"attn_time_median_ms": "ms"})
        return (decode[["batch_size", "kv_cache_size", "ms"]].reset_index(drop=True),
                prefill[["prefill_chunk_size", "kv_cache_size", "ms"]].reset_index(drop=True))
    reshape = df["time_stats.attn_input_reshape.median"] + df["time_stats.attn_output_reshape.median"]
    df = df.assign(ms=reshape + df["time_stats.attn_decode.median"].fillna(0)
                   + df["time_stats.attn_prefill.median"].fillna(0))
    decode = df[~df.is_prefill & df.batch_size.isin(DECODE_BATCHES) & df.kv_cache_size.isin(DECODE_KV)]
    prefill = df[df.is_prefill & df.prefill_chunk_size.isin(PREFILL_CHUNKS) & df.kv_cache_size.isin(PREFILL_KV)]
    decode = decode.groupby(["batch_size", "kv_cache_size"], as_index=False)["ms"].mean()
    prefill = prefill.groupby(["prefill_chunk_size", "kv_cache_size"], as_index=False)["ms"].mean()
    return decode, prefill


def attention_fit(root: Path) -> AttentionFit:
    """The derivation's floors and efficiencies, fitted on the real Llama-2 attention rows on A100."""
    rows = []
    for key in FIT_MODELS:
        model = MODELS[key]
        decode, prefill = attention_rows(root, model)
        rows.append(AttentionRows(f"{model.name} tp{model.tp}", model.shape, decode, prefill))
    a100 = SPECS["a100-80gb"]
    return fit_attention(rows, a100.peak_tflops, a100.memory_tbps)


def derived_attention_rows(fit: AttentionFit, model: VidurModel, max_tokens: float
                           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Derived A100 attention per layer on the grid (decode batch x kv; prefill chunk <= max_tokens x kv)."""
    batch, kv = (np.array(v, dtype=float) for v in zip(*[(b, k) for b in DECODE_BATCHES for k in DECODE_KV],
                                                         strict=True))
    chunks = [c for c in DERIVED_PREFILL_CHUNKS if c <= max_tokens]
    chunk, ctx = (np.array(v, dtype=float) for v in zip(*[(t, k) for t in chunks for k in PREFILL_KV], strict=True))
    decode = pd.DataFrame({"batch_size": batch.astype(int), "kv_cache_size": kv.astype(int),
                           "ms": fit.decode_ms(model.shape, batch, kv)})
    prefill = pd.DataFrame({"prefill_chunk_size": chunk.astype(int), "kv_cache_size": ctx.astype(int),
                            "ms": fit.prefill_ms(model.shape, chunk, ctx)})
    return decode, prefill


def measured_ratios(root: Path, model: VidurModel, gpu: str) -> tuple[float, float]:
    """(memory-bound, compute-bound) time ratios gpu / A100 from Vidur's linear-layer data."""
    tokens_a, linear_a, _ = linear_table(root, "a100-80gb", model)
    tokens_g, linear_g, _ = linear_table(root, gpu, model)
    ratio = linear_g / np.interp(tokens_g, tokens_a, linear_a)
    return float(np.median(ratio[tokens_g <= 16])), float(np.median(ratio[tokens_g >= 2048]))


@dataclass(frozen=True)
class PublishedSamples:
    samples: list[Sample]
    attention_scale: tuple[float, float] | None  # (decode, prefill) when projected from A100, else None
    attention_fit: AttentionFit | None = None  # the derivation's fit when attention is derived, else None


def published_samples(root: Path, gpu: str, model: VidurModel, layers: int) -> PublishedSamples:
    """Whole-iteration times rebuilt from operator medians, as samples at full depth."""
    tokens, linear, emb = linear_table(root, gpu, model)
    fit = attention_fit(root) if model.attention is None else None
    decode, prefill = (attention_rows(root, model) if fit is None
                       else derived_attention_rows(fit, model, float(tokens.max())))
    scale = None if gpu == "a100-80gb" else measured_ratios(root, model, gpu)
    ar_bytes, ar_ms = all_reduce_table(root, gpu, model.tp) if model.tp > 1 else (None, None)

    def step_ms(t: int, attn_ms: float) -> float:
        comm = 0.0 if ar_bytes is None else 2 * all_reduce_ms(t * model.hidden * 2, ar_bytes, ar_ms)
        per_layer = float(np.interp(t, tokens, linear)) + attn_ms + comm
        return layers * per_layer + float(np.interp(t, tokens, emb))

    samples = []
    for b, kv, ms in decode.itertuples(index=False):
        attn = ms * (scale[0] if scale else 1.0)
        # decode_v1's total_context counts every token attended: kv cached + the new one, per sequence
        samples.append(Sample("decode", layers, int(b), int(b) * (int(kv) + 1), step_ms(int(b), attn),
                              0.0, 0.0, 0))
    for t, kv, ms in prefill.itertuples(index=False):
        attn = ms * (scale[1] if scale else 1.0)
        samples.append(Sample("prefill", layers, int(t), int(kv), step_ms(int(t), attn), 0.0, 0.0, 0))
    samples = sorted({s.key: s for s in samples}.values(), key=lambda s: s.key)  # one row per point
    rounded = [Sample(s.sweep, s.layers, s.x1, s.x2, float(f"{s.median_ms:.6g}"), float(f"{s.median_ms:.6g}"),
                      float(f"{s.median_ms:.6g}"), 0) for s in samples]
    return PublishedSamples(rounded, scale, fit)
