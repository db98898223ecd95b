"""Building a GPU profile from aiconfigurator-core's measured kernel tables (source kind "published").

A profile's step costs are grids the estimator answers point by point (tripath/profile/cost_table.py):

- decode: batch B x context per sequence L (``DECODE_BATCHES`` x ``context_axis``);
- prefill: chunk tokens T x cached context C (``PREFILL_TOKENS`` x ``context_axis``).

The axes reach the model's context window (``max_position_embeddings``); between points the simulator
interpolates, beyond them it extrapolates and counts it. Each table states the share of its summed time that the
estimator read from measured kernel rows ("silicon") and what it computed otherwise (empirical formulas for
norms and activations, "mixed" attention interpolated between measured shapes). Values are kept to 6 significant
digits.

The other sections come from where the published (Vidur) profiles take them, so the two sources differ only in
their step costs: hardware, links and paging (tripath/calibrate/hardware.py), the KV budget (vLLM's 0.9 memory
utilisation less the weights), KV compression (tripath/calibrate/published/compression.py, derived). Speculative
decoding's round costs come from the same estimator (``speculative_from_estimator``).

Attention data parallelism (a mixture-of-experts model served as D ranks of ``tp`` GPUs, vLLM's
--data-parallel-size; ``ProfileKey.attention_dp``): the profile is ONE rank's. Its step costs are the estimator's
per-rank answers, compiled with attention_dp_size D and the MoE over all tp x D GPUs, which assume every rank
carries the same batch (the MoE layers see D x B tokens when the rank decodes B); its KV budget is the rank's tp
GPUs less the weights one rank holds (``Architecture.rank_weight_bytes``: the non-expert weights whole, 1/D of the
routed experts); its speculative section, where it has one, is priced per rank the same way.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from tripath.calibrate.aic.architecture import Architecture
from tripath.calibrate.aic.estimator import PACKAGE, Estimator, EstimatorKey, time_by_source
from tripath.calibrate.fit import fit_formula
from tripath.calibrate.hardware import SPECS
from tripath.calibrate.job import GPU_MEMORY_UTILISATION
from tripath.calibrate.published.acceptance import SEED_PAIR, acceptance_for_pair
from tripath.calibrate.published.builder import kv_budget, paging_links
from tripath.calibrate.published.compression import compression_sections
from tripath.calibrate.published.seqpar import LENGTHS as SP_LENGTHS
from tripath.calibrate.published.seqpar import NETWORK_OF, build_sequence_parallel
from tripath.calibrate.published.speculative import monotone, section_of, thinned
from tripath.core.data_dirs import DATA_DIR
from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient, CostModel, FitQuality
from tripath.profile.cost_table import CostTable
from tripath.profile.profile import MemoryBudget, ModelSpec, Profile, ProfileKey, Provenance
from tripath.profile.schema import MoESpec
from tripath.profile.speculative import RoundCosts, Speculative, StepCurve, TaskAcceptance

__all__ = ["Architecture", "build_profile", "grid_error", "model_section", "simplified_axis", "weight_read_floor_ms"]

CREATED_UTC = "2026-12-03T00:00:00Z"  # fixed, so rebuilding gives identical bytes
COMMAND = "python scripts/make_aic_profiles.py"
# Row axes are chosen from a dense scan of the estimator (``simplified_axis``): every batch up to 512, every chunk
# size up to 8,192 tokens, then 2^(1/8) steps to the window; kept are the points between which linear
# interpolation stays within ROW_TOLERANCE of every scanned value (GEMM tiles make costs jump at some sizes).
MAX_BATCH = 512
DENSE_PREFILL = 8192
ROW_TOLERANCE = 0.004
SIGNIFICANT = 6
VIDUR_ROOT = DATA_DIR / "peer-data" / "vidur"  # Vidur's NCCL send/recv and all-reduce rows (MIT), for the SP ring
_WEIGHT_BYTES = {"fp16": 2, "fp8": 1}  # the KV cache's bytes per element


def context_axis(window: int, start: int = 16) -> tuple[int, ...]:
    """0, then start x 2^(k/4) rounded, up to and including ``window``: attention is near linear in the context,
    so a 2^(1/4) spacing keeps linear interpolation within a fraction of a percent of the estimator."""
    return (0, *log_axis(start, window, 4))


def log_axis(start: int, stop: int, steps_per_doubling: int) -> list[int]:
    """start x 2^(k / steps_per_doubling), rounded and distinct, up to and including ``stop``."""
    out: list[int] = []
    k = 0
    while (value := int(round(start * 2 ** (k / steps_per_doubling)))) < stop:
        if not out or value > out[-1]:
            out.append(value)
        k += 1
    return [*out, stop]


def simplified_axis(xs: list[int], ys: list[float], tolerance: float) -> tuple[int, ...]:
    """The fewest of ``xs`` (first and last kept) between which the straight line meets every (x, y) within
    ``tolerance`` (relative): greedy, each segment extended while all the points it spans fit."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    kept = [0]
    start = 0
    while start < len(xs) - 1:
        end = start + 1
        while end + 1 < len(xs):
            span = slice(start, end + 2)
            line = y[start] + (y[end + 1] - y[start]) * (x[span] - x[start]) / (x[end + 1] - x[start])
            if np.max(np.abs(line - y[span]) / y[span]) > tolerance:
                break
            end += 1
        kept.append(end)
        start = end
    return tuple(xs[i] for i in kept)


def _sig(value: float) -> float:
    return float(f"{value:.{SIGNIFICANT}g}")


def model_section(arch: Architecture, weights: str, kv: str) -> ModelSpec:
    """ModelSpec: fp8 weights quantize the decoder layers' linear weights (embeddings and LM head stay 16-bit,
    as vLLM's fp8 checkpoints do); fp4, gpt-oss's mxfp4 experts (architecture.py); every expert resident. The KV
    cache's dtype sets dtype_bytes. A mixture-of-experts or MLA model states its attention kind, latent and
    experts (fields a dense GQA / MHA profile leaves out, so its file keeps its bytes)."""
    layers, embeddings = arch.params()
    kv_bytes = _WEIGHT_BYTES[kv]
    note = (f"HF config.json shapes; params counted from them; {weights} weights (embeddings and LM head 16-bit), "
            f"{kv} KV cache; context window {arch.window} tokens")
    extra: dict[str, object] = {}
    if arch.moe is not None or arch.mla is not None:
        extra["attention"] = arch.attention
    if arch.mla is not None:
        extra["kv_latent_dim"] = arch.mla.latent
        note += (f"; MLA: the cache holds kv_lora_rank {arch.mla.kv_lora_rank} + qk_rope_head_dim "
                 f"{arch.mla.qk_rope_head_dim} elements per layer and token, on every GPU of the group")
    if arch.moe is not None:
        m = arch.moe
        extra["moe"] = MoESpec(m.experts, m.top_k, m.shared_experts, m.expert_intermediate, m.dense_layers,
                               arch.active_params(), arch.weight_bytes(weights, active=True))
        note += (f"; mixture of experts: {m.experts} routed experts of intermediate {m.expert_intermediate}, top "
                 f"{m.top_k}" + (f", {m.shared_experts} shared" if m.shared_experts else "")
                 + (f", {m.dense_layers} dense layers" if m.dense_layers else "")
                 + ", every expert resident (weight_bytes), top_k per token read (moe.active_weight_bytes)")
        if weights == "fp4":
            note += "; fp4: the routed experts mxfp4 (17/32 byte per weight with its scales), the rest 16-bit"
    return ModelSpec(arch.name, arch.layers, arch.heads, arch.kv_heads, arch.head_dim, arch.hidden,
                     layers + embeddings, kv_bytes, arch.kv_bytes_per_token(kv_bytes), arch.weight_bytes(weights),
                     note, **extra)


def kv_room(hardware: str, tp: int, weight_bytes: int, weights: str, replication: int = 1,
            attention_dp: int = 1) -> MemoryBudget | None:
    """The replica's KV budget (the published profiles' rule, published.builder ``kv_budget``); None when the
    weights leave under 10 % of the usable memory for KV (the profile is not built). ``replication``: how many
    GPUs hold each cached element (``Architecture.kv_replication``: KV heads fewer than GPUs, MLA's latent); the
    budget is stated in the model's bytes, so it is divided by it. ``attention_dp`` > 1: the budget of one
    attention data-parallel rank of ``tp`` GPUs, ``weight_bytes`` the weights that rank holds
    (``Architecture.rank_weight_bytes``); the same 10 % rule."""
    usable = int(tp * SPECS[hardware].memory_bytes * GPU_MEMORY_UTILISATION)
    if usable - weight_bytes < usable // 10:
        return None
    budget = kv_budget(hardware, tp, weight_bytes, weights)
    if attention_dp > 1:
        budget = replace(budget, note=f"one attention data-parallel rank of {attention_dp}: {budget.note} one rank "
                         f"holds ({weight_bytes} bytes: every weight outside the routed experts, replicated in each "
                         f"rank and sharded by TP within it, and 1/{attention_dp} of the routed experts, sharded "
                         f"over all {tp * attention_dp} GPUs)")
    if replication == 1:
        return budget
    return replace(budget, kv_capacity_bytes=budget.kv_capacity_bytes // replication,
                   note=f"{budget.note}, divided by {replication}: vLLM holds each cached element on {replication} "
                   "GPUs of the group (KV heads replicated once there are fewer than GPUs; MLA's latent on every "
                   "GPU), so the group's memory holds 1/" f"{replication} as many of the model's KV bytes")


def _share_note(shares: Counter[str], total: float) -> str:
    parts = ", ".join(f"{source} {ms / total:.1%}" for source, ms in shares.most_common())
    return f"time by the estimator's provenance tag over the grid: {parts}"


def decode_rows(est: Estimator, window: int) -> tuple[int, ...]:
    """The batch axis: every batch to MAX_BATCH scanned at a 1,024-token context (or the window), simplified."""
    batches = list(range(1, MAX_BATCH + 1))
    return simplified_axis(batches, [est.decode(b, min(1024, window)) for b in batches], ROW_TOLERANCE)


def prefill_rows(est: Estimator, window: int) -> tuple[int, ...]:
    """The chunk axis: every size to DENSE_PREFILL (or the window), then 2^(1/8) steps, scanned with no cached
    context, simplified."""
    dense = list(range(1, min(DENSE_PREFILL, window) + 1))
    tokens = dense + (log_axis(DENSE_PREFILL, window, 8)[1:] if window > DENSE_PREFILL else [])
    return simplified_axis(tokens, [est.prefill(t, 0) for t in tokens], ROW_TOLERANCE)


def grid_table(est: Estimator, ops: Callable[[int, int], list[tuple[str, float, str]]], rows: tuple[int, ...],
               columns: tuple[int, ...]) -> CostTable:
    """The estimator's iteration (the sum of ``ops(row, column)``) at every grid point, with the share of the
    grid's time that came from measured kernel rows."""
    shares: Counter[str] = Counter()
    grid = []
    for r in rows:
        line = []
        for c in columns:
            step = ops(r, c)
            shares.update(time_by_source(step))
            line.append(_sig(sum(ms for _, ms, _ in step)))
        grid.append(tuple(line))
    total = sum(shares.values())
    return CostTable(tuple(map(float, rows)), tuple(map(float, columns)), tuple(grid), "published",
                     _sig(shares["silicon"] / total), f"{est.describe()}; {_share_note(shares, total)}")


def decode_table(est: Estimator, window: int) -> CostModel:
    """The decode cost model: the estimator's decode iteration on the (batch, context per sequence) grid."""
    contexts, batches = context_axis(window), decode_rows(est, window)
    table = grid_table(est, est.decode_ops, batches, contexts)
    return CostModel("decode_table_v1", {}, ("batch", "total_context"),
                     {"batch": (float(batches[0]), float(batches[-1])),
                      "total_context": (0.0, float(batches[-1] * contexts[-1]))},
                     None, "one decode iteration of B sequences of L = S / B cached tokens each, read from the "
                     "table (rows B, columns L); the estimator's decode_step_latency(B, L, 1) at each grid point",
                     table)


def prefill_table(est: Estimator, window: int) -> CostModel:
    """The prefill cost model: one chunk of T new tokens after C cached, on the (T, C) grid."""
    tokens, contexts = prefill_rows(est, window), context_axis(window)
    table = grid_table(est, est.prefill_ops, tokens, contexts)
    return CostModel("prefill_table_v1", {}, ("new_tokens", "context_tokens"),
                     {"new_tokens": (float(tokens[0]), float(tokens[-1])),
                      "context_tokens": (0.0, float(contexts[-1]))},
                     None, "one prefill chunk of T new tokens after C cached, alone in an iteration, read from the "
                     "table (rows T, columns C); the estimator's predict_prefill_latency(1, C + T, C) at each point",
                     table)


SPEC_TOKENS = 4096  # the verify pass's B (K+1) tokens the round-cost curves reach (batch 512 at K = 7)


def step_curve(est: Estimator, model_name: str) -> StepCurve:
    """A model's pass without attention by query tokens, and its decode attention per cached token, from the
    estimator: what speculative decoding's draft steps and verify passes cost (a verify pass is one target pass
    over B (K+1) tokens that reads each sequence's cached K/V once)."""
    # the running maximum, as for the Vidur curves: a pass over more tokens never costs less, and the estimator's
    # GEMM rows dip by a fraction of a per cent between neighbouring small token counts
    points = monotone([(int(t), est.linear_ms(int(t))) for t in thinned(np.arange(1, SPEC_TOKENS + 1))])
    batch, short, long = 64, 1024, 4096
    slope = (est.attention_ms(batch, long) - est.attention_ms(batch, short)) / (batch * (long - short))
    attention = Coefficient(_sig(slope), "ms/token", "published",
                            f"the estimator's decode attention kernel at batch {batch}, ({long} - {short}) cached "
                            f"tokens per sequence: the time per cached token read ({est.describe()})")
    return StepCurve(model_name, est.key.tp, points, attention, "published",
                     f"{est.describe()}: one pass over T query tokens without the attention kernel (GEMMs, norms, "
                     "all-reduces, embedding, LM head), at every T to 64, then 8 points per doubling; running maximum")


def mtp_curve(est: Estimator, target: StepCurve, layers: int) -> StepCurve:
    """A multi-token-prediction module as the draft (DeepSeek-V3's ``num_nextn_predict_layers``): one more decoder
    layer of the target's own shapes beside its shared embedding and LM head. Per pass over T query tokens: the
    target's decoder work without attention divided by its layers, plus its embedding and logits operations;
    per cached token: the target's attention over its layers. Derived from the target's estimator (the module's
    small input projection and norms are left out)."""
    def linear(tokens: int) -> float:
        ops = est.decode_ops(tokens, 1)
        head = sum(ms for name, ms, _ in ops if "embedding" in name or "logits" in name)
        body = sum(ms for name, ms, _ in ops if "attention" not in name) - head  # Estimator.linear_ms's rule
        return body / layers + head

    points = monotone([(int(t), linear(int(t))) for t in thinned(np.arange(1, SPEC_TOKENS + 1))])
    per_token = target.attention_per_token
    attention = Coefficient(_sig(per_token.value / layers), "ms/token", "derived",
                            f"the target's decode attention per cached token / its {layers} layers ({per_token.note})")
    return StepCurve(f"{target.model} MTP", est.key.tp, points, attention, "derived",
                     f"{est.describe()}: the target's pass over T query tokens without attention, embedding and "
                     f"logits, / its {layers} layers, plus its embedding and logits (one MTP layer with the shared "
                     "head); running maximum")


# DeepSeek-V3 Technical Report (DeepSeek-AI, arXiv 2412.19437, section 5.4.3): "the acceptance rate of the second
# token prediction ranges between 85% and 90% across various generation topics"; no per-topic figures
MTP_ACCEPTANCE = (0.85, 0.90)


def mtp_acceptance(tasks: tuple[str, ...]) -> dict[str, TaskAcceptance]:
    """The published MTP acceptance (K = 1) for every task: the midpoint of the report's range, the same for each
    (it gives the range over its topics, not one figure per topic)."""
    low, high = MTP_ACCEPTANCE
    note = (f"DeepSeek-V3 Technical Report (arXiv 2412.19437, 5.4.3): second-token acceptance {low:.0%} to "
            f"{high:.0%} across generation topics; the midpoint for every task (no per-topic figure is published)")
    return {task: TaskAcceptance((low + high) / 2, 1, None, "derived", note) for task in tasks}


def speculative_from_estimator(target: Estimator, target_name: str, draft_name: str, draft_dir: Path,
                               hardware: str) -> Speculative:
    """The speculative section for ``target`` with ``draft_name`` at the target's TP (vLLM's default for a draft
    model), its round costs both from the estimator's tables (tripath/calibrate/published/speculative.py
    section_of turns them into the ratios the simulator reads)."""
    key = target.key
    draft = Estimator(EstimatorKey(draft_dir, hardware, key.backend, key.backend_version, key.tp, "fp16", key.kv))
    rc = RoundCosts(step_curve(target, target_name), step_curve(draft, draft_name),
                    f"pair {target_name}/{draft_name} at tp{key.tp} on {hardware}: verify_ms(B, K, S) = "
                    "target(B (K+1)) + target attention x S; draft_ms(B, S) = draft(B) + draft attention x S")
    return section_of(rc, f"{draft_name} (tp{key.tp})", f"{target_name}/{draft_name} on {hardware}")


FP8_POINTS = ((16, 1024), (64, 4096), (128, 16384))  # (batch, context) where fp8 KV attention is compared


def fp8_attention(profile: Profile, est: Estimator, model_dir: Path) -> Profile:
    """The fp8 compression mode's decode attention from the estimator's measured fp8-KV attention kernels (the
    mean ratio to 16-bit KV over ``FP8_POINTS``), where it has them; else the derived ratio stays, and a note
    says why."""
    key = est.key
    try:
        fp8 = Estimator(EstimatorKey(model_dir, key.hardware, key.backend, key.backend_version, key.tp, key.weights,
                                     "fp8", key.expert_parallel, key.attention_dp))
        ratios = [fp8.attention_ms(b, c) / est.attention_ms(b, c) for b, c in FP8_POINTS]
    except Exception as exc:  # the estimator's own errors: no fp8-KV attention table for this GPU and head size
        return replace(profile, notes=(*profile.notes, "KV compression fp8: decode attention derived (the estimator "
                                       f"has no fp8-KV attention table here: {str(exc).splitlines()[0][:160]})."))
    mode = profile.compression["fp8"]
    ratio = Coefficient(_sig(sum(ratios) / len(ratios)), "attention_ratio", "published",
                        "decode attention reading fp8 KV / reading 16-bit KV, the estimator's measured generation-"
                        f"attention kernels, mean over (batch, context) {list(FP8_POINTS)}: "
                        f"{', '.join(f'{r:.3f}' for r in ratios)} ({fp8.describe()})")
    return replace(profile, compression={**profile.compression, "fp8": replace(mode, decode_overhead_ratio=ratio)})


def moe_notes(arch: Architecture, est: Estimator, tp: int, expert_parallel: bool, speculative: bool
              ) -> tuple[str, ...]:
    """What a mixture-of-experts profile's tables include, how its experts are laid out, what is not priced
    (``speculative``: whether the profile prices speculative decoding). ``tp``: the GPUs the experts are sharded
    over (with attention data parallelism, all tp x D of the replica's)."""
    m = arch.moe
    assert m is not None
    dp = est.key.attention_dp
    layout = (f"expert parallel: each of the {tp} GPUs holds {m.experts / tp:g} whole experts (moe_tp 1, moe_ep "
              f"{tp}), tokens dispatched to their experts and combined back around each MoE layer" if expert_parallel
              else f"tensor parallel: every expert's matrices split over the {tp} GPUs (moe_tp {tp}, moe_ep 1)")
    return (
        f"Mixture of experts ({m.experts} experts, top {m.top_k}), {layout}. The estimator composes each MoE layer "
        "from its measured MoE kernel rows (grouped GEMMs by tokens per expert, vLLM's fused MoE for this "
        f"precision) with the router GEMM and the dispatch / combine; {est.describe()}.",
        (f"The {arch.mtp_layers} multi-token-prediction layer(s) are not counted in model.weight_bytes: served, "
         "their weights come out of the KV budget, which the simulator does not deduct (as for any draft's)."
         if arch.mtp_layers and speculative else
         "No speculative section: no draft model is priced for this model." if not speculative else
         "The draft's weights are not deducted from the KV budget (as for every draft the simulator prices)."),
        "No attention data parallelism: vLLM's --data-parallel-size runs one scheduler and KV pool per attention "
        "rank, which one replica's single batch and KV budget cannot express." if dp == 1 else
        f"Attention data parallelism (vLLM's --data-parallel-size {dp}): a replica is {dp} ranks of "
        f"{est.key.tp} GPU(s), {tp} in all (key.attention_dp); each rank runs attention for its own batch over its "
        f"own KV pool, the MoE layers run over all {tp} GPUs, so the ranks step in lockstep. This profile is ONE "
        "rank's: its step costs are the estimator's per-rank answers (attention_dp_size "
        f"{dp}), which assume every rank carries the same batch (a rank's batch B puts {dp} x B tokens through "
        "each MoE layer); its memory and KV budget are one rank's (its GPUs less the weights it holds: every "
        f"non-expert weight, 1/{dp} of the experts).",
    )


def ring_coefficients(profile: Profile) -> tuple[dict[str, float], FitQuality]:
    """prefill_v1's c0, c_tok, c_attn fitted to the measured prefill table's rows with no cached context, from
    1,024 tokens up: what the sequence-parallel ring model (tripath/calibrate/published/seqpar.py) splits into
    linear work and attention pairs. Derived from the table, with the fit's error stated in the section's note."""
    table = profile.costs["prefill"].table
    assert table is not None
    tokens = np.array([t for t in table.rows if t >= 1024], dtype=float)
    observed = np.array([float(table.at(t, 0.0)) for t in tokens])
    fit = fit_formula("prefill_v1", {"new_tokens": tokens, "context_tokens": np.zeros_like(tokens)}, observed,
                      data="the profile's prefill table, no cached context, 1,024 tokens up")
    return fit.coefficients, fit.quality


def build_profile(model_name: str, model_dir: Path, hardware: str, tp: int, weights: str = "fp16",
                  kv: str = "fp16", backend: str = "vllm", backend_version: str | None = None,
                  draft: tuple[str, Path, str, str] | None = None, expert_parallel: bool = False,
                  attention_dp: int = 1) -> Profile:
    """One profile for (model, GPU, backend, TP, precision) from the estimator (module docstring).

    ``draft``: (draft model name, its config folder, the acceptance pair, why that table) to price speculative
    decoding for; None leaves the profile without a speculative section. ``expert_parallel``: a mixture-of-experts
    model's experts sharded by EP over the TP group (``ProfileKey.expert_parallel``) rather than by TP.
    ``attention_dp``: a mixture-of-experts replica of that many attention data-parallel ranks of ``tp`` GPUs
    (``ProfileKey.attention_dp``); the profile is one rank's (module docstring).

    A mixture-of-experts model's tables come from the same estimator calls: it composes each MoE layer itself
    (the router, the grouped expert GEMMs by tokens per expert from its measured MoE kernel rows, the dispatch and
    combine around them under EP). Its speculative section is the catalogue's draft where it has one (Qwen3-235B:
    Qwen3-0.6B) or the model's own multi-token-prediction layer (DeepSeek-V3: ``mtp_curve``); it has no
    sequence-parallel section (the ring model's even split of linear work does not hold for
    expert GEMMs); an MLA model has no KV-compression section (the modes are derived for per-head K and V); the
    profile's notes say so.

    An InputError when the model's weights do not fit ``tp`` GPUs with room for KV, or the estimator has no
    tables for the combination.
    """
    arch = Architecture.from_config(model_name, model_dir)
    spec = SPECS[hardware]
    mspec = model_section(arch, weights, kv)
    est_key = EstimatorKey(model_dir, hardware, backend, backend_version, tp, weights, kv, expert_parallel,
                           attention_dp)  # the key's checks (values, a dense model with attention_dp) first
    if attention_dp > 1:
        held = arch.rank_weight_bytes(weights, attention_dp)
        memory = kv_room(hardware, tp, held, weights, arch.kv_replication(tp), attention_dp)
        if memory is None:
            raise InputError(str(model_dir), "attention_dp", f"{model_name} ({held / 1e9:.0f} GB of {weights} "
                             f"weights per attention data-parallel rank of {attention_dp}) leaves under 10 % of "
                             f"{tp} x {spec.device_name} for KV")
    else:
        memory = kv_room(hardware, tp, mspec.weight_bytes, weights, arch.kv_replication(tp))
        if memory is None:
            raise InputError(str(model_dir), "tp", f"{model_name} ({mspec.weight_bytes / 1e9:.0f} GB of {weights} "
                             f"weights) leaves under 10 % of {tp} x {spec.device_name} for KV")
    est = Estimator(est_key)
    try:
        costs = {"prefill": prefill_table(est, arch.window), "decode": decode_table(est, arch.window)}
    except Exception as exc:  # the estimator's own errors (missing tables, flops) are its package's classes
        raise InputError(str(model_dir), "model", f"the estimator has no tables for {est.describe()}: "
                         f"{str(exc).splitlines()[0][:300]}") from exc
    commit = f"aic-{est.package_version}-{backend}-{est.backend_version}"
    notes = (
        f"Step costs from {PACKAGE} {est.package_version} (NVIDIA, Apache-2.0): kernel times measured with "
        f"{backend} {est.backend_version} on {spec.device_name} (GEMM, attention, custom all-reduce and NCCL), "
        "composed by its estimator into iterations (tripath/calibrate/aic/). Tables, not fits: "
        "docs/aic_profiles.md.",
        "Included by the estimator: every decoder layer's GEMMs, attention, the tensor-parallel all-reduces, "
        "embedding and LM head. Not included: the scheduler's host work and sampling (no cited measurement, so "
        "no request intake or step overhead term is added).",
    )
    speculative, acceptance = None, {}
    if draft is None and arch.mtp_layers:
        target = step_curve(est, model_name)
        rc = RoundCosts(target, mtp_curve(est, target, arch.layers),
                        f"{model_name} with its multi-token-prediction layer at tp{tp} on {hardware}: verify_ms(B, K, "
                        "S) = target(B (K+1)) + target attention x S; draft_ms(B, S) = MTP layer(B) + its attention "
                        "x S")
        speculative = section_of(rc, f"{model_name} MTP (tp{tp})", f"{model_name}/MTP on {hardware}",
                                 k=arch.mtp_layers)
        acceptance = mtp_acceptance(tuple(acceptance_for_pair(SEED_PAIR)))
        notes = (*notes, f"Speculative decoding by the model's own multi-token-prediction layer (K = "
                 f"{arch.mtp_layers}), priced from the same tables (derived: one decoder layer's share plus the "
                 "head); acceptance from the DeepSeek-V3 report's published range.")
    elif draft is not None:
        draft_name, draft_dir, pair, why = draft
        try:
            speculative = speculative_from_estimator(est, model_name, draft_name, draft_dir, hardware)
        except Exception as exc:  # the estimator's own errors: no tables for the draft's shapes on this GPU
            notes = (*notes, f"No speculative section: the estimator has no tables for the draft {draft_name} "
                     f"on {spec.device_name} ({str(exc).splitlines()[0][:200]}).")
        else:
            acceptance = acceptance_for_pair(pair)
            notes = (*notes, f"Speculative decoding priced for the draft {draft_name} at tp {tp} from the same "
                     f"tables; acceptance from {pair}: {why}.")
    if attention_dp > 1 and speculative is not None:
        notes = (*notes, f"The speculative section is one attention data-parallel rank's, as the step costs: each "
                 f"rank drafts and verifies its own batch on its {tp} GPU(s); the verify pass is the same per-rank "
                 f"estimator's (its MoE layers over all {tp * attention_dp} GPUs, every rank verifying as many "
                 "tokens), " + ("the draft on the rank's GPUs." if draft is not None else
                                "the MTP layer's share from the same per-rank tables."))
    profile = Profile(
        key=ProfileKey(hardware, model_name, weights, tp, commit, expert_parallel, attention_dp), source="published",
        speculative=speculative, acceptance=acceptance,
        hardware=spec.hardware(f"Step costs from {PACKAGE}'s measured kernel tables for this GPU"), model=mspec,
        memory=memory, costs=costs,
        provenance=Provenance(f"{COMMAND} (tripath profile build)", commit, None, None, spec.device_name,
                              CREATED_UTC),
        paging=paging_links(hardware, mspec.kv_bytes_per_token), notes=notes)
    if arch.moe is not None:
        profile = replace(profile, notes=(*profile.notes, *moe_notes(arch, est, est.key.gpus, expert_parallel,
                                                                   speculative is not None)))
    if arch.mla is not None:
        profile = replace(profile, notes=(*profile.notes, "No KV-compression section: its fp8, int8 and int4 modes "
                                          "are derived for per-head K and V (bytes per element, the engine's "
                                          "per-channel key groups), not for MLA's one latent per token; not "
                                          "derived differently here."))
    else:
        profile = fp8_attention(replace(profile, compression=compression_sections(profile)), est, model_dir)
    if arch.moe is not None:
        return replace(profile, notes=(*profile.notes, "No sequence-parallel section: the ring model splits each "
                                       "layer's linear work evenly over the GPUs (c_tok per token, fitted to the "
                                       "prefill table); an MoE layer's grouped expert GEMMs cost by tokens per "
                                       "expert, which a split prompt changes, so the fit does not carry over."))
    if hardware not in NETWORK_OF:
        return replace(profile, notes=(*profile.notes, f"No sequence-parallel section: no NCCL send/recv rows for "
                                       f"{spec.device_name} (Vidur measured DGX A100 and H100 only)."))
    coefficients, quality = ring_coefficients(profile)
    window = int(profile.costs["prefill"].domain["context_tokens"][1])
    lengths = tuple(n for n in SP_LENGTHS if n < window) + (window,)  # no prompt outgrows the window
    built = build_sequence_parallel(VIDUR_ROOT, profile, lengths=lengths, coefficients=coefficients)
    fit_note = (f"ring model's c0 {coefficients['c0']:.4g} ms, c_tok {coefficients['c_tok']:.4g} ms/token, c_attn "
                f"{coefficients['c_attn']:.4g} ms/pair fitted to the measured prefill table (MAPE "
                f"{quality.train_mape:.1%}, worst {quality.max_ape:.1%})")
    sections = {d: replace(sec, note=f"{sec.note} {fit_note}.") for d, sec in built.sections.items()}
    return replace(profile, sequence_parallel=sections)


def weight_read_floor_ms(profile: Profile, all_experts: bool = False) -> float:
    """The least time a decode step can take: every GPU reads its share of the weights once at HBM peak. For a
    mixture-of-experts model the weights one token reads (``moe.active_weight_bytes``: top_k experts per layer),
    the floor at batch 1; ``all_experts``: every expert's (what a large batch that routes to all of them reads).
    With attention data parallelism the weights spread over all the replica's GPUs (``key.gpus``): a lower bound
    still, as each rank holds the non-expert weights whole."""
    spec = SPECS[profile.key.hardware]
    moe = profile.model.moe
    read = moe.active_weight_bytes if moe is not None and not all_experts else profile.model.weight_bytes
    return read / profile.key.gpus / (spec.memory_tbps * 1e12) * 1e3


def grid_error(profile: Profile, est: Estimator, points: list[tuple[str, int, int]]) -> float:
    """The largest relative difference between the profile and the estimator at (kind, a, b) points."""
    worst = 0.0
    for kind, a, b in points:
        if kind == "decode":
            mine, theirs = profile.decode_ms(a, a * b), est.decode(a, b)
        else:
            mine, theirs = profile.prefill_ms(a, b), est.prefill(a, b)
        worst = max(worst, abs(mine - theirs) / theirs)
    return worst if math.isfinite(worst) else float("inf")
