"""Building the published profiles: Vidur operator timings + vendor specs + link bandwidths.

Source kind "published": the costs are fitted to iteration times rebuilt from Vidur's real GPU
operator measurements (``tripath/calibrate/published/vidur.py``), the hardware and links are vendor and bus
specifications (``tripath/calibrate/hardware.py``), each cited in its note. Paging is the link's
published rate with no setup term (no setup latency is published): a lower bound. Where others
measured what an engine's copies reach over the link (H100 DMA), that rate is used rather than the
bus figure, which no engine attains.

Profiles named ``published-*`` stand on Vidur's measurements of that GPU; ``projected-*`` ones are a
published profile scaled to hardware Vidur did not measure (``projection.py``), source "projected".

``with_paths`` adds every optimization path's section: speculative decoding for the model's draft/target pair
(``speculative.py``, acceptance from ``acceptance.py``), sequence parallelism (``seqpar.py``) and KV compression
(``compression.py``). A projected profile keeps its source's speculative section with the round-cost curves
projected, and gets its sequence-parallel and compression sections built again on its own GPU.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tripath.calibrate.assemble import SWEEPS, FittedCost, fit_all
from tripath.calibrate.hardware import SPECS
from tripath.calibrate.job import GPU_MEMORY_UTILISATION
from tripath.calibrate.published.acceptance import acceptance_for_pair
from tripath.calibrate.published.compression import compression_sections
from tripath.calibrate.published.projection import project_profile
from tripath.calibrate.published.seqpar import sequence_parallel_sections
from tripath.calibrate.published.speculative import HYPOTHETICAL_LLAMA3_DRAFT, speculative_section
from tripath.calibrate.published.vidur import MODELS, PublishedSamples, VidurModel, published_samples
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
from tripath.profile.speculative import Speculative

VIDUR_COMMIT = "vidur-7d47513363ec"
CREATED_UTC = "2026-11-29T00:00:00Z"  # fixed, so regenerating gives identical bytes
COMMAND = "python scripts/make_vidur_profiles.py"
DTYPE_BYTES = 2  # Vidur profiled fp16
PAGING_LINKS = ("device_host", "host_ssd")
SHORT = {"a100-80gb": "a100", "h100-sxm": "h100", "h200": "h200"}
# (source gpu, model, target gpu) of the projected profiles: the source is the measured GPU nearest the target
PROJECTED = (("a100-80gb", "llama-3-8b", "h100-sxm"), ("a100-80gb", "llama-3-70b-tp4", "h100-sxm"),
             ("a100-80gb", "llama-3-8b", "h200"), ("a100-80gb", "llama-3-70b-tp4", "h200"),
             ("h100-sxm", "llama-2-7b", "h200"), ("h100-sxm", "llama-2-70b", "h200"))


# per model (MODELS key): the speculative draft/target pair priced on the profile's GPU (speculative.PAIRS) and the
# acceptance table it plans on (acceptance.PAIRS), with why that table
SPECULATIVE_PAIRS = {
    "llama-2-7b": ("llama2-7b/llama-68m", "vicuna-7b/vicuna-68m",
                   "Spec-Bench's SpS pair (Vicuna-7B, a Llama-2-7B-shaped model, with a 68M draft)"),
    "llama-2-70b": ("llama2-70b-tp2/llama2-7b", "llama2-70b/llama2-7b", "the seed's own pair (Table 3.1)"),
    "llama-2-70b-tp4": ("llama2-70b-tp4/llama2-7b", "llama2-70b/llama2-7b", "the seed's own pair (Table 3.1)"),
    "llama-3-8b": (f"llama3-8b/{HYPOTHETICAL_LLAMA3_DRAFT}", "vicuna-7b/vicuna-68m",
                   "no published acceptance for a small Llama-3 draft: Spec-Bench's SpS pair (a 7B target with a "
                   "68M draft) stands in"),
    "llama-3-70b-tp4": ("llama3-70b-tp4/llama3-8b", "llama2-70b/llama2-7b",
                        "no published per-task acceptance for Llama-3-70B with an 8B draft: the seed's 70B/7B "
                        "pair of the previous generation stands in"),
}


def with_paths(root: Path, profile: Profile, model: str, speculative: Speculative | None = None) -> Profile:
    """``profile`` with every path's section (module docstring). ``speculative``: the section to keep (a projected
    profile's, projected from its source); None builds it from Vidur's rows on the profile's GPU."""
    pair, acceptance_pair, why = SPECULATIVE_PAIRS[model]
    section = speculative if speculative is not None else speculative_section(root, pair, profile.key.hardware,
                                                                               profile)
    sequence_parallel = sequence_parallel_sections(root, profile)
    notes = list(profile.notes)
    notes.append(f"Paths: speculative decoding priced for {pair} (round costs by batch and context from Vidur's "
                 f"linear-layer rows), acceptance from {acceptance_pair}: {why}; sequence parallelism at degrees "
                 f"{', '.join(map(str, sorted(sequence_parallel))) or 'none'} (zigzag ring prefill and sharded-KV "
                 "decode priced from the profile's costs and Vidur's NCCL medians); KV compression fp8, int8, int4 "
                 "(bytes, decode attention, published quality). All derived: docs/published_profiles.md.")
    return replace(profile, speculative=section, acceptance=acceptance_for_pair(acceptance_pair),
                   sequence_parallel=sequence_parallel, compression=compression_sections(profile),
                   notes=tuple(notes))


def profile_name(gpu: str, model: str, projected: bool = False) -> str:
    """published-MODEL[-tpN]-GPU for Vidur-measured GPUs, projected-... for a projection to ``gpu``."""
    vm = MODELS[model]
    short_model = vm.name.replace("llama-2", "llama2").replace("llama-3", "llama3")
    prefix = "projected" if projected else "published"
    return f"{prefix}-{short_model}{f'-tp{vm.tp}' if vm.tp > 1 else ''}-{SHORT[gpu]}"


def model_spec(model: str) -> ModelSpec:
    vm = MODELS[model]
    config = PRESETS[vm.preset]
    params = config.num_params()
    hf = "Llama-2-*-hf" if vm.hf_dir.startswith("Llama-2") else vm.hf_dir
    return ModelSpec(vm.name, config.num_layers, config.num_heads, config.num_kv_heads, int(config.head_dim),
                     config.hidden_size, params, DTYPE_BYTES, config.kv_bytes_per_token(DTYPE_BYTES),
                     params * DTYPE_BYTES, f"published architecture (HF config.json of meta-llama/{hf}); "
                     "params counted from the layer shapes; fp16 weights")


def kv_budget(gpu: str, tp: int, weight_bytes: int, weights: str = "fp16") -> MemoryBudget:
    """tp GPUs' memory at vLLM's default utilisation, less the weights (``weights``: their precision, for the note)."""
    spec = SPECS[gpu]
    budget = int(tp * spec.memory_bytes * GPU_MEMORY_UTILISATION) - weight_bytes
    return MemoryBudget(budget, "derived", f"tp {tp} x {spec.memory_bytes} bytes x {GPU_MEMORY_UTILISATION} "
                        f"(vLLM's default utilisation) minus {weights} weights")


def paging_links(gpu: str, kv_bytes_per_token: int) -> dict[str, PagingLink]:
    """Per link: the engine copy rate measured by others where published, else the bus figure; no setup term."""
    spec = SPECS[gpu]
    out = {}
    for link in PAGING_LINKS:
        bus = spec.links[link]
        rate = spec.copy_rates.get(link)
        note = ("Published link bandwidth, never measured here (empty domain): measure with a paging sweep."
                if rate is None else
                f"Copy rate measured by others, below the bus's {bus.value:g} GB/s (an upper bound no engine "
                "reaches); never measured here (empty domain): measure with a paging sweep.")
        bw = bus if rate is None else rate
        cost = CostModel("paging_v1", {
            "setup_ms": Coefficient(0.0, "ms", "derived", "no setup latency is published: 0, so the cost is a "
                                    "lower bound"),
            "bandwidth_gbps": Coefficient(bw.value, "GB/s", bw.source, bw.note)},
            ("bytes",), {"bytes": (0.0, 0.0)}, None, note)
        two_k = 2048 * kv_bytes_per_token
        out[link] = PagingLink(cost, cost.evaluate(bytes=two_k) - cost.evaluate(bytes=0.0))
    return out


def _attention_label(rebuilt: PublishedSamples) -> tuple[str, dict[str, str]] | None:
    """(source, note per attention coefficient) when attention is not Vidur's measurement on this GPU."""
    fit, scale = rebuilt.attention_fit, rebuilt.attention_scale
    if fit is None and scale is None:
        return None
    derived = ("DERIVED: Vidur has no attention profile for this model and tp, so attention per layer is "
               f"derived from FLOPs and K/V bytes at efficiencies fitted on Vidur's real Llama-2 A100 attention "
               f"rows (tripath/calibrate/published/attention.py: {fit.describe()})" if fit is not None else "")
    if scale is None:
        return "derived", {"c_attn": derived, "d_ctx": derived}
    base = "attention derived on A100 as above" if fit is not None else "Vidur has no H100 attention data"
    notes = {coef: (f"{derived + '; ' if derived else ''}PROJECTED: {base}, so A100 attention times x {ratio:.4g} "
                    f"(the {kind} H100/A100 time ratio measured in Vidur's linear-layer data)")
             for coef, ratio, kind in (("c_attn", scale[1], "compute-bound"), ("d_ctx", scale[0], "memory-bound"))}
    return "projected", notes


def _label_attention(fitted: dict[str, FittedCost], rebuilt: PublishedSamples) -> dict[str, CostModel]:
    """The attention coefficients say where their attention came from when it is not measured on this GPU."""
    label = _attention_label(rebuilt)
    if label is None:
        return {n: f.model for n, f in fitted.items()}
    source, notes = label
    costs = {}
    for name, f in fitted.items():
        coefficients = dict(f.model.coefficients)
        for coef, note in notes.items():
            if coef in coefficients:
                c = coefficients[coef]
                coefficients[coef] = replace(c, source=source, note=f"{c.note}; {note}")
        costs[name] = replace(f.model, coefficients=coefficients)
    return costs


def _model_notes(vm: VidurModel, gpu: str) -> list[str]:
    if vm.name.startswith("llama-2"):
        return ["Omitted by Vidur's data and so here: LM head, sampling and CPU overheads (about 1 % of a step)."]
    config = PRESETS[vm.preset]
    head = config.vocab_size * config.hidden_size * DTYPE_BYTES / vm.tp
    ms = head / (SPECS[gpu].memory_tbps * 1e12) * 1e3
    return [f"Omitted by Vidur's data and so here: LM head, sampling and CPU overheads. The LM head "
            f"({config.vocab_size} x {config.hidden_size} fp16, {head / 1e9:.3g} GB per GPU at tp {vm.tp}) adds at "
            f"least {ms:.3g} ms to a decode step on {SPECS[gpu].device_name} (derived: its weights read once at HBM "
            "peak).",
            f"{vm.name}: the shapes of HF config.json (8K window); Llama-3.1 has the same shapes with a 128K window "
            "(RoPE scaling only), so the profile stands for it too. The profile sets no context limit: a 128K "
            "request is refused only when its KV exceeds the budget; costs past the domain are extrapolated by "
            "the formulas and counted."]


def build_published_profile(root: Path, gpu: str, model: str) -> tuple[Profile, list[Sample],
                                                                         dict[str, FittedCost]]:
    """(profile, the rebuilt iteration samples, the fits) for one GPU and model."""
    vm, spec, mspec = MODELS[model], SPECS[gpu], model_spec(model)
    rebuilt = published_samples(root, gpu, vm, mspec.layers)
    attention_src = "derived A100 attention" if rebuilt.attention_fit is not None else "A100 attention"
    if rebuilt.attention_scale:
        attention_src += " x measured H100/A100 ratios"
    data = (f"iteration times rebuilt from Vidur {SHORT[gpu]} operator medians (tp{vm.tp}, {attention_src}); "
            f"see data/peer-data/vidur/README.md")
    fitted = fit_all(rebuilt.samples, mspec.layers, coefficient_source="fitted", data=data,
                     note="Fitted to Vidur's published operator timings (MIT), not measured by tripath.",
                     sweeps={**SWEEPS, "decode": DECODE_V1})  # GPU data: no CPU gemv -> gemm step
    costs = _label_attention(fitted, rebuilt)
    memory = kv_budget(gpu, vm.tp, mspec.weight_bytes)
    notes = [
        f"Published data, not measured by tripath: Vidur (microsoft/vidur, MIT) operator timings on "
        f"{spec.device_name}, tp {vm.tp}, rebuilt into iterations and fitted (tripath/calibrate/published/vidur.py).",
        *_model_notes(vm, gpu),
    ]
    if rebuilt.attention_fit is not None:
        errors = ", ".join(f"{label} decode {d:.1%} / prefill {p:.1%}"
                           for label, (d, p) in rebuilt.attention_fit.mape.items())
        notes.append(f"Attention is DERIVED (no Vidur attention profile for {vm.name} at tp {vm.tp}): FLOPs and "
                     f"K/V bytes on the A100 roofline at efficiencies fitted on Vidur's real Llama-2 A100 "
                     f"attention rows (fit MAPE {errors}); see docs/published_profiles.md.")
    if rebuilt.attention_scale is not None:
        decode, prefill = rebuilt.attention_scale
        notes.append(f"Attention on H100 is PROJECTED from A100 attention: decode x {decode:.4g}, prefill x "
                     f"{prefill:.4g} (H100/A100 ratios measured in Vidur's linear layers).")
    profile = Profile(
        key=ProfileKey(gpu, vm.name, "fp16", vm.tp, VIDUR_COMMIT), source="published",
        hardware=spec.hardware("Costs from Vidur's operator profiles on this GPU"), model=mspec, memory=memory,
        costs=costs, provenance=Provenance(COMMAND, VIDUR_COMMIT, None, None, spec.device_name, CREATED_UTC),
        paging=paging_links(gpu, mspec.kv_bytes_per_token), notes=tuple(notes))
    return profile, rebuilt.samples, fitted


def project_published(profile: Profile, dst: str) -> Profile:
    """A published profile (with whatever sections the caller added) projected to ``dst``, source "projected".

    Costs and sections scale by roofline ratios (``projection.py``); the KV budget and paging follow the
    same rules as a published profile on ``dst`` (its memory, its links), since those are specifications.
    """
    projected = project_profile(profile, SPECS[dst], COMMAND, CREATED_UTC)
    tp = projected.key.tp
    return replace(projected, memory=kv_budget(dst, tp, projected.model.weight_bytes),
                   paging=paging_links(dst, projected.model.kv_bytes_per_token))


def project_with_paths(root: Path, profile: Profile, model: str, dst: str) -> Profile:
    """A published profile with its paths (``with_paths``) projected to ``dst``: the speculative section's curves
    projected, sequence parallelism and compression built again on ``dst``."""
    projected = project_published(profile, dst)
    return with_paths(root, projected, model, speculative=projected.speculative)
