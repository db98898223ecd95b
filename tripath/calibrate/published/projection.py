"""Projecting a profile to other hardware by roofline ratios: source kind "projected", labelled so.

Each cost coefficient is scaled by the hardware ratio of the resource that bounds it:

| coefficient | bound by | scaled by |
|---|---|---|
| prefill c_tok, c_attn | tensor-core FLOP/s (prefill matmuls are compute-bound) | src / dst peak FLOP/s |
| decode d0 | memory bandwidth (every step reads all weights once) | src / dst HBM bandwidth |
| decode d_ctx | memory bandwidth (attention reads each cached token's K and V) | src / dst HBM bandwidth |
| decode d_seq | FLOP/s (one more sequence adds its matmul work) | src / dst peak FLOP/s |
| paging bandwidth_gbps | that link | dst / src link bandwidth (a bandwidth, not a time) |
| sp merge m_ctx | interconnect | src / dst interconnect bandwidth |
| c0, setup_ms, m0 | launch and driver latency, not a roofline | unchanged |
| decode d_multi | kernel choice (gemv at 1 row, gemm from 2), not a roofline | unchanged |
| speculative round-cost curve at T tokens | an fp16 linear layer's roofline at T | max(1/BW, T/F) dst / src |
| speculative attention per cached token | memory bandwidth | src / dst HBM bandwidth |
| SP decode rows: merge_ms / comm_ms | memory bandwidth / interconnect | src / dst of each |

Ratios ignore everything a roofline does not see (kernel efficiency, clocks, cache sizes); the
projected profile says so in every coefficient note and in its notes, and its fits are dropped
(they described the source hardware). Speculative cost ratios and acceptance are ratios of the
same hardware's costs and properties of the models, so they carry over unchanged; a section's
round-cost curves are times, and are projected point by point: an fp16 linear layer over T tokens reads
W bytes of weights and does T x W FLOPs, so its roofline time is W x max(1 / BW, T / F), and the ratio of
two GPUs' roofline times at T needs no model size.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from tripath.calibrate.hardware import HardwareSpec, spec_for_device
from tripath.core.errors import InputError
from tripath.profile.profile import (
    Coefficient,
    CostModel,
    MemoryBudget,
    PagingLink,
    Profile,
    ProfileKey,
    Provenance,
    SequenceParallel,
    SpRow,
)
from tripath.profile.sections import SpDecodeRow
from tripath.profile.speculative import RoundCosts, Speculative, StepCurve

FLOPS, MEMORY, FIXED = "flops", "memory", "fixed"
BOUND_BY = {"c0": FIXED, "c_tok": FLOPS, "c_attn": FLOPS, "d0": MEMORY, "d_seq": FLOPS, "d_ctx": MEMORY,
            "d_multi": FIXED,  # decode_v2's gemv -> gemm step: which kernel runs, not a roofline
            "setup_ms": FIXED, "m0": FIXED}
TOKENS_2K = 2048


def source_spec(profile: Profile) -> HardwareSpec:
    """The published spec of the hardware a profile was made on (projection needs its roofline)."""
    spec = spec_for_device(profile.hardware.device_name)
    if spec is None:
        raise InputError(None, "hardware.device_name", f"no published roofline for {profile.hardware.device_name!r}"
                         "; projection needs one (a100, h100, h200)")
    return spec


def _scaled(coef: Coefficient, factor: float, why: str) -> Coefficient:
    value = float(f"{coef.value * factor:.6g}")
    return Coefficient(value, coef.unit, "projected", f"PROJECTED: {coef.value:.6g} x {factor:.4g} ({why}). "
                       f"Source: {coef.source}; {coef.note}".strip())


def _project_cost(model: CostModel, ratios: dict[str, float], src: str, dst: str) -> CostModel:
    coefficients = {}
    for name, coef in model.coefficients.items():
        kind = BOUND_BY.get(name, FIXED)
        why = {FLOPS: f"peak FLOP/s {src} / {dst}", MEMORY: f"HBM bandwidth {src} / {dst}",
               FIXED: "launch/driver latency, kept"}[kind]
        coefficients[name] = _scaled(coef, ratios[kind], why)
    note = f"PROJECTED from {src} to {dst} by roofline ratios; fit dropped (it described {src}). {model.note}"
    return CostModel(model.formula, coefficients, model.inputs, model.domain, None, note)


def _project_sp(sp: SequenceParallel, src: HardwareSpec, dst: HardwareSpec) -> SequenceParallel:
    """Speedups are ratios and carry over; merge times scale by the interconnect bandwidth ratio."""
    if "interconnect" not in src.links or "interconnect" not in dst.links:
        raise InputError(None, "sequence_parallel", f"{src.name} or {dst.name} has no interconnect figure")
    factor = src.links["interconnect"].value / dst.links["interconnect"].value
    rows = tuple(SpRow(r.context_tokens, r.speedup, float(f"{r.merge_ms * factor:.6g}")) for r in sp.rows)
    merge = sp.merge
    if merge is not None:
        coefficients = {name: (_scaled(c, factor, "interconnect bandwidth ratio") if name == "m_ctx" else c)
                        for name, c in merge.coefficients.items()}
        merge = CostModel(merge.formula, coefficients, merge.inputs, merge.domain, None,
                          f"PROJECTED by the interconnect ratio. {merge.note}")
    return SequenceParallel(sp.degree, rows, merge, "projected", f"PROJECTED: merge_ms x {factor:.4g} "
                            f"(interconnect {src.name} / {dst.name}); speedups kept. {sp.note}",
                            decode_rows=_project_decode_rows(sp.decode_rows, src, dst))


def roofline_ratio(tokens: float, src: HardwareSpec, dst: HardwareSpec) -> float:
    """dst / src roofline time of an fp16 linear layer over ``tokens`` tokens (module docstring)."""
    def time(spec: HardwareSpec) -> float:
        return max(1.0 / (spec.memory_tbps * 1e12), tokens / (spec.peak_tflops * 1e12))
    return time(dst) / time(src)


def _project_curve(curve: StepCurve, src: HardwareSpec, dst: HardwareSpec) -> StepCurve:
    points = tuple((t, float(f"{ms * roofline_ratio(t, src, dst):.6g}")) for t, ms in curve.points)
    attention = _scaled(curve.attention_per_token, src.memory_tbps / dst.memory_tbps, f"HBM bandwidth {src.name} / "
                        f"{dst.name}")
    return StepCurve(curve.model, curve.tp, points, attention, "projected",
                     f"PROJECTED from {src.name} to {dst.name}: each point x the fp16 linear-layer roofline ratio at "
                     f"its T (max(1/BW, T/F) {dst.name} / {src.name}). Source ({curve.source}): {curve.note}")


def _project_speculative(spec: Speculative | None, src: HardwareSpec, dst: HardwareSpec) -> Speculative | None:
    """Round-cost curves projected point by point; the scalar ratios (ratios of one GPU's costs) are kept."""
    if spec is None or spec.round_costs is None:
        return spec
    rc = spec.round_costs
    projected = RoundCosts(_project_curve(rc.target, src, dst), _project_curve(rc.draft, src, dst),
                           f"PROJECTED to {dst.name}. {rc.note}")
    return replace(spec, round_costs=projected)


def _project_decode_rows(rows: tuple[SpDecodeRow, ...], src: HardwareSpec, dst: HardwareSpec
                         ) -> tuple[SpDecodeRow, ...]:
    memory = src.memory_tbps / dst.memory_tbps
    link = src.links["interconnect"].value / dst.links["interconnect"].value
    return tuple(SpDecodeRow(r.batch, float(f"{r.merge_ms * memory:.6g}"), float(f"{r.comm_ms * link:.6g}"))
                 for r in rows)


def project_profile(profile: Profile, dst: HardwareSpec, command: str = "tripath profile project",
                    created_utc: str | None = None) -> Profile:
    """``profile`` rescaled to ``dst`` hardware; source kind "projected" (``created_utc``: fixed time, else now)."""
    src = source_spec(profile)
    ratios = {FLOPS: src.peak_tflops / dst.peak_tflops, MEMORY: src.memory_tbps / dst.memory_tbps, FIXED: 1.0}
    costs = {name: _project_cost(m, ratios, src.name, dst.name) for name, m in profile.costs.items()}
    paging = {}
    for link, page in profile.paging.items():
        if link not in src.links or link not in dst.links:
            continue  # a link the target lacks cannot be projected; the section is dropped for it
        factor = dst.links[link].value / src.links[link].value
        coefficients = dict(page.cost.coefficients)
        coefficients["bandwidth_gbps"] = _scaled(coefficients["bandwidth_gbps"], factor,
                                                 f"{link} bandwidth {dst.name} / {src.name}")
        cost = CostModel(page.cost.formula, coefficients, page.cost.inputs, page.cost.domain, None,
                         f"PROJECTED by the {link} bandwidth ratio. {page.cost.note}")
        two_k = TOKENS_2K * profile.model.kv_bytes_per_token
        paging[link] = PagingLink(cost, cost.evaluate(bytes=two_k) - cost.evaluate(bytes=0.0))
    sequence_parallel = {degree: _project_sp(sp, src, dst) for degree, sp in profile.sequence_parallel.items()}
    tp = profile.key.tp
    # keep what the source reserved besides KV (weights, activations) and give the rest of dst's memory to KV
    reserved = tp * profile.hardware.device_memory_bytes - profile.memory.kv_capacity_bytes
    budget = tp * dst.memory_bytes - reserved
    if budget <= 0:
        raise InputError(None, "memory", f"{dst.name} x tp{tp} cannot hold what the source reserved "
                         f"({reserved} bytes) besides KV")
    memory = MemoryBudget(budget, "projected", f"PROJECTED: tp x {dst.name} memory minus the {reserved} bytes the "
                          f"source profile reserved besides KV. Source: {profile.memory.note}")
    hardware = dst.hardware(f"PROJECTED target; costs scaled from {profile.hardware.device_name}")
    banner = (f"PROJECTED, not measured: {profile.key_str()} ({profile.source}) scaled to {dst.name} by roofline "
              f"ratios (FLOP/s x{ratios[FLOPS]:.3g}, memory bandwidth x{ratios[MEMORY]:.3g} on times); kernel "
              "efficiency, clocks and caches are not modelled. Measure on the target before capacity planning.")
    return Profile(
        key=ProfileKey(dst.name, profile.key.model, profile.key.dtype, tp, profile.key.engine_commit),
        source="projected", hardware=hardware, model=profile.model, memory=memory, costs=costs,
        provenance=Provenance(command, profile.provenance.engine_commit, profile.provenance.torch_version,
                              profile.provenance.cuda_version, None,
                              created_utc or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                              profile.provenance.seed_documents),
        speculative=_project_speculative(profile.speculative, src, dst), acceptance=dict(profile.acceptance),
        paging=paging,
        sequence_parallel=sequence_parallel, compression=dict(profile.compression),
        notes=(banner, *profile.notes),
    )
