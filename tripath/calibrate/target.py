"""The model a calibration times: a checkpoint folder, or a config preset with random weights.

Big models on one device: a preset such as ``llama2-70b`` is instantiated with its real layer
shapes but only a few decoder layers (random weights; timing does not depend on the values).
The sweeps then time the model at 1 layer and at ``layers_timed`` layers; the difference is the
cost of one decoder layer and the rest is the per-step cost outside the layers (embedding,
final norm, LM head, Python), so the full model's time is
``t(1) + (L - 1) * (t(m) - t(1)) / (m - 1)`` — the per-layer extrapolation operator-level
profilers use. A checkpoint is timed whole (one layer count, no scaling).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from tripath.core.errors import InputError
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.model.config import PRESETS, ModelConfig
from tripath.engine.model.model import LlamaModel
from tripath.profile.profile import ModelSpec

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_KEYS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class TargetSpec:
    """Which model to time: exactly one of ``checkpoint`` (a folder) or ``preset`` (a config name)."""

    checkpoint: str | None = None
    preset: str | None = None
    layers_timed: int = 2  # presets only: decoder layers actually instantiated (>= 2 to separate per-layer cost)
    dtype: str = "float32"
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.checkpoint is None) == (self.preset is None):
            raise InputError(None, "model", "give exactly one of --model DIR or --model-config NAME")
        if self.preset is not None and self.preset not in PRESETS:
            raise InputError(None, "model_config", f"unknown preset {self.preset!r}; known: {', '.join(PRESETS)}")
        if isinstance(self.layers_timed, bool) or not isinstance(self.layers_timed, int) or self.layers_timed < 2:
            raise InputError(None, "layers_timed", f"must be an integer >= 2, got {self.layers_timed!r}")
        if self.dtype not in DTYPES:
            raise InputError(None, "dtype", f"must be one of {', '.join(DTYPES)}; got {self.dtype!r}")

    @property
    def name(self) -> str:
        return Path(self.checkpoint).name if self.checkpoint is not None else str(self.preset)

    @property
    def scaled(self) -> bool:
        """Whether the timings are per-layer extrapolations to the full depth."""
        if self.preset is None:
            return False
        return self.layers_timed < PRESETS[self.preset].num_layers


@dataclass
class LoadedTarget:
    """The full model's config and one model per timed layer count (1 and m when scaled, else the whole)."""

    spec: TargetSpec
    config: ModelConfig
    models: dict[int, LlamaModel]

    @property
    def layer_counts(self) -> tuple[int, ...]:
        return tuple(sorted(self.models))


def load_target(spec: TargetSpec, device: torch.device) -> LoadedTarget:
    dtype = DTYPES[spec.dtype]
    if spec.checkpoint is not None:
        config, model = load_checkpoint(spec.checkpoint, dtype=dtype, device=device)
        return LoadedTarget(spec, config, {config.num_layers: model})
    config = PRESETS[str(spec.preset)]
    counts = (1, spec.layers_timed) if spec.scaled else (config.num_layers,)
    models = {}
    for count in counts:
        generator = torch.Generator().manual_seed(spec.seed)
        with torch.device("meta"):
            model = LlamaModel(replace(config, num_layers=count), initialize=False)
        # materialized in the timing dtype, so a 70B layer never exists in fp32 (reset_parameters draws each
        # weight in fp32 and copies it in: the same values as initializing in fp32 and casting after)
        model = model.to(dtype).to_empty(device=device)
        model.reset_parameters(generator)
        models[count] = model.eval()
    return LoadedTarget(spec, config, models)


def full_depth_ms(times_by_layers: dict[int, float], layers: int) -> float:
    """The full model's time from timings at 1 and m layers (or the whole model's own timing)."""
    if layers in times_by_layers:
        return times_by_layers[layers]
    (one, t_one), (m, t_m) = sorted(times_by_layers.items())
    if one != 1:
        raise ValueError(f"need a 1-layer timing to extrapolate, got layer counts {sorted(times_by_layers)}")
    per_layer = max(0.0, (t_m - t_one) / (m - 1))  # noise can make a tiny difference negative
    return t_one + (layers - 1) * per_layer


def model_spec(target: LoadedTarget) -> ModelSpec:
    """The profile's model section for the FULL model (not the few layers timed)."""
    config, spec = target.config, target.spec
    dtype_bytes = torch.empty((), dtype=DTYPES[spec.dtype]).element_size()
    params = config.num_params()
    if spec.scaled:
        note = (f"config preset {spec.preset} with random weights; timed at 1 and {spec.layers_timed} decoder "
                f"layers and extrapolated per layer to {config.num_layers}")
    elif spec.preset is not None:
        note = f"config preset {spec.preset} with random weights (seed {spec.seed}), all layers timed"
    else:
        note = f"checkpoint {spec.checkpoint}, all layers timed"
    return ModelSpec(spec.name, config.num_layers, config.num_heads, config.num_kv_heads, int(config.head_dim),
                     config.hidden_size, params, dtype_bytes, config.kv_bytes_per_token(dtype_bytes),
                     params * dtype_bytes, note)
