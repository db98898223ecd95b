"""aiconfigurator-core's estimator, asked the questions a tripath profile needs, with where each answer came from.

aiconfigurator-core (NVIDIA, Apache-2.0, pinned in pyproject's ``aic`` extra) ships kernel timings measured on
real GPUs with real serving engines (vLLM, SGLang, TensorRT-LLM): GEMMs, context and generation attention,
custom all-reduce and NCCL. Its Rust engine composes them into the latency of one serving iteration. This module
is the only place that imports it; the simulator never does (profiles are built once, at build time).

Questions asked (``Estimator``), all in ms for the whole tensor-parallel replica; with attention data parallelism
(``EstimatorKey.attention_dp`` D > 1: D ranks of ``tp`` GPUs, each running attention for its own batch, the MoE
layers over all tp x D GPUs) for one rank, every one of the D ranks carrying the same batch (the estimator's
assumption: its MoE operations see D x B tokens), so B below is the batch of one rank:
- ``decode(B, L)``: one decode iteration of B sequences of L cached tokens each (``decode_step_latency(B, L, 1)``;
  its context is isl + osl/2, so osl = 1 reads L).
- ``prefill(T, C)``: one iteration that prefills a chunk of T new tokens after C cached ones
  (``predict_prefill_latency(1, C + T, C)``: isl counts the cached prefix too).
- ``mixed(T, B, L)``: a chunk of T prefill tokens (no cached context) beside B decodes of L tokens
  (``mixed_step_latency``), used to check how well tripath composes mixed iterations from the two tables.
- ``sources(...)``: the per-operation breakdown's provenance tags summed by time: ``silicon`` (the op's time was
  read from a measured kernel table), ``empirical`` (an empirical formula: norms, activations, embeddings),
  ``mixed``, ``sol`` (speed of light) and whatever else the package reports.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from tripath.calibrate.aic.architecture import WEIGHTS, Architecture
from tripath.core.errors import InputError
from tripath.profile.catalog import BACKENDS

PACKAGE = "aiconfigurator-core"
PINNED_VERSION = "0.12.0"  # pyproject's aic extra; every profile records the version it was built with
# tripath's hardware key -> the estimator's system name (aiconfigurator_core/systems/*.yaml)
SYSTEMS = {"a100-80gb": "a100_sxm", "h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm"}
# tripath's KV precision names -> the estimator's quant modes (sdk/common.py KVCacheQuantMode); the weights' GEMM
# and MoE modes follow the checkpoint (architecture.py ``Architecture.quant_modes``)
KV_MODES = {"fp16": "bfloat16", "fp8": "fp8"}
# attention computes in 16-bit even over an fp8 KV cache: the package has no fp8 context-attention table for vLLM
FMHA_MODE = "bfloat16"


def installed_version() -> str:
    """The installed aiconfigurator-core's version; an InputError saying how to install it when absent."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError as exc:
        raise InputError(None, "aiconfigurator-core", "not installed: building GPU profiles needs it "
                         f"(pip install -e '.[aic]', which pins {PACKAGE}=={PINNED_VERSION})") from exc


@dataclass(frozen=True)
class EstimatorKey:
    """What one estimator is compiled for."""

    model_dir: Path  # a folder holding the model's HF config.json
    hardware: str  # tripath's hardware key (SYSTEMS)
    backend: str = "vllm"
    backend_version: str | None = None  # None: the package's current version for that system and backend
    tp: int = 1
    weights: str = "fp16"
    kv: str = "fp16"
    expert_parallel: bool = False  # MoE: experts sharded by EP over the replica's GPUs (moe_ep tp x D), not by TP
    attention_dp: int = 1  # MoE: attention data-parallel ranks of tp GPUs each, the experts over all tp x D GPUs

    def __post_init__(self) -> None:
        if self.hardware not in SYSTEMS:
            raise InputError(None, "hardware", f"must be one of {', '.join(SYSTEMS)}, got {self.hardware!r}")
        if self.backend not in BACKENDS:
            raise InputError(None, "backend", f"must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.tp not in (1, 2, 4, 8):
            raise InputError(None, "tp", f"must be 1, 2, 4 or 8, got {self.tp!r}")
        if self.attention_dp not in (1, 2, 4, 8) or self.tp * self.attention_dp > 8:
            raise InputError(None, "attention_dp", f"must be 1, 2, 4 or 8 with tp x attention_dp at most 8 (one "
                             f"node), got {self.attention_dp!r} at tp {self.tp}")
        if self.weights not in WEIGHTS:
            raise InputError(None, "weights", f"must be one of {', '.join(WEIGHTS)}, got {self.weights!r}")
        if self.kv not in KV_MODES:
            raise InputError(None, "kv", f"must be one of {', '.join(KV_MODES)}, got {self.kv!r}")
        config = self.model_dir / "config.json"
        if not config.is_file():
            raise InputError(str(config), "model", "no HF config.json there")

    @property
    def system(self) -> str:
        return SYSTEMS[self.hardware]

    @property
    def gpus(self) -> int:
        """The replica's GPUs: tp per attention data-parallel rank; the MoE layers run over all of them."""
        return self.tp * self.attention_dp

    def layout(self) -> str:
        """tp N[, attention dp D][, expert parallel]: how the replica is laid out, for messages."""
        return (f"tp {self.tp}" + (f", attention dp {self.attention_dp}" if self.attention_dp > 1 else "")
                + (", expert parallel" if self.expert_parallel else ""))


class Estimator:
    """One compiled aiconfigurator-core engine and the questions of the module docstring."""

    def __init__(self, key: EstimatorKey) -> None:
        self.key = key
        self.package_version = installed_version()
        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
        from aiconfigurator_core.sdk.engine import EngineHandle, compile_engine  # only when building

        arch = Architecture.from_config(key.model_dir.name, key.model_dir)
        gemm, moe = arch.quant_modes(key.weights, str(key.model_dir / "config.json"))
        layout: dict[str, object] = {}
        if moe is not None:  # vLLM: experts sharded by TP, or by EP (--enable-expert-parallel), over all tp x D GPUs
            layout = {"moe_quant_mode": moe, "moe_tp_size": 1 if key.expert_parallel else key.gpus,
                      "moe_ep_size": key.gpus if key.expert_parallel else 1}
            if key.attention_dp > 1:
                layout["attention_dp_size"] = key.attention_dp
        elif key.expert_parallel or key.attention_dp > 1:
            field = "expert_parallel" if key.expert_parallel else "attention_dp"
            raise InputError(str(key.model_dir / "config.json"), field, "only a mixture-of-experts model has "
                             "experts to shard" + ("" if key.expert_parallel else
                                                   f" over data-parallel ranks (attention_dp {key.attention_dp})"))
        fp8 = key.weights == "fp8" or key.kv == "fp8"
        try:
            spec = compile_engine(str(key.model_dir), key.system, key.backend, key.backend_version, tp_size=key.tp,
                                  gemm_quant_mode=gemm, kvcache_quant_mode=KV_MODES[key.kv],
                                  fmha_quant_mode=FMHA_MODE, **layout)
        except (ValueError, KeyError, RuntimeError, FileNotFoundError) as exc:
            raise InputError(str(key.model_dir), "model", f"aiconfigurator-core cannot compile it for {key.system}/"
                             f"{key.backend} tp {key.tp}{f' dp {key.attention_dp}' if key.attention_dp > 1 else ''}"
                             f"{' ep' if key.expert_parallel else ''}{' fp8' if fp8 else ''}: {exc}") from exc
        self._engine = EngineHandle(spec)
        self.backend_version = self._resolved_version()

    def _resolved_version(self) -> str:
        """The backend version the engine's tables come from (the slot's literal when none was asked)."""
        if self.key.backend_version is not None:
            return self.key.backend_version
        from aiconfigurator_core.sdk.engine import _literal_backend_version

        return str(_literal_backend_version(self.key.system, self.key.backend, None, None, None))

    def decode(self, batch: int, context: int) -> float:
        return float(self._engine.decode_step_latency(int(batch), max(int(context), 1), 1))

    def prefill(self, tokens: int, context: int) -> float:
        return float(self._engine.predict_prefill_latency(1, int(context) + int(tokens), int(context)))

    def mixed(self, tokens: int, batch: int, context: int) -> float:
        """A chunk of ``tokens`` prefill tokens (a whole prompt of that length) beside ``batch`` decodes of
        ``context`` tokens. The estimator prices the decodes' attention at the prompt's length (its isl), so
        this is asked with context == tokens, as its mixed steps assume."""
        return float(self._engine.mixed_step_latency(int(tokens), int(batch), int(context), 1))

    def decode_ops(self, batch: int, context: int) -> list[tuple[str, float, str]]:
        """(operation, ms, provenance tag) of one decode iteration."""
        return [(n, float(ms), str(src)) for n, ms, _, src in
                self._engine.decode_step_per_op(int(batch), max(int(context), 1), 1)]

    def linear_ms(self, tokens: int) -> float:
        """One pass over ``tokens`` query tokens without attention (GEMMs, norms, all-reduces, embedding, LM
        head): a decode iteration of that many one-token sequences less its attention kernel."""
        return sum(ms for name, ms, _ in self.decode_ops(tokens, 1) if "attention" not in name)

    def attention_ms(self, batch: int, context: int) -> float:
        """The decode attention kernel alone: ``batch`` sequences of ``context`` cached tokens. For multi-head
        latent attention (DeepSeek) the estimator times one ``mla_block`` with its projections, whose time does not
        grow with the context: a difference of two contexts is the attention's alone (``linear_ms`` keeps the block
        at one cached token)."""
        return sum(ms for name, ms, _ in self.decode_ops(batch, context) if "attention" in name or "mla" in name)

    def prefill_ops(self, tokens: int, context: int) -> list[tuple[str, float, str]]:
        """(operation, ms, provenance tag) of one prefill iteration (the context phase of a 1-token request)."""
        ctx, _ = self._engine.run_static_per_op(batch_size=1, isl=int(context) + int(tokens), osl=1,
                                                prefix=int(context))
        return [(n, float(ms), str(src)) for n, ms, _, src in ctx]

    def static(self, batch: int, isl: int, osl: int) -> tuple[float, float]:
        """The estimator's own static answer for a batch of ``batch`` identical requests, (TTFT, TPOT) in ms: the
        batch's context phase, and its generation phase per output token after the first
        (``run_static`` -> (context_ms, generation_ms, total_ms)). With attention data parallelism ``batch`` is one
        rank's (every rank carries as many: batch x attention_dp requests in all)."""
        context_ms, generation_ms, _ = self._engine.run_static(batch_size=int(batch), isl=int(isl), osl=int(osl))
        return float(context_ms), float(generation_ms) / max(1, osl - 1)

    def describe(self) -> str:
        k = self.key
        return (f"{PACKAGE} {self.package_version}, system {k.system}, backend {k.backend} {self.backend_version}, "
                f"{k.layout()}, weights {k.weights}, KV {k.kv}")


@cache
def compiled(model_dir: Path, hardware: str, backend: str, tp: int, weights: str, version: str,
             expert_parallel: bool = False, attention_dp: int = 1) -> Estimator:
    """An estimator for a measured run's settings, compiled once per process: with the run's backend version when
    the package accepts it (only its current / previous / next slots are queryable), else its current one
    (``backend_version`` says which). ``expert_parallel``: a mixture-of-experts run's experts by EP over the
    replica's GPUs (``EstimatorKey.expert_parallel``); ``attention_dp``: its attention data-parallel ranks
    (``EstimatorKey.attention_dp``)."""
    if version:
        try:
            return Estimator(EstimatorKey(model_dir, hardware, backend, version, tp, weights,
                                          expert_parallel=expert_parallel, attention_dp=attention_dp))
        except InputError:
            pass
    return Estimator(EstimatorKey(model_dir, hardware, backend, None, tp, weights, expert_parallel=expert_parallel,
                                  attention_dp=attention_dp))


def time_by_source(ops: list[tuple[str, float, str]]) -> Counter[str]:
    """Milliseconds per provenance tag."""
    out: Counter[str] = Counter()
    for _, ms, source in ops:
        out[source] += ms
    return out
