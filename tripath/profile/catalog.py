"""The GPU profiles tripath ships from aiconfigurator-core: models, GPUs, TP degrees, weights, and their names.

tripath/calibrate/aic/ builds them; the planning side only needs their names (``profile_name``).

Every model in ``MODELS`` has its HF config.json under data/model_configs/ (the shapes only; no weights). A
combination ships when its weights leave at least 10 % of the replica's memory for KV
(tripath/calibrate/aic/builder.py ``kv_budget``) and the estimator has tables for it (A100 has no fp8 tensor
cores, so no fp8 profile on A100). ``SPECULATIVE`` pairs each target with the draft its speculative section is
priced for (Llama-3.1-8B has no small same-vocabulary draft in the catalogue, so its profiles have none).
``tripath profile build`` builds any other combination on demand.
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
}
GPUS = ("a100-80gb", "h100-sxm", "h200", "b200")
TPS = (1, 2, 4, 8)
WEIGHTS = ("fp16", "fp8")
BACKENDS = ("vllm", "sglang", "trtllm")  # the serving frameworks whose kernel tables aiconfigurator-core ships


def combinations() -> Iterator[tuple[CatalogModel, str, int, str]]:
    """(model, GPU, TP, weights) of every profile to try building, fp8 only where the GPU has fp8 tensor cores."""
    for model in MODELS.values():
        for gpu in GPUS:
            for tp in TPS:
                for weights in WEIGHTS:
                    if weights == "fp8" and gpu == "a100-80gb":
                        continue
                    yield model, gpu, tp, weights


def draft_for(model: str) -> tuple[str, Path, str, str] | None:
    """(draft name, its config folder, acceptance pair, why) of a catalogue target, None when it has no draft."""
    if model not in SPECULATIVE:
        return None
    draft, pair, why = SPECULATIVE[model]
    entry = MODELS.get(draft) or DRAFTS[draft]
    return entry.name, entry.config_dir, pair, why


def profile_name(model_short: str, hardware: str, tp: int, weights: str, backend: str = "vllm") -> str:
    """aic-MODEL[-tpN]-GPU[-fp8][-BACKEND]: the shipped file name (data/profiles/); vLLM's tables are the default."""
    gpu = {"a100-80gb": "a100", "h100-sxm": "h100", "h200": "h200", "b200": "b200"}[hardware]
    suffix = ("-fp8" if weights == "fp8" else "") + ("" if backend == "vllm" else f"-{backend}")
    return f"aic-{model_short}{f'-tp{tp}' if tp > 1 else ''}-{gpu}{suffix}"


def layouts(name: str, profiles_dir: Path | None = None) -> list[str]:
    """The shipped profiles a deployment of ``name``'s model could choose instead: the same model, weights and
    serving backend on every GPU type and TP degree shipped (``name`` among them), in catalogue order (GPUS, then
    TPS). A name outside the catalogue's pattern (a measured or user profile) has no family: only itself."""
    folder = profiles_dir or DATA_DIR / "profiles"
    for model in MODELS.values():
        for gpu in GPUS:
            for tp in TPS:
                for weights in WEIGHTS:
                    for backend in BACKENDS:
                        if profile_name(model.short, gpu, tp, weights, backend) != name:
                            continue
                        family = [profile_name(model.short, g, t, weights, backend) for g in GPUS for t in TPS
                                  if not (weights == "fp8" and g == "a100-80gb")]
                        return [n for n in family if (folder / f"{n}.json").is_file()]
    return [name]
