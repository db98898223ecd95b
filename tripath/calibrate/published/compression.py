"""KV-compression modes for the published GPU profiles: fp8 (E4M3), int8 and int4 KV, costed from the profile.

Bytes per token are the stored format's, DERIVED from the model shape:

- fp8: one byte per element and one scale per K / V tensor of a layer (vLLM's per-tensor scales), nothing
  per token;
- int8 / int4: the compressed store tripath's engine serves the path with (tripath/engine/kv/compressed_store.py
  ``StoreConfig`` defaults, KIVI's grouping): b / 8 bytes per element (int4 packed two per byte), keys per
  channel in groups of one block of tokens, values per token in groups of channels, a scale and a zero point
  per group in the store's meta dtype, counted by tripath/engine/kv/quant.py ``bytes_per_token``. The
  full-precision tail block of a sequence (at most one block) is left out: the long-context figure.

kv_bytes_ratio = those bytes / the profile's fp16 kv_bytes_per_token.

Decode attention (unit "attention_ratio", tripath/simulator/paths/compression.py): the profile's attention
term (d_ctx per cached token) is the time to read the cached K and V, so with the mode it is DERIVED as the
slower of two bounds of a kernel that dequantizes as it reads (fused: the arithmetic overlaps the loads):

    attention_ratio = max(kv_bytes_ratio, ops x HBM bandwidth / (fp16 bytes per element x instruction rate))

ops: the dequantization instructions per element (``DEQUANT_OPS``); instruction rate: the datasheet's FP32
CUDA-core FLOP/s / 2 (an FMA counts two), every op assumed to issue at that rate. The second bound is the
dequantization time over the fp16 read time with both running at the same fraction of their peaks, so the
fraction cancels and the bound depends on the GPU alone. Prefill is unchanged (no prefill fields).

quality_loss is PUBLISHED, each on the model and metric its note names (never this profile's own model);
acceptance_drop is DERIVED 0: no published figure measures a separate draft against a target reading
compressed KV (docs/compression_gpu.md has the one related figure found and why it is not used).
"""

from __future__ import annotations

from dataclasses import dataclass

from tripath.calibrate.hardware import SPECS, spec_for_device
from tripath.core.errors import InputError
from tripath.engine.kv.compressed_store import StoreConfig
from tripath.engine.kv.quant import bytes_per_token
from tripath.profile.profile import Coefficient, CompressionMode, Profile

MODES = ("fp8", "int8", "int4")

# Dequantization instructions per element read (the stated assumption of the decode bound):
# int8: code -> float convert, then q x scale + zero as one FMA; int4: nibble shift and mask, convert, FMA;
# fp8 on Hopper: cvt e4m3 -> fp16, x the tensor's scale; fp8 on Ampere: the sign, exponent and mantissa
# bits moved into fp16's layout by shift / mask / or (3 integer ops; the exponent re-bias folded into the
# scale), x the scale.
DEQUANT_OPS = {"int8": 2, "int4": 4, "fp8": 2, "fp8-emulated": 4}


@dataclass(frozen=True)
class Quality:
    """A published quality figure: the loss in the metric's points, the model it was measured on, the source."""

    loss: float
    unit: str
    model: str
    note: str

    @property
    def text(self) -> str:
        return f"published: {self.note}. Measured on {self.model}, not this profile's model"


QUALITY = {
    "fp8": Quality(
        0.61, "HumanEval-Python-EN pass@1 points", "WizardCoder-34B",
        "vLLM PR #2279 (github.com/vllm-project/vllm/pull/2279): KV cache FP16 68.293% -> FP8 E4M3 67.683% "
        "(E5M2: 65.854%); on HumanEval-Python-CN E4M3 gained 0.61 (59.146% -> 59.756%); vLLM's format, "
        "per-tensor scales as this mode"),
    "int8": Quality(
        0.09, "MMLU average accuracy points", "a model the PR does not name",
        "vLLM PR #1507 (github.com/vllm-project/vllm/pull/1507): MMLU average 0.4657 (fp16) -> 0.4648 (fp16 "
        "with int8 KV); its int8 format uses offline-calibrated scales and zero points, coarser than this "
        "mode's per-group ones"),
    "int4": Quality(
        0.01, "LongBench average points (15 tasks)", "Mistral-7B-Instruct-v0.2",
        "KIVI-4 (arXiv 2402.02750; github.com/jy-yuan/KIVI docs/long_bench.md), group size 32, 128 recent "
        "tokens in fp16: Mistral-7B-Instruct-v0.2 43.54 -> 43.53, the larger of the two losses published "
        "(LongChat-7b-v1.5-32K 38.72 -> 38.79); this mode keeps only the tail block in full precision, not "
        "KIVI's 128 tokens"),
}

ACCEPTANCE_NOTE = ("derived: no published figure; lossless-enough formats assumed not to move acceptance "
                   "(docs/compression_gpu.md)")


def stored_bytes_per_token(profile: Profile, mode: str) -> float:
    """KV bytes per token of ``mode`` ("fp8", "int8", "int4") over all layers of the profile's model."""
    m = profile.model
    if mode == "fp8":
        return bytes_per_token(m.kv_heads, m.head_dim, m.layers, 8, 1, 1, 0, m.dtype_bytes)
    if mode not in ("int8", "int4"):
        raise InputError(None, "compression", f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    store = StoreConfig(mode)
    if m.head_dim % store.value_group:
        raise InputError(None, "model.head_dim", f"{m.head_dim} is not a multiple of the store's value group "
                         f"{store.value_group}")
    return bytes_per_token(m.kv_heads, m.head_dim, m.layers, store.bits, store.block_size, store.value_group,
                           store.meta_dtype.itemsize, m.dtype_bytes)


def _gpu(profile: Profile) -> tuple[str, float, float, str]:
    """(spec name, HBM bytes/s, instructions/s, citation) of the profile's GPU."""
    spec = spec_for_device(profile.hardware.device_name)
    if spec is None or spec.fp32_tflops is None:
        known = ", ".join(name for name, s in SPECS.items() if s.fp32_tflops is not None)
        raise InputError(None, "hardware.device_name", f"no published FP32 rate for {profile.hardware.device_name!r}"
                         f"; KV-compression costs need one ({known})")
    tflops, cite = spec.fp32_tflops
    return spec.name, spec.memory_tbps * 1e12, tflops * 1e12 / 2, f"{cite}; {spec.citation}"


def attention_ratio(profile: Profile, mode: str) -> tuple[float, str]:
    """Decode attention time with ``mode`` / with fp16 KV (module docstring) and the note saying how."""
    name, bandwidth, rate, cite = _gpu(profile)
    ratio = stored_bytes_per_token(profile, mode) / profile.model.kv_bytes_per_token
    key = "fp8-emulated" if mode == "fp8" and not SPECS[name].native_fp8 else mode
    ops = DEQUANT_OPS[key]
    compute = ops * bandwidth / (profile.model.dtype_bytes * rate)
    bound = "the bytes read (memory-bound)" if ratio >= compute else "the dequantization arithmetic"
    note = (f"derived: attention x max(bytes ratio {ratio:.6g}, dequantization {ops} ops/element x "
            f"{bandwidth / 1e12:.4g} TB/s / ({profile.model.dtype_bytes} B/element x {rate / 1e12:.4g} T instr/s) "
            f"= {compute:.4g}), bound by {bound}; assumes a fused kernel (dequantize as it reads) and every op at "
            f"the FP32 FMA issue rate. {cite}")
    return float(f"{max(ratio, compute):.6g}"), note


def compression_sections(profile: Profile) -> dict[str, CompressionMode]:
    """The fp8, int8 and int4 sections of a published profile, keyed by mode name."""
    out = {}
    full = profile.model.kv_bytes_per_token
    check = bytes_per_token(profile.model.kv_heads, profile.model.head_dim, profile.model.layers, None, 1, 1, 0,
                            profile.model.dtype_bytes)
    if check != full:
        raise InputError(None, "model.kv_bytes_per_token", f"{full} disagrees with the model's shape ({check:g})")
    for mode in MODES:
        stored = stored_bytes_per_token(profile, mode)
        layout = ("1 byte per element, per-tensor scales (nothing per token)" if mode == "fp8" else
                  f"{StoreConfig(mode).bits} bits per element + fp16 scale and zero per {StoreConfig().block_size} "
                  f"tokens of a key channel and per {StoreConfig().value_group} channels of a value token")
        ratio = Coefficient(stored / full, "ratio", "derived",
                            f"derived: {stored:g} / {full} bytes per token ({layout}; the engine's compressed store)")
        attention, how = attention_ratio(profile, mode)
        q = QUALITY[mode]
        out[mode] = CompressionMode(
            kv_bytes_ratio=ratio,
            decode_overhead_ratio=Coefficient(attention, "attention_ratio", "derived", how),
            quality_loss=Coefficient(q.loss, q.unit, "published", q.text),
            acceptance_drop=Coefficient(0.0, "acceptance", "derived", ACCEPTANCE_NOTE),
            note=f"{mode} KV on {profile.hardware.device_name}: bytes and decode attention derived from the model "
                 "shape and the GPU's datasheet; prefill unchanged; quality from published results on other models")
    return out
