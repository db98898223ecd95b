"""Building the published profiles: Vidur operator timings + vendor specs + link bandwidths.

Source kind "published": the costs are fitted to iteration times rebuilt from Vidur's real GPU
operator measurements (``tripath/calibrate/published/vidur.py``), the hardware and links are vendor and bus
specifications (``tripath/calibrate/hardware.py``), each cited in its note. Paging is the link's
published bandwidth with no setup term (no setup latency is published): a lower bound.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tripath.calibrate.assemble import SWEEPS, FittedCost, fit_all
from tripath.calibrate.hardware import SPECS
from tripath.calibrate.job import GPU_MEMORY_UTILISATION
from tripath.calibrate.published.vidur import GPUS, MODELS, published_samples
from tripath.calibrate.samples import Sample
from tripath.calibrate.sweeps.decode import DECODE_V1
from tripath.engine.model.config import PRESETS
from tripath.profile.profile import (
    Coefficient,
    CostModel,
    MemoryBudget,
    ModelSpec,
    PagingLink,
    Profile,
    ProfileKey,
    Provenance,
)

VIDUR_COMMIT = "vidur-7d47513363ec"
CREATED_UTC = "2026-11-29T00:00:00Z"  # fixed, so regenerating gives identical bytes
COMMAND = "python scripts/make_vidur_profiles.py"
DTYPE_BYTES = 2  # Vidur profiled fp16
PAGING_LINKS = ("device_host", "host_ssd")


def profile_name(gpu: str, model: str) -> str:
    tp = MODELS[model].tp
    short = {"a100-80gb": "a100", "h100-sxm": "h100"}[gpu]
    return f"published-{model.replace('llama-2', 'llama2')}{f'-tp{tp}' if tp > 1 else ''}-{short}"


def model_spec(model: str) -> ModelSpec:
    config = PRESETS[MODELS[model].preset]
    params = config.num_params()
    return ModelSpec(model, config.num_layers, config.num_heads, config.num_kv_heads, int(config.head_dim),
                     config.hidden_size, params, DTYPE_BYTES, config.kv_bytes_per_token(DTYPE_BYTES),
                     params * DTYPE_BYTES, "published architecture (HF config.json of meta-llama/Llama-2-*-hf); "
                     "params counted from the layer shapes; fp16 weights")


def _paging(gpu: str, kv_bytes_per_token: int) -> dict[str, PagingLink]:
    out = {}
    for link in PAGING_LINKS:
        bw = SPECS[gpu].links[link]
        cost = CostModel("paging_v1", {
            "setup_ms": Coefficient(0.0, "ms", "derived", "no setup latency is published: 0, so the cost is a "
                                    "lower bound"),
            "bandwidth_gbps": Coefficient(bw.value, "GB/s", "published", bw.note)},
            ("bytes",), {"bytes": (0.0, 0.0)}, None,
            "Published link bandwidth, never measured here (empty domain): measure with a paging sweep.")
        two_k = 2048 * kv_bytes_per_token
        out[link] = PagingLink(cost, cost.evaluate(bytes=two_k) - cost.evaluate(bytes=0.0))
    return out


def _label_projected(fitted: dict[str, FittedCost], scale: tuple[float, float]) -> dict[str, CostModel]:
    """On H100 the attention terms come from A100 attention x measured ratios: say so per coefficient."""
    costs = {}
    for name, f in fitted.items():
        coefficients = dict(f.model.coefficients)
        for coef, ratio, kind in (("c_attn", scale[1], "compute-bound"), ("d_ctx", scale[0], "memory-bound")):
            if coef in coefficients:
                c = coefficients[coef]
                coefficients[coef] = replace(c, source="projected", note=(
                    f"{c.note}; PROJECTED: Vidur has no H100 attention data, so A100 attention times x {ratio:.4g} "
                    f"(the {kind} H100/A100 time ratio measured in Vidur's linear-layer data)"))
        costs[name] = replace(f.model, coefficients=coefficients)
    return costs


def build_published_profile(root: Path, gpu: str, model: str) -> tuple[Profile, list[Sample],
                                                                         dict[str, FittedCost]]:
    """(profile, the rebuilt iteration samples, the fits) for one GPU and model."""
    vm, spec, mspec = MODELS[model], SPECS[gpu], model_spec(model)
    rebuilt = published_samples(root, gpu, vm, mspec.layers)
    attention_src = "A100 attention x measured H100/A100 ratios" if rebuilt.attention_scale else "A100 attention"
    data = (f"iteration times rebuilt from Vidur {GPUS[gpu]} operator medians (tp{vm.tp}, {attention_src}); "
            f"see data/peer-data/vidur/README.md")
    fitted = fit_all(rebuilt.samples, mspec.layers, coefficient_source="fitted", data=data,
                     note="Fitted to Vidur's published operator timings (MIT), not measured by tripath.",
                     sweeps={**SWEEPS, "decode": DECODE_V1})  # GPU data: no CPU gemv -> gemm step
    costs = ({n: f.model for n, f in fitted.items()} if rebuilt.attention_scale is None
             else _label_projected(fitted, rebuilt.attention_scale))
    budget = int(vm.tp * spec.memory_bytes * GPU_MEMORY_UTILISATION) - mspec.weight_bytes
    memory = MemoryBudget(budget, "derived", f"tp {vm.tp} x {spec.memory_bytes} bytes x {GPU_MEMORY_UTILISATION} "
                          "(vLLM's default utilisation) minus fp16 weights")
    notes = [
        f"Published data, not measured by tripath: Vidur (microsoft/vidur, MIT) operator timings on "
        f"{spec.device_name}, tp {vm.tp}, rebuilt into iterations and fitted (tripath/calibrate/published/vidur.py).",
        "Omitted by Vidur's data and so here: LM head, sampling and CPU overheads (about 1 % of a step).",
        "No speculative, sequence-parallel or compression data: those sections are absent.",
    ]
    if rebuilt.attention_scale is not None:
        decode, prefill = rebuilt.attention_scale
        notes.append(f"Attention on H100 is PROJECTED from A100 attention: decode x {decode:.4g}, prefill x "
                     f"{prefill:.4g} (H100/A100 ratios measured in Vidur's linear layers).")
    profile = Profile(
        key=ProfileKey(gpu, model, "fp16", vm.tp, VIDUR_COMMIT), source="published",
        hardware=spec.hardware("Costs from Vidur's operator profiles on this GPU"), model=mspec, memory=memory,
        costs=costs, provenance=Provenance(COMMAND, VIDUR_COMMIT, None, None, spec.device_name, CREATED_UTC),
        paging=_paging(gpu, mspec.kv_bytes_per_token), notes=tuple(notes))
    return profile, rebuilt.samples, fitted
