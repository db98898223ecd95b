"""The plain sections of a calibration profile: key, hardware, model, memory budget, provenance.

Frozen dataclasses checked when built (each field's hook, then cross-field checks) and read and
written by the profile codec (tripath/profile/codec.py). The optimization-path sections (speculative,
acceptance, paging, sequence parallel, compression) live in ``tripath/profile/sections.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tripath.core.errors import InputError
from tripath.profile.codec import Section, json_field, note_field
from tripath.profile.cost_model import Coefficient, coefficient
from tripath.profile.fields import MIN_LINK_GBPS, VALUE_SOURCES, check_text, count, each, entries, text

# Link bandwidths are Coefficients whose unit must be this, so consumers never guess GB vs Gb.
LINK_UNIT = "GB/s"


def _key_part(field: str, value: object) -> str:
    """A non-empty string without "/", which separates the parts of ``ProfileKey.__str__``."""
    part = check_text(field, value)
    if "/" in part:
        raise InputError(None, field, f"must not contain '/', got {part!r}")
    return part


@dataclass(frozen=True)
class ProfileKey(Section):
    """What a profile is for: one (hardware, model, dtype, tensor-parallel degree, engine commit).

    expert_parallel (mixture-of-experts models only; left out of the JSON when false): the experts are sharded by
    expert parallelism over the tensor-parallel group (vLLM's --enable-expert-parallel: each GPU holds whole
    experts) instead of each expert's matrices by tensor parallelism.

    attention_dp (mixture-of-experts models only; left out of the JSON when 1): attention data parallelism, vLLM's
    --data-parallel-size. A replica is ``attention_dp`` ranks of ``tp`` GPUs each (``gpus`` in all): every rank
    runs attention for its own batch over its own KV pool, and the MoE layers run over all ``gpus`` (by TP, or by
    EP with ``expert_parallel``), so the ranks step in lockstep (tripath/simulator/loop/lockstep.py). The
    profile's costs, memory and KV are one rank's, priced with every rank carrying the same batch.
    """

    hardware: str = json_field(_key_part)
    model: str = json_field(_key_part)
    dtype: str = json_field(_key_part)
    tp: int = json_field(count(1))
    engine_commit: str = json_field(_key_part)
    expert_parallel: bool = json_field(default=False, omit=True)
    attention_dp: int = json_field(count(1), default=1, omit=True)

    def __str__(self) -> str:
        dp = f"/dp{self.attention_dp}" if self.attention_dp > 1 else ""
        ep = "/ep" if self.expert_parallel else ""
        return f"{self.hardware}/{self.model}/{self.dtype}/tp{self.tp}{dp}{ep}/{self.engine_commit}"

    @property
    def gpus(self) -> int:
        """GPUs of one replica: ``tp`` per attention data-parallel rank."""
        return int(self.tp) * int(self.attention_dp)


@dataclass(frozen=True)
class Hardware(Section):
    """Memory per tier (bytes) and link bandwidths (Coefficients in GB/s, keyed by link name).

    Link names used by the simulator: ``device_host`` (GPU <-> host RAM), ``host_ssd``
    (host RAM <-> SSD), ``interconnect`` (GPU <-> GPU, for sequence parallelism).
    """

    device_name: str = json_field(text())
    device_memory_bytes: int = json_field(count(1))
    host_memory_bytes: int = json_field(count())
    ssd_bytes: int = json_field(count())
    links: dict[str, Coefficient] = json_field(entries(coefficient(low=MIN_LINK_GBPS, unit=LINK_UNIT)))
    note: str = note_field()

    def link_gbps(self, name: str) -> float:
        """Bandwidth of link ``name`` in GB/s (1e9 bytes/s)."""
        return self.links[name].value


ATTENTION_KINDS = ("mha", "gqa", "mla")


@dataclass(frozen=True)
class MoESpec(Section):
    """A mixture-of-experts model's experts: every expert is resident (weight_bytes counts them all); a token
    passes through top_k routed experts (and the shared ones) per MoE layer: active_params, whose bytes at the
    weights' precision are active_weight_bytes (what one token's decode reads)."""

    experts: int = json_field(count(1))
    top_k: int = json_field(count(1))
    shared_experts: int = json_field(count(0))
    expert_intermediate: int = json_field(count(1))
    dense_layers: int = json_field(count(0))  # leading layers with a dense MLP (DeepSeek's first_k_dense_replace)
    active_params: int = json_field(count(1))
    active_weight_bytes: int = json_field(count(1))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.top_k > self.experts:
            raise InputError(None, "top_k", f"must be at most experts ({self.experts}), got {self.top_k}")


@dataclass(frozen=True)
class ModelSpec(Section):
    """The served model's architecture and sizes.

    attention (left out of the JSON when absent: the files written before it existed, MHA or GQA by kv_heads):
    "mha" / "gqa": kv_bytes_per_token must equal 2 (K and V) x layers x kv_heads x head_dim x dtype_bytes, the
    cache stores one key and one value vector per KV head per layer for every token; "mla" (DeepSeek's latent
    attention): it must equal layers x kv_latent_dim x dtype_bytes, one compressed latent (kv_lora_rank +
    qk_rope_head_dim elements) per layer per token. moe: the experts of a mixture-of-experts model (``MoESpec``).
    """

    name: str = json_field(text())
    layers: int = json_field(count(1))
    heads: int = json_field(count(1))
    kv_heads: int = json_field(count(1))
    head_dim: int = json_field(count(1))
    hidden: int = json_field(count(1))
    params: int = json_field(count(1))
    dtype_bytes: int = json_field(count(1))
    kv_bytes_per_token: int = json_field(count(1))
    weight_bytes: int = json_field(count(1))
    note: str = note_field()
    attention: str | None = json_field(text(allowed=ATTENTION_KINDS), default=None, omit=True)
    kv_latent_dim: int | None = json_field(count(1), default=None, omit=True)
    moe: MoESpec | None = json_field(default=None, omit=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.heads % self.kv_heads:
            raise InputError(None, "kv_heads", f"must divide heads ({self.heads}), got {self.kv_heads}")
        if self.attention == "mha" and self.kv_heads != self.heads:
            raise InputError(None, "attention", f"mha has as many KV heads as heads ({self.heads}), got "
                             f"{self.kv_heads}; gqa is the name for fewer")
        if (self.attention == "mla") != (self.kv_latent_dim is not None):
            raise InputError(None, "kv_latent_dim", "is given exactly when attention is mla")
        if self.attention == "mla":
            assert self.kv_latent_dim is not None
            expected = self.layers * self.kv_latent_dim * self.dtype_bytes
            formula = "layers*kv_latent_dim*dtype_bytes"
        else:
            expected = 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes
            formula = "2*layers*kv_heads*head_dim*dtype_bytes"
        if self.kv_bytes_per_token != expected:
            raise InputError(None, "kv_bytes_per_token", f"must be {formula} = {expected}, got "
                             f"{self.kv_bytes_per_token}")
        if self.moe is not None and self.moe.active_params > self.params:
            raise InputError(None, "moe.active_params", f"must be at most params ({self.params}), got "
                             f"{self.moe.active_params}")

    @property
    def attention_kind(self) -> str:
        """"mha", "gqa" or "mla": the stated kind, else MHA or GQA by the KV heads."""
        return self.attention or ("mha" if self.kv_heads == self.heads else "gqa")


@dataclass(frozen=True)
class MemoryBudget(Section):
    """The KV-cache budget of one replica in bytes, with where that number comes from."""

    kv_capacity_bytes: int = json_field(count(1))
    source: str = json_field(text(allowed=VALUE_SOURCES))
    note: str = note_field()


@dataclass(frozen=True)
class Provenance(Section):
    """How the numbers were produced: command, engine commit, software and device, time, seed documents."""

    command: str = json_field(text())
    engine_commit: str = json_field(text())
    torch_version: str | None = json_field(text())
    cuda_version: str | None = json_field(text())
    device_name: str | None = json_field(text())
    created_utc: str = json_field(text())
    seed_documents: tuple[str, ...] = json_field(each(text()), default=())
