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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tripath.calibrate.samples import Sample

LINEAR_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
              "mlp_up_proj", "mlp_act", "mlp_down_proj", "add", "add")  # two residual adds per layer

DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
DECODE_KV = (32, 512, 1024, 2048, 3072, 4032)
PREFILL_CHUNKS = (64, 128, 256, 512, 1024, 2048)
PREFILL_KV = (0, 512, 1024, 2048, 3072)


@dataclass(frozen=True)
class VidurModel:
    """One (model, tp) and where its files are under the data root."""

    name: str  # profile model name
    hf_dir: str  # meta-llama/<this>
    preset: str  # tripath.engine.model.config.PRESETS name
    tp: int
    hidden: int
    attention: str  # relative path of the attention file used
    attention_format: str  # "sampled" (new format, medians) or "old" (Vidur's earlier attention.csv)


MODELS = {
    "llama-2-7b": VidurModel("llama-2-7b", "Llama-2-7b-hf", "llama2-7b", 1, 4096,
                             "compute/a100/meta-llama/Llama-2-7b-hf/attention_sampled_rows.csv", "sampled"),
    "llama-2-70b": VidurModel("llama-2-70b", "Llama-2-70b-hf", "llama2-70b", 2, 8192,
                              "a100/attention.csv", "old"),
}
GPUS = {"a100-80gb": "a100", "h100-sxm": "h100"}


def mlp_path(root: Path, gpu: str, model: VidurModel) -> Path:
    return root / "data/profiling/compute" / GPUS[gpu] / "meta-llama" / model.hf_dir / "mlp.csv"


def all_reduce_path(root: Path, gpu: str) -> Path:
    return root / "data/profiling/network" / f"{GPUS[gpu]}_dgx" / "all_reduce.csv"


def linear_table(root: Path, gpu: str, model: VidurModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token counts, per-layer linear ms, embedding ms) at this model's tp."""
    df = pd.read_csv(mlp_path(root, gpu, model))
    df = df[df.num_tensor_parallel_workers == model.tp]
    per_layer = sum(df[f"time_stats.{op}.median"] for op in LINEAR_OPS)
    table = pd.DataFrame({"tokens": df.num_tokens, "linear": per_layer, "emb": df["time_stats.emb.median"]})
    table = table.groupby("tokens", as_index=False).mean()  # a few token counts were profiled twice
    return table.tokens.to_numpy(float), table.linear.to_numpy(float), table.emb.to_numpy(float)


def all_reduce_table(root: Path, gpu: str, workers: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(message bytes, ms) of an all-reduce over ``workers`` GPUs inside one node (NVLink)."""
    df = pd.read_csv(all_reduce_path(root, gpu))
    df = df[(df.num_workers == workers) & (df.devices_per_node == workers) & (df.collective == "all_reduce")]
    table = df.groupby("size", as_index=False)["time_stats.all_reduce.median"].mean()
    return table["size"].to_numpy(float), table["time_stats.all_reduce.median"].to_numpy(float)


def attention_rows(root: Path, model: VidurModel) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A100 attention per layer: decode (batch, kv, ms) and prefill (chunk, kv, ms), on the sweep grid."""
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


def published_samples(root: Path, gpu: str, model: VidurModel, layers: int) -> PublishedSamples:
    """Whole-iteration times rebuilt from operator medians, as samples at full depth."""
    tokens, linear, emb = linear_table(root, gpu, model)
    decode, prefill = attention_rows(root, model)
    scale = None if gpu == "a100-80gb" else measured_ratios(root, model, gpu)
    ar_bytes, ar_ms = all_reduce_table(root, gpu) if model.tp > 1 else (None, None)

    def step_ms(t: int, attn_ms: float) -> float:
        comm = 0.0 if ar_bytes is None else 2 * float(np.interp(t * model.hidden * 2, ar_bytes, ar_ms))
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
    return PublishedSamples(rounded, scale)
