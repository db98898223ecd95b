"""The GPU profiles tripath ships from aiconfigurator-core: models, GPUs, TP degrees, weights, and their names.

tripath/calibrate/aic/ builds them; the planning side only needs their names (``profile_name``).

Every model in ``MODELS`` has its HF config.json under data/model_configs/ (the shapes only; no weights). A combination
ships when its weights leave at least 10 % of the replica's memory for KV (tripath/calibrate/aic/builder.py
``kv_budget``) and the estimator has tables for it (A100 has no fp8 tensor cores, so no fp8 profile on A100).
Mixture-of-experts models (``CatalogModel.moe``) ship on H100, H200 and B200 (not the block-fp8 checkpoints on B200:
``MODELS``' comment) at every TP degree that fits, their experts sharded by TP and, from TP 2 up, as a second profile
named ``-ep``, by expert parallelism over the same GPUs; and with attention data parallelism (vLLM's
--data-parallel-size, ``DP_LAYOUTS``: D ranks of TP 1 for D = 2, 4, 8, and 2 ranks of TP 2; named ``-dpD``): every rank
runs attention for its own batch over its own KV pool while the MoE layers run over all the replica's D x TP GPUs, the
experts again by TP or (``-ep``) by EP over them; such a profile is one rank's (``ProfileKey.attention_dp``), shipped
where one rank's weights (the non-expert ones whole, 1/D of the experts) leave at least 10 % of its GPUs' memory for
KV. Each in the precisions its checkpoint is served in (``CatalogModel.weights``: Qwen3-235B-A22B and DeepSeek-V3 are
fp8 block-scaled checkpoints, gpt-oss-120b's experts mxfp4, "fp4"). ``SPECULATIVE`` pairs each target with the draft
its speculative section is priced for (Llama-3.1-8B has no small same-vocabulary draft in the catalogue, so its
profiles have none; of the mixture-of-experts models Qwen3-235B-A22B has one, Qwen3-0.6B with its tokenizer;
DeepSeek-V3 is priced with its own multi-token-prediction layer (tripath/calibrate/aic/builder.py ``mtp_curve``);
Mixtral and gpt-oss-120b have no small same-vocabulary draft checkpoint). ``tripath profile build`` builds any other
combination on demand.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tripath.core.data_dirs import DATA_DIR

MODEL_CONFIGS = DATA_DIR / "model_configs"


@dataclass(frozen=True)
class CatalogModel:
    name: str  # the profile key's model
    short: str  # in the file name
    config: str  # folder under data/model_configs/
    weights: tuple[str, ...] = ("fp16", "fp8")  # the precisions shipped
    moe: bool = False  # mixture of experts: with and without expert parallelism from TP 2 up
    gpus: tuple[str, ...] | None = None  # None: GPUS (dense), MOE_GPUS (mixture of experts)

    @property
    def config_dir(self) -> Path:
        return MODEL_CONFIGS / self.config


MODELS = {m.name: m for m in (
    CatalogModel("llama-2-7b", "llama2-7b", "Llama-2-7b-hf"),
    CatalogModel("llama-2-70b", "llama2-70b", "Llama-2-70b-hf"),
    CatalogModel("codellama-34b", "codellama-34b", "CodeLlama-34b-hf"),
    CatalogModel("llama-3.1-8b", "llama3.1-8b", "Llama-3.1-8B"),
    CatalogModel("llama-3.1-70b", "llama3.1-70b", "Llama-3.1-70B"),
    CatalogModel("llama-3.1-405b", "llama3.1-405b", "Llama-3.1-405B"),
    CatalogModel("qwen3-32b", "qwen3-32b", "Qwen3-32B"),
    CatalogModel("mixtral-8x7b", "mixtral-8x7b", "Mixtral-8x7B-v0.1", moe=True),
    # block-fp8 checkpoints: not on B200, whose vLLM 0.24.0 block-fp8 GEMM rows in the package (DeepGEMM) take
    # 0.27 ms at one token for any width, 30 x its bf16 rows and 4.5 x H200's (docs/aic_profiles.md)
    CatalogModel("qwen3-235b-a22b", "qwen3-235b-a22b", "Qwen3-235B-A22B-FP8", ("fp8",), True, ("h100-sxm", "h200")),
    CatalogModel("deepseek-v3", "deepseek-v3", "DeepSeek-V3", ("fp8",), True, ("h100-sxm", "h200")),
    CatalogModel("gpt-oss-120b", "gpt-oss-120b", "gpt-oss-120b", ("fp4",), moe=True),
)}
# drafts: priced, never shipped as profiles of their own
DRAFTS = {m.name: m for m in (
    CatalogModel("llama-68m", "llama-68m", "llama-68m"),  # JackFram/llama-68m (SpecInfer's draft; Spec-Bench's SpS)
    CatalogModel("qwen3-0.6b", "qwen3-0.6b", "Qwen3-0.6B"),
)}
# target -> (draft, the acceptance table it plans on (calibrate/published/acceptance.py PAIRS), why that table)
SEED_STAND_IN = "no published per-task acceptance for this pair: the seed's Llama-2-70B/7B pair (Table 3.1) stands in"
SPECULATIVE = {
    "llama-2-7b": ("llama-68m", "vicuna-7b/vicuna-68m",
                   "Spec-Bench's SpS pair (Vicuna-7B, a Llama-2-7B-shaped model, with a 68M draft)"),
    "llama-2-70b": ("llama-2-7b", "llama2-70b/llama2-7b", "the seed's own pair (Table 3.1)"),
    "codellama-34b": ("llama-2-7b", "llama2-70b/llama2-7b",
                      "a Llama-2-7B-shaped draft (CodeLlama-7B's shapes); " + SEED_STAND_IN),
    "llama-3.1-70b": ("llama-3.1-8b", "llama2-70b/llama2-7b", SEED_STAND_IN),
    "llama-3.1-405b": ("llama-3.1-8b", "llama2-70b/llama2-7b", SEED_STAND_IN),
    "qwen3-32b": ("qwen3-0.6b", "llama2-70b/llama2-7b", SEED_STAND_IN),
    "qwen3-235b-a22b": ("qwen3-0.6b", "llama2-70b/llama2-7b", SEED_STAND_IN),
}
GPUS = ("a100-80gb", "h100-sxm", "h200", "b200")
TPS = (1, 2, 4, 8)
WEIGHTS = ("fp16", "fp8", "fp4")
MOE_GPUS = ("h100-sxm", "h200", "b200")
# (TP per rank, attention data-parallel ranks) of the mixture-of-experts models' attention-DP profiles: one node
DP_LAYOUTS = ((1, 2), (1, 4), (1, 8), (2, 2))
BACKENDS = ("vllm", "sglang", "trtllm")  # the serving frameworks whose kernel tables aiconfigurator-core ships


def _layouts_of(model: CatalogModel) -> Iterator[tuple[str, int, str, bool, int]]:
    """(GPU, TP, weights, expert parallel, attention DP) of ``model``'s catalogue, fp8 and fp4 only where the GPU
    has fp8 tensor cores (not A100); a mixture-of-experts model's attention-DP layouts (``DP_LAYOUTS``) after its
    TP ones."""
    for gpu in model.gpus or (MOE_GPUS if model.moe else GPUS):
        for tp in TPS:
            for weights in model.weights:
                if weights != "fp16" and gpu == "a100-80gb":
                    continue
                for ep in (False, True) if model.moe and tp > 1 else (False,):  # EP over one GPU is TP
                    yield gpu, tp, weights, ep, 1
    if model.moe:
        for gpu in model.gpus or MOE_GPUS:
            for tp, dp in DP_LAYOUTS:
                for weights in model.weights:
                    for ep in (False, True):  # over the D x TP GPUs: at least 2
                        yield gpu, tp, weights, ep, dp


def combinations() -> Iterator[tuple[CatalogModel, str, int, str, bool, int]]:
    """(model, GPU, TP, weights, expert parallel, attention DP) of every profile to try building."""
    for model in MODELS.values():
        for gpu, tp, weights, ep, dp in _layouts_of(model):
            yield model, gpu, tp, weights, ep, dp


def draft_for(model: str) -> tuple[str, Path, str, str] | None:
    """(draft name, its config folder, acceptance pair, why) of a catalogue target, None when it has no draft."""
    if model not in SPECULATIVE:
        return None
    draft, pair, why = SPECULATIVE[model]
    entry = MODELS.get(draft) or DRAFTS[draft]
    return entry.name, entry.config_dir, pair, why


def profile_name(model_short: str, hardware: str, tp: int, weights: str, backend: str = "vllm",
                 expert_parallel: bool = False, attention_dp: int = 1) -> str:
    """aic-MODEL[-tpN][-dpD]-GPU[-fp8|-fp4][-ep][-BACKEND]: the shipped file name (data/profiles/); vLLM's tables are
    the default, 16-bit weights, no attention data parallelism and experts sharded by TP unsuffixed."""
    gpu = {"a100-80gb": "a100", "h100-sxm": "h100", "h200": "h200", "b200": "b200"}[hardware]
    suffix = (("" if weights == "fp16" else f"-{weights}") + ("-ep" if expert_parallel else "")
              + ("" if backend == "vllm" else f"-{backend}"))
    layout = (f"-tp{tp}" if tp > 1 else "") + (f"-dp{attention_dp}" if attention_dp > 1 else "")
    return f"aic-{model_short}{layout}-{gpu}{suffix}"


def _shapes(model: CatalogModel) -> list[tuple[int, bool, int]]:
    """(TP, expert parallel, attention DP) a family of ``model`` spans: every TP degree, a mixture-of-experts
    model's with and without expert parallelism and then its attention-DP layouts (``DP_LAYOUTS``)."""
    if not model.moe:
        return [(tp, False, 1) for tp in TPS]
    return ([(tp, ep, 1) for tp in TPS for ep in (False, True)]
            + [(tp, ep, dp) for tp, dp in DP_LAYOUTS for ep in (False, True)])


def layouts(name: str, profiles_dir: Path | None = None) -> list[str]:
    """The shipped profiles a deployment of ``name``'s model could choose instead: the same model, weights and
    serving backend on every GPU type and TP degree shipped (``name`` among them; a mixture-of-experts model's
    with and without expert parallelism, and with attention data parallelism), in catalogue order (GPUS, then
    TPS, then a mixture-of-experts model's DP_LAYOUTS). A name outside the catalogue's pattern (a measured or
    user profile) has no family: only itself."""
    folder = profiles_dir or DATA_DIR / "profiles"
    for model in MODELS.values():
        shapes = _shapes(model)
        for gpu in GPUS:
            for tp, ep, dp in shapes:
                for weights in model.weights:
                    for backend in BACKENDS:
                        if profile_name(model.short, gpu, tp, weights, backend, ep, dp) != name:
                            continue
                        family = [profile_name(model.short, g, t, weights, backend, e, d) for g in GPUS
                                  for t, e, d in shapes if not (weights != "fp16" and g == "a100-80gb")]
                        return [n for n in family if (folder / f"{n}.json").is_file()]
    return [name]
