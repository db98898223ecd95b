"""Speculative sections for the published GPU profiles: draft and target iteration costs from Vidur's rows.

A round's cost depends on the batch: the verify pass runs the linear layers on B (K+1) tokens, which turns
compute-bound at large B. Each model's non-attention iteration is rebuilt from Vidur's per-operator medians
(``mlp.csv``) at full depth, as ``vidur.py`` rebuilds a whole iteration, without attention:

    ms(T) = L x (linear(T) + 2 x all_reduce(T x hidden x 2 bytes) [tp > 1]) + emb(T)

at the profiled token counts T (thinned to about eight per octave above 64; the running maximum, as a pass over
more tokens never costs less than one over fewer: ``monotone``). Attention per cached token read
is the reference profile's fitted ``d_ctx`` (decode attention on real rows) where it is the same model at the
same TP; for another model it is d_ctx x (its KV bytes per token per GPU / the reference's): the same achieved
bandwidth per cached byte (labelled derived). A verify pass reads the cached K/V once for its K+1 queries: that
holds while attention stays memory-bound, i.e. while (K+1) x (query heads / KV heads) stays well below the
GPU's FLOP/byte ratio (docs/speculative_gpu.md).

Drafts with no Vidur rows (the ~68M-160M models) are DERIVED from their family's rows:

    draft(T) = L_d x F + f_head + emb(T) + max(2 W_d / BW, (W_d / W_ref) x L_ref x (linear_ref(T) - F))

F = the family's per-layer launch floor: per operator, the smallest (median - its weight slice / BW) over
Vidur's rows at T <= 16 and every TP in the file (the fixed part of a kernel beyond reading its weights at
the HBM peak BW of hardware.SPECS); f_head the smallest GEMM floor (the LM head's kernel); W_d the draft's
linear weights with its LM head; the second term is the family's measured time beyond the floors scaled by
weight count (the same achieved rate when compute-bound: FLOPs = 2 W T). Embedding: the family's, scaled by
hidden size (never below its one-token time).

The draft runs at the target's TP: vLLM's default (speculative config ``draft_tensor_parallel_size`` unset:
the target's TP for a draft model) and a requirement of its V1 draft-model proposer. Acceptance is not here:
the caller puts per-task acceptance in the profile's ``acceptance`` table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from tripath.calibrate.hardware import SPECS
from tripath.calibrate.published.vidur import GPUS, LINEAR_OPS, VidurModel, all_reduce_table, linear_table, mlp_path
from tripath.core.errors import InputError
from tripath.core.speculative import expected_tokens
from tripath.engine.model.config import PRESETS
from tripath.profile.cost_model import Coefficient
from tripath.profile.profile import Profile
from tripath.profile.speculative import RoundCosts, Speculative, StepCurve

DTYPE_BYTES = 2  # Vidur profiled fp16
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
FLOOR_TOKENS = 16  # operator floors from rows at T <= this (launch-bound for the small kernels)
VERIFY_KS = tuple(range(1, 9))  # the batch-1 verify_by_k written into the section


@dataclass(frozen=True)
class Arch:
    """A LLaMA-shaped model's dimensions (its HF config.json)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    config: str  # where the shape comes from

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def op_weights(self) -> dict[str, int]:
        """Parameters of each GEMM of one layer (QKV, O, gate+up fused, down), as Vidur times them."""
        qkv = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        return {"attn_pre_proj": qkv, "attn_post_proj": self.hidden * self.hidden,
                "mlp_up_proj": 2 * self.hidden * self.intermediate, "mlp_down_proj": self.intermediate * self.hidden}

    def layer_weights(self) -> int:
        return sum(self.op_weights().values())

    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * DTYPE_BYTES

    @classmethod
    def of(cls, name: str, preset: str, config: str) -> Arch:
        """The shape of a model in tripath/engine/model/config.py's PRESETS (one place for the published shapes)."""
        c = PRESETS[preset]
        return cls(name, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.intermediate_size, c.vocab_size,
                   config)


HF = "HF config.json of "
# the stand-in draft for Llama-3-8B (ARCHS below): a name no Hugging Face repository holds, prefixed so that
# nobody reads it as a model to download
HYPOTHETICAL_LLAMA3_DRAFT = "hypothetical-llama3-vocab-68m"
ARCHS = {
    "llama-2-7b": Arch.of("llama-2-7b", "llama2-7b", HF + "meta-llama/Llama-2-7b-hf"),
    "llama-2-70b": Arch.of("llama-2-70b", "llama2-70b", HF + "meta-llama/Llama-2-70b-hf"),
    "llama-3-8b": Arch.of("llama-3-8b", "llama3-8b", HF + "meta-llama/Meta-Llama-3-8B (and Vidur's mlp.csv columns)"),
    "llama-3-70b": Arch.of("llama-3-70b", "llama3-70b", HF + "meta-llama/Meta-Llama-3-70B (and Vidur's mlp.csv "
                           "columns)"),
    "llama-68m": Arch("llama-68m", 2, 768, 12, 12, 3072, 32000, HF + "JackFram/llama-68m (SpecInfer's draft)"),
    "llama-160m": Arch("llama-160m", 12, 768, 12, 12, 3072, 32000, HF + "JackFram/llama-160m (SpecInfer's draft)"),
    # no ~100M draft with Llama-3's 128256-token vocabulary whose config could be checked (maywell/l3-211m is a
    # 211M-parameter draft on the Llama-3 tokenizer; its shape is not published in what was searched): the
    # llama-68m shape with Llama-3's vocabulary stands in, a HYPOTHETICAL draft. Its name says so (the profiles'
    # speculative.draft_model carries it), because no checkpoint of it exists to serve: the vLLM and SGLang exports
    # (tripath/planning/export/) give no speculative flag for a draft with no Hugging Face repository
    # (export/settings.py HF_REPOS) and say why
    HYPOTHETICAL_LLAMA3_DRAFT: Arch(HYPOTHETICAL_LLAMA3_DRAFT, 2, 768, 12, 12, 3072, 128256,
                                    "hypothetical: JackFram/llama-68m's shape with Llama-3's 128256-token "
                                    "vocabulary"),
}

VIDUR_DIRS = {"llama-2-7b": "Llama-2-7b-hf", "llama-2-70b": "Llama-2-70b-hf", "llama-3-8b": "Meta-Llama-3-8B",
              "llama-3-70b": "Meta-Llama-3-70B"}


@dataclass(frozen=True)
class Pair:
    """A target at ``tp`` and its draft (at the same TP); a draft without Vidur rows is derived from the target's
    family rows."""

    target: str
    draft: str
    tp: int

    @property
    def draft_measured(self) -> bool:
        return self.draft in VIDUR_DIRS


PAIRS = {
    "llama2-70b-tp2/llama2-7b": Pair("llama-2-70b", "llama-2-7b", 2),
    "llama2-70b-tp4/llama2-7b": Pair("llama-2-70b", "llama-2-7b", 4),
    "llama3-70b-tp4/llama3-8b": Pair("llama-3-70b", "llama-3-8b", 4),
    "llama2-7b/llama-68m": Pair("llama-2-7b", "llama-68m", 1),
    "llama2-7b/llama-160m": Pair("llama-2-7b", "llama-160m", 1),
    f"llama3-8b/{HYPOTHETICAL_LLAMA3_DRAFT}": Pair("llama-3-8b", HYPOTHETICAL_LLAMA3_DRAFT, 1),
}


def pair_named(name: str) -> Pair:
    if name not in PAIRS:
        raise InputError(None, "pair", f"unknown draft/target pair {name!r}; known: {', '.join(PAIRS)}")
    return PAIRS[name]


def thinned(tokens: np.ndarray) -> list[int]:
    """The profiled token counts kept as points: every one up to 64, then multiples of 2^floor(log2 T) / 8
    (about eight per octave; the curve is near-linear between them)."""
    keep = []
    for t in (int(x) for x in tokens):
        step = 1 if t <= 64 else 2 ** int(math.floor(math.log2(t))) // 8
        if t % step == 0:
            keep.append(t)
    return keep


def monotone(points: list[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """The running maximum of the rebuilt times, rounded to 6 significant digits: a pass over more tokens never
    costs less (Vidur's medians dip by a few per cent between neighbouring T, and its 4-GPU all-reduce rows are
    not monotonic in message size), so a dip is measurement noise, not a cheaper pass."""
    out, top = [], 0.0
    for t, ms in points:
        top = max(top, ms)
        out.append((t, float(f"{top:.6g}")))
    return tuple(out)


def _linear(root: Path, gpu: str, model: str, tp: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token counts, per-layer linear ms, embedding ms) of ``model`` at ``tp`` (vidur.linear_table)."""
    vm = VidurModel(model, VIDUR_DIRS[model], "", tp, ARCHS[model].hidden, "", "")  # only hf_dir and tp are read
    tokens, linear, emb = linear_table(root, gpu, vm)
    if len(tokens) < 2:
        raise InputError(str(mlp_path(root, gpu, vm)), "num_tensor_parallel_workers", f"no rows at tp {tp}")
    return tokens, linear, emb


def measured_points(root: Path, gpu: str, model: str, tp: int) -> tuple[tuple[int, float], ...]:
    """The non-attention iteration (T, ms) of a model with Vidur rows, at full depth and ``tp``."""
    arch = ARCHS[model]
    tokens, linear, emb = _linear(root, gpu, model, tp)
    ar = all_reduce_table(root, gpu, tp) if tp > 1 else None
    if ar is not None and len(ar[0]) == 0:
        raise InputError(str(root / "data/profiling/network" / f"{GPUS[gpu]}_dgx" / "all_reduce.csv"),
                         "num_workers", f"no all-reduce rows at {tp} workers in one node")
    out = []
    for t in thinned(tokens):
        comm = 0.0 if ar is None else 2 * float(np.interp(t * arch.hidden * DTYPE_BYTES, *ar))
        out.append((t, arch.layers * (float(np.interp(t, tokens, linear)) + comm) + float(np.interp(t, tokens, emb))))
    return monotone(out)


def operator_floors(root: Path, gpu: str, family: str) -> dict[str, float]:
    """Per operator of a layer, the smallest (median - weight slice / HBM peak) in ms over the family's rows at
    T <= FLOOR_TOKENS and every TP in the file: the kernel's fixed cost beyond reading its weights."""
    arch = ARCHS[family]
    vm = VidurModel(family, VIDUR_DIRS[family], "", 1, arch.hidden, "", "")
    df = pd.read_csv(mlp_path(root, gpu, vm))
    df = df[df.num_tokens <= FLOOR_TOKENS]
    bandwidth = SPECS[gpu].memory_tbps * 1e12
    weights = arch.op_weights()
    floors = {}
    for op in dict.fromkeys(LINEAR_OPS):
        read_ms = weights.get(op, 0) * DTYPE_BYTES / df.num_tensor_parallel_workers / bandwidth * 1e3
        floors[op] = float(max(0.0, (df[f"time_stats.{op}.median"] - read_ms).min()))
    return floors


def derived_points(root: Path, gpu: str, draft: str, family: str, tp: int) -> tuple[tuple[int, float], ...]:
    """A draft without Vidur rows, from its family's rows at ``tp`` (formula: module docstring)."""
    d, ref = ARCHS[draft], ARCHS[family]
    floors = operator_floors(root, gpu, family)
    per_layer_floor = sum(floors[op] for op in LINEAR_OPS)
    head_floor = min(floors[op] for op in GEMM_OPS)
    tokens, linear, emb = _linear(root, gpu, family, tp)
    weights = (d.layers * d.layer_weights() + d.vocab * d.hidden) / tp  # with its LM head, per GPU
    ref_weights = ref.layers * ref.layer_weights() / tp  # Vidur's rows have no LM head
    memory_ms = weights * DTYPE_BYTES / (SPECS[gpu].memory_tbps * 1e12) * 1e3
    out = []
    for t in thinned(tokens):
        beyond = max(0.0, ref.layers * (float(np.interp(t, tokens, linear)) - per_layer_floor))
        embed = max(float(emb[0]), float(np.interp(t, tokens, emb)) * d.hidden / ref.hidden)
        ms = d.layers * per_layer_floor + head_floor + embed + max(memory_ms, weights / ref_weights * beyond)
        out.append((t, ms))
    return monotone(out)


def attention_per_token(reference: Profile, model: str, tp: int) -> Coefficient:
    """ms per cached token read: the reference profile's d_ctx for the same model and TP, else scaled by KV bytes
    per token per GPU (the same achieved bandwidth)."""
    d_ctx = reference.costs["decode"].coefficients.get("d_ctx")
    if d_ctx is None:
        raise InputError(None, "costs.decode.coefficients.d_ctx", "the reference profile has no attention term")
    where = f"d_ctx of {reference.key_str()}"
    if reference.model.name == model and int(reference.key.tp) == tp:
        return replace(d_ctx, note=f"{where} (decode attention per cached token, fitted on Vidur's attention rows)"
                       + (f"; {d_ctx.note}" if d_ctx.source == "projected" else ""))
    ref_bytes = reference.model.kv_bytes_per_token / int(reference.key.tp)
    own = ARCHS[model].kv_bytes_per_token() / tp
    source = "derived" if d_ctx.source in ("fitted", "measured", "published") else d_ctx.source
    return Coefficient(float(f"{d_ctx.value * own / ref_bytes:.6g}"), "ms/token", source,
                       f"{where} x {own:.0f} / {ref_bytes:.0f} KV bytes per token per GPU ({model} at tp{tp} / "
                       f"{reference.model.name} at tp{int(reference.key.tp)}): the same achieved bandwidth per "
                       f"cached byte ({d_ctx.source} source)")


def round_costs(root: Path, pair: str, gpu: str, reference: Profile) -> RoundCosts:
    """The target's and the draft's curves of ``pair`` on ``gpu``; ``reference``'s d_ctx prices attention (the
    target's own profile where there is one, else a profile on the same GPU)."""
    p = pair_named(pair)
    if reference.key.hardware != gpu:
        raise InputError(None, "key.hardware", f"the reference profile is on {reference.key.hardware}, not {gpu}")
    vidur = f"Vidur {GPUS[gpu]} mlp.csv medians"
    target = StepCurve(p.target, p.tp, measured_points(root, gpu, p.target, p.tp),
                       attention_per_token(reference, p.target, p.tp), "published",
                       f"{vidur} of {VIDUR_DIRS[p.target]} at tp{p.tp}, rebuilt at full depth without attention "
                       f"(linear ops x {ARCHS[p.target].layers} layers + 2 all-reduces per layer + embedding; "
                       "tripath/calibrate/published/speculative.py)")
    if p.draft_measured:
        points, source = measured_points(root, gpu, p.draft, p.tp), "published"
        how = (f"{vidur} of {VIDUR_DIRS[p.draft]} at tp{p.tp} (the target's TP: vLLM's default for a draft "
               "model), rebuilt as the target's")
    else:
        points, source = derived_points(root, gpu, p.draft, p.target, p.tp), "derived"
        how = (f"DERIVED ({ARCHS[p.draft].config}): {ARCHS[p.draft].layers} layers x the per-layer launch floor of "
               f"{VIDUR_DIRS[p.target]}'s operators in {vidur} + its weights (LM head included) over the "
               f"{SPECS[gpu].memory_tbps} TB/s HBM peak, or the family's time beyond the floors x the weight ratio "
               "when larger (compute-bound); no attention-kernel floor")
    draft = StepCurve(p.draft, p.tp, points, attention_per_token(reference, p.draft, p.tp), source, how)
    return RoundCosts(target, draft, f"pair {pair} on {gpu}: verify_ms(B, K, S) = target(B (K+1)) + target "
                      "attention x S; draft_ms(B, S) = draft(B) + draft attention x S (memory-bound attention: "
                      "K+1 queries read the cached K/V once)")


def speculative_section(root: Path, pair: str, gpu: str, reference: Profile, k: int = 4,
                        context_tokens: int = 2048) -> Speculative:
    """The Speculative section of ``pair`` on ``gpu`` with its round_costs (``section_of``)."""
    p = pair_named(pair)
    return section_of(round_costs(root, pair, gpu, reference), f"{p.draft} (tp{p.tp})", f"{pair} on {gpu}", k,
                      context_tokens)


def section_of(rc: RoundCosts, draft_model: str, what: str, k: int = 4, context_tokens: int = 2048) -> Speculative:
    """The Speculative section pricing rounds by ``rc``; the scalar ratios are its batch-1 values for one sequence
    of ``context_tokens`` (the adaptive controller and break-even read those)."""
    s = context_tokens + 1.0  # decode_v1's total context: the cached tokens and the new one
    at = f"batch 1, {context_tokens} cached tokens, from speculative.round_costs"
    ratio = lambda value, what: Coefficient(float(f"{value:.6g}"), "ratio", "derived", f"{what} at {at}")  # noqa: E731
    by_k = {kk: ratio(rc.verify_ratio(kk, 1, s), f"v({kk}, B, S)") for kk in VERIFY_KS}
    tokens = float(context_tokens)
    prefill = ((rc.draft.linear_ms(tokens) - rc.draft.linear_ms(1))
               / (rc.target.linear_ms(tokens) - rc.target.linear_ms(1)))
    r = Coefficient(float(f"{prefill:.6g}"), "ratio", "derived",
                    f"the draft's non-attention prompt work / the target's for a {context_tokens}-token prompt "
                    "(round_costs' curves at that T less their one-token time; prefill attention left out)")
    return Speculative(
        draft_model=draft_model, k=k, cost_ratio=ratio(rc.cost_ratio(1, s), "c(B, S)"),
        verify_cost_ratio=ratio(rc.verify_ratio(k, 1, s), f"v({k}, B, S)"), fit=None,
        note=(f"{what}: round costs by batch and context (round_costs); the scalar ratios are their "
              f"batch-1 values at {context_tokens} cached tokens. Acceptance is the profile's acceptance table."),
        verify_by_k=by_k, draft_prefill_ratio=r, round_costs=rc)


def round_table(rc: RoundCosts, batches: tuple[int, ...], context_tokens: int, k: int, acceptance: float
                ) -> list[tuple[int, float, float, float]]:
    """(B, c(B), v(K, B), speedup E(a, K) / (K c + v)) per batch, each sequence holding ``context_tokens``."""
    e = expected_tokens(k, acceptance)
    rows = []
    for b in batches:
        s = b * (context_tokens + 1.0)
        rows.append((b, rc.cost_ratio(b, s), rc.verify_ratio(k, b, s), e / rc.round_factor(k, b, s)))
    return rows


def breakeven_batch(rc: RoundCosts, context_tokens: int, k: int, acceptance: float, max_batch: int = 4096
                    ) -> int | None:
    """The smallest batch at which a round stops paying (speedup < 1), or None up to ``max_batch``."""
    e = expected_tokens(k, acceptance)
    for b in range(1, max_batch + 1):
        if e / rc.round_factor(k, b, b * (context_tokens + 1.0)) < 1.0:
            return b
    return None
