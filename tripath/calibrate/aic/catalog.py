"""The GPU profiles tripath ships from aiconfigurator-core: which models, GPUs, TP degrees and weight precisions.

Every model in ``MODELS`` has its HF config.json under data/model_configs/ (the shapes only; no weights). A
combination ships when its weights leave at least 10 % of the replica's memory for KV
(tripath/calibrate/aic/builder.py ``kv_budget``) and the estimator has tables for it (A100 has no fp8 tensor
cores, so no fp8 profile on A100). ``tripath profile build`` builds any other combination on demand.
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
GPUS = ("a100-80gb", "h100-sxm", "h200", "b200")
TPS = (1, 2, 4, 8)
WEIGHTS = ("fp16", "fp8")


def combinations() -> Iterator[tuple[CatalogModel, str, int, str]]:
    """(model, GPU, TP, weights) of every profile to try building, fp8 only where the GPU has fp8 tensor cores."""
    for model in MODELS.values():
        for gpu in GPUS:
            for tp in TPS:
                for weights in WEIGHTS:
                    if weights == "fp8" and gpu == "a100-80gb":
                        continue
                    yield model, gpu, tp, weights
