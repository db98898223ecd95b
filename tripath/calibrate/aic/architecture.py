"""The model description tripath reads from an HF config.json: dense or mixture-of-experts, MHA / GQA / MLA.

One place for the shapes the profile builder needs (tripath/calibrate/aic/builder.py) and what follows from them:
parameters (all, and active per token), weight bytes by precision, KV bytes per token by attention kind, and the
quant modes aiconfigurator-core's estimator is compiled with.

Families read (their configs under data/model_configs/):

- Llama-family dense decoders (Llama 2 / 3.1, CodeLlama, Qwen3 dense): ``num_attention_heads``,
  ``num_key_value_heads``, ``head_dim``, ``intermediate_size``;
- Mixtral (``num_local_experts``, ``num_experts_per_tok``; every layer's MLP is 8 experts of ``intermediate_size``);
- Qwen3-MoE (``num_experts``, ``moe_intermediate_size``, ``decoder_sparse_step``, ``mlp_only_layers``);
- DeepSeek-V3 (``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace`` leading dense layers of
  ``intermediate_size``; MLA: ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``);
- gpt-oss (``num_local_experts``, ``experts_per_token``; biases on attention and experts; mxfp4 experts).

Precision (``weights``): "fp16" (bf16/fp16, 2 bytes), "fp8" (1 byte; a block-scaled checkpoint, whose
``quantization_config`` has ``weight_block_size``, runs the estimator's fp8_block kernels, any other the per-tensor
fp8 ones), "fp4" (gpt-oss's mxfp4 experts: 4 bits + one 8-bit scale per 32 weights = 17/32 byte; attention, router,
embeddings 16-bit). Embeddings and the LM head stay 16-bit in every mode, as vLLM's fp8 checkpoints keep them.
Norms, routers and the (under 0.01 %) block scales of fp8 checkpoints are counted at the layers' precision and
without scales. DeepSeek-V3's multi-token-prediction layer (``num_nextn_predict_layers``) is not counted: vLLM
loads it only when MTP speculation is on, which tripath does not price.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tripath.core.errors import InputError, check_regular_file, shown
from tripath.core.limits import MAX_MODEL_SIZE

WEIGHTS = ("fp16", "fp8", "fp4")
_BYTES = {"fp16": 2.0, "fp8": 1.0}
MXFP4_BYTES = 17 / 32  # 4 bits per weight + one E8M0 scale byte per 32 weights
ATTENTION_KINDS = ("mha", "gqa", "mla")


def read_config(model_dir: Path) -> dict[str, object]:
    """The model's HF config.json as a dict (an InputError naming the file when unreadable)."""
    path = model_dir / "config.json"
    check_regular_file(path, "config.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(str(path), "config.json", f"unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(str(path), "config.json", "must be a JSON object")
    return data


@dataclass(frozen=True)
class MoE:
    """The experts of a mixture-of-experts decoder."""

    experts: int  # routed experts per MoE layer
    top_k: int  # routed experts per token
    shared_experts: int  # always-on experts per MoE layer (DeepSeek), each of expert_intermediate
    expert_intermediate: int
    dense_layers: int  # layers with a dense MLP of the model's intermediate size instead (DeepSeek's first 3)
    bias: bool = False  # gpt-oss: biases on the experts' and router's projections


@dataclass(frozen=True)
class MLA:
    """DeepSeek's multi-head latent attention: the cache holds one kv_lora_rank latent + the rope key per token."""

    q_lora_rank: int  # 0: queries projected directly
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def latent(self) -> int:
        """Cached elements per token and layer."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class Architecture:
    """The shapes tripath needs from an HF config.json (module docstring)."""

    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int  # for MLA: the query/key head size (qk_nope + qk_rope)
    hidden: int
    intermediate: int  # the dense MLP's (for MoE models: the dense layers', if any)
    vocab: int
    window: int
    tied: bool
    moe: MoE | None = None
    mla: MLA | None = None
    attention_bias: bool = False
    quantization: str | None = None  # the checkpoint's: "fp8", "fp8_block", "mxfp4"; None: 16-bit
    mtp_layers: int = 0  # num_nextn_predict_layers: multi-token-prediction layers (not counted, not priced)

    @property
    def attention(self) -> str:
        if self.mla is not None:
            return "mla"
        return "mha" if self.kv_heads == self.heads else "gqa"

    @classmethod
    def from_config(cls, name: str, model_dir: Path) -> Architecture:
        config = read_config(model_dir)
        where = str(model_dir / "config.json")

        def field(key: str, default: object = None) -> int:
            value = config.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MODEL_SIZE:
                raise InputError(where, key, f"must be an integer in 1..{MAX_MODEL_SIZE:,}, got {shown(value)}")
            return value

        def flag(key: str) -> bool:
            value = config.get(key, False)
            if not isinstance(value, bool):
                raise InputError(where, key, f"must be true or false, got {shown(value)}")
            return value

        tied = flag("tie_word_embeddings")
        layers = field("num_hidden_layers")
        heads, hidden = field("num_attention_heads"), field("hidden_size")
        kv_heads = field("num_key_value_heads", heads)
        mla = _mla(config, where, field) if "kv_lora_rank" in config else None
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim if mla else field("head_dim", hidden // heads)
        if heads % kv_heads:
            raise InputError(where, "num_key_value_heads", f"must divide num_attention_heads ({heads})")
        moe = _moe(config, where, field, layers)
        # a MoE model without leading dense layers may carry no dense intermediate size (it is unused then)
        intermediate = (field("intermediate_size") if moe is None or moe.dense_layers or "intermediate_size" in config
                        else moe.expert_intermediate)
        mtp = field("num_nextn_predict_layers") if config.get("num_nextn_predict_layers") else 0
        return cls(name, layers, heads, kv_heads, head_dim, hidden, intermediate, field("vocab_size"),
                   field("max_position_embeddings"), tied, moe, mla, flag("attention_bias"),
                   _quantization(config, where), mtp)

    # ---- parameters -------------------------------------------------------------------------------------------

    def attention_params(self) -> int:
        """One layer's attention projections (and MLA's latent norms)."""
        h = self.hidden
        if self.mla is not None:
            m = self.mla
            q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * self.heads * self.head_dim if m.q_lora_rank
                 else h * self.heads * self.head_dim)
            kv = h * m.latent + m.kv_lora_rank + m.kv_lora_rank * self.heads * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + self.heads * m.v_head_dim * h
        params = h * self.head_dim * (self.heads * 2 + self.kv_heads * 2)  # q, o, k, v
        if self.attention_bias:
            params += self.head_dim * (self.heads + 2 * self.kv_heads) + h
        return params

    def _expert_params(self, intermediate: int) -> int:
        """One gated MLP (gate, up, down) of ``intermediate``, with gpt-oss's biases."""
        params = 3 * self.hidden * intermediate
        if self.moe is not None and self.moe.bias:
            params += 2 * intermediate + self.hidden
        return params

    def _layer_parts(self) -> tuple[int, int, int]:
        """(params outside the routed experts, routed experts' params, one routed expert's params) over all
        decoder layers."""
        norms = 2 * self.hidden
        attention = self.attention_params()
        if self.moe is None:
            return self.layers * (attention + 3 * self.hidden * self.intermediate + norms), 0, 0
        m = self.moe
        sparse = self.layers - m.dense_layers
        expert = self._expert_params(m.expert_intermediate)
        router = self.hidden * m.experts + (m.experts if m.bias else 0)
        dense_mlp = 3 * self.hidden * self.intermediate
        other = (self.layers * (attention + norms) + m.dense_layers * dense_mlp
                 + sparse * (router + m.shared_experts * expert))
        return other, sparse * m.experts * expert, sparse * expert

    def params(self) -> tuple[int, int]:
        """(parameters in the decoder layers, parameters in the embeddings and LM head), every expert counted."""
        other, routed, _ = self._layer_parts()
        return other + routed, self.embedding_params()

    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden  # + final norm

    def _read_embeddings(self) -> int:
        """The embedding parameters one decode step reads whole: the LM head and the final norm (the input
        embedding is looked up, one row per token)."""
        return self.vocab * self.hidden + self.hidden

    def active_params(self) -> int:
        """Parameters one token's decode step reads: every non-expert weight, top_k routed experts per MoE layer
        and the LM head (not the input embedding's table, of which it reads one row)."""
        other, _, one = self._layer_parts()
        return other + (self.moe.top_k * one if self.moe is not None else 0) + self._read_embeddings()

    # ---- bytes ------------------------------------------------------------------------------------------------

    def weight_bytes(self, weights: str, active: bool = False) -> int:
        """Bytes of the weights held (``active``: read by one token) at precision ``weights`` (module docstring)."""
        other, routed, one = self._layer_parts()
        if active:
            routed = self.moe.top_k * one if self.moe is not None else 0
        embeddings = (self._read_embeddings() if active else self.embedding_params()) * 2
        if weights == "fp4":  # mxfp4 routed experts; everything else 16-bit
            return int(round(other * 2 + routed * MXFP4_BYTES)) + embeddings
        return int(round((other + routed) * _BYTES[weights])) + embeddings

    def rank_weight_bytes(self, weights: str, attention_dp: int = 1) -> int:
        """Bytes of the weights one attention data-parallel rank holds when a replica is ``attention_dp`` ranks
        (vLLM's --data-parallel-size with a mixture-of-experts model): every weight outside the routed experts
        (attention, norms, router, shared experts, dense layers, embeddings and LM head), replicated in each rank and
        sharded by TP within it, plus 1 / attention_dp of the routed experts, which are sharded (by TP or EP) over
        all the replica's GPUs. ``weight_bytes(weights)`` at one rank."""
        if attention_dp == 1:
            return self.weight_bytes(weights)
        if self.moe is None:
            raise InputError(None, "attention_dp", f"is {attention_dp}, but {self.name} has no experts to share "
                             "over data-parallel ranks (a dense model)")
        other, routed, _ = self._layer_parts()
        embeddings = self.embedding_params() * 2
        routed_bytes = MXFP4_BYTES if weights == "fp4" else _BYTES[weights]
        other_bytes = 2.0 if weights == "fp4" else _BYTES[weights]
        return int(round(other * other_bytes + routed * routed_bytes / attention_dp)) + embeddings

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Cached bytes per token over all layers: K and V per KV head (MHA / GQA), the latent (MLA)."""
        if self.mla is not None:
            return self.layers * self.mla.latent * dtype_bytes
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def kv_replication(self, tp: int) -> int:
        """How many GPUs of a ``tp`` group hold each cached element: vLLM splits the KV heads over the group and
        replicates them once there are fewer heads than GPUs; MLA's latent is one per token, on every GPU."""
        if self.mla is not None:
            return tp
        return max(1, tp // self.kv_heads)

    # ---- the estimator's quant modes --------------------------------------------------------------------------

    def quant_modes(self, weights: str, where: str) -> tuple[str, str | None]:
        """(gemm_quant_mode, moe_quant_mode; None for a dense model) the estimator is compiled with for
        ``weights``, or an InputError when the checkpoint does not come in that precision."""
        q = self.quantization
        if weights not in WEIGHTS:
            raise InputError(where, "weights", f"must be one of {', '.join(WEIGHTS)}, got {shown(weights)}")
        if weights == "fp16":
            if q is not None:
                raise InputError(where, "quantization_config", f"the checkpoint's weights are {q}, not 16-bit: "
                                 f"build it with --weights {'fp4' if q == 'mxfp4' else 'fp8'}")
            modes = ("bfloat16", "bfloat16")
        elif weights == "fp8":
            if q == "mxfp4":
                raise InputError(where, "quantization_config", "the checkpoint's experts are mxfp4: build it "
                                 "with --weights fp4")
            modes = ("fp8_block", "fp8_block") if q == "fp8_block" else ("fp8", "fp8")
        else:
            if q != "mxfp4" or self.moe is None:
                raise InputError(where, "weights", "fp4 is modelled for mxfp4 mixture-of-experts checkpoints only "
                                 f"(gpt-oss), this checkpoint's quantization is {q or 'none (16-bit)'}")
            modes = ("bfloat16", "w4a16_mxfp4")
        return modes[0], (modes[1] if self.moe is not None else None)


def _mla(config: dict[str, object], where: str, field: Callable[..., int]) -> MLA:
    q_lora = config.get("q_lora_rank")
    if q_lora is not None:
        q_lora = field("q_lora_rank")
    return MLA(q_lora or 0, field("kv_lora_rank"), field("qk_nope_head_dim"), field("qk_rope_head_dim"),
               field("v_head_dim"))


def _moe(config: dict[str, object], where: str, field: Callable[..., int], layers: int) -> MoE | None:
    experts_key = next((k for k in ("n_routed_experts", "num_local_experts", "num_experts") if config.get(k)), None)
    if experts_key is None:
        return None
    experts = field(experts_key)
    top_key = "num_experts_per_tok" if "num_experts_per_tok" in config else "experts_per_token"
    top_k = field(top_key)
    if top_k > experts:
        raise InputError(where, top_key, f"must be at most {experts_key} ({experts}), got {top_k}")
    shared = config.get("n_shared_experts") or 0
    if shared:
        shared = field("n_shared_experts")
    family = str(config.get("model_type", ""))
    if family == "gpt_oss" or "moe_intermediate_size" not in config:  # Mixtral, gpt-oss: experts of intermediate_size
        intermediate = field("intermediate_size")
    else:
        intermediate = field("moe_intermediate_size")
    dense = 0
    if "first_k_dense_replace" in config:  # DeepSeek: the first k layers are dense
        dense = config["first_k_dense_replace"]
        if isinstance(dense, bool) or not isinstance(dense, int) or not 0 <= dense < layers:
            raise InputError(where, "first_k_dense_replace", f"must be an integer in 0..{layers - 1}, got "
                             f"{shown(dense)}")
    elif "mlp_only_layers" in config or "decoder_sparse_step" in config:  # Qwen-MoE
        only = config.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                                                  for i in only):
            raise InputError(where, "mlp_only_layers", f"must be a list of layer indices below {layers}, got "
                             f"{shown(only)}")
        step = field("decoder_sparse_step", 1)
        dense = sum(1 for i in range(layers) if i in only or (i + 1) % step)
    return MoE(experts, top_k, shared, intermediate, dense, family == "gpt_oss")


def _quantization(config: dict[str, object], where: str) -> str | None:
    q = config.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict):
        raise InputError(where, "quantization_config", f"must be an object, got {shown(q)}")
    method = q.get("quant_method")
    if method == "fp8":
        return "fp8_block" if q.get("weight_block_size") else "fp8"
    if method == "mxfp4":
        return "mxfp4"
    raise InputError(where, "quantization_config.quant_method", f"must be fp8 or mxfp4 (the checkpoints modelled), "
                     f"got {shown(method)}")
