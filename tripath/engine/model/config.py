"""The shape of a LLaMA-architecture model, with the same field meanings as HF's LlamaConfig.

One frozen dataclass, validated when built, so every later module (model, KV cache,
calibration) can trust it.  ``from_hf_dict`` / ``to_hf_dict`` speak the config.json
keys that HF checkpoints ship, so a checkpoint written here loads in transformers and back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    """LLaMA shape: decoder layers of RMSNorm -> GQA attention with RoPE -> RMSNorm -> SwiGLU MLP."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None  # None: hidden_size // num_heads (filled in by __post_init__)
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name}: must be an integer >= 1, got {value!r}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"ModelConfig.num_kv_heads: num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim is None:
            if self.hidden_size % self.num_heads != 0:
                raise ValueError(
                    f"ModelConfig.head_dim: hidden_size ({self.hidden_size}) is not divisible by "
                    f"num_heads ({self.num_heads}); give head_dim explicitly"
                )
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if isinstance(self.head_dim, bool) or not isinstance(self.head_dim, int) or self.head_dim < 2:
            raise ValueError(f"ModelConfig.head_dim: must be an integer >= 2, got {self.head_dim!r}")
        if self.head_dim % 2 != 0:  # RoPE rotates pairs of channels
            raise ValueError(f"ModelConfig.head_dim: must be even for RoPE, got {self.head_dim}")
        if not (self.rope_theta > 0.0):  # also rejects NaN
            raise ValueError(f"ModelConfig.rope_theta: must be > 0, got {self.rope_theta}")
        if not (self.rms_norm_eps > 0.0):
            raise ValueError(f"ModelConfig.rms_norm_eps: must be > 0, got {self.rms_norm_eps}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(
                f"ModelConfig.tie_word_embeddings: must be a bool, got {self.tie_word_embeddings!r}"
            )

    @property
    def kv_group_size(self) -> int:
        """Query heads that share one KV head (1 = multi-head attention)."""
        return self.num_heads // self.num_kv_heads

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of one token over all layers: 2 * layers * kv_heads * head_dim * bytes."""
        return 2 * self.num_layers * self.num_kv_heads * int(self.head_dim) * dtype_bytes

    def num_params(self) -> int:
        """Exact parameter count of LlamaModel (tied embeddings counted once)."""
        h, d, inter = self.hidden_size, int(self.head_dim), self.intermediate_size
        attn = h * self.num_heads * d * 2 + h * self.num_kv_heads * d * 2  # q, o and k, v projections
        mlp = 3 * h * inter  # gate, up, down
        per_layer = attn + mlp + 2 * h  # + two RMSNorm weights
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return embed + self.num_layers * per_layer + h + head

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Read an HF LlamaConfig config.json dict; raises ValueError naming the key on what we cannot run."""
        arch = d.get("model_type", "llama")
        if arch not in ("llama", "mistral"):
            raise ValueError(f"model_type: only LLaMA-architecture models are supported, got {arch!r}")
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act: only 'silu' (SwiGLU) is supported, got {d.get('hidden_act')!r}")
        for key in ("attention_bias", "mlp_bias"):
            if d.get(key, False):
                raise ValueError(f"{key}: biases are not supported")
        if d.get("sliding_window") is not None:
            raise ValueError("sliding_window: sliding-window attention is not supported")
        # transformers >= 5 nests RoPE settings in rope_parameters; older files use rope_theta / rope_scaling.
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(
                f"rope_parameters.rope_type: only 'default' RoPE is supported, got {rope_type!r}"
            )
        theta = rope.get("rope_theta", d.get("rope_theta", 10000.0))
        missing = [
            k
            for k in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
            )
            if k not in d
        ]
        if missing:
            raise ValueError(f"{missing[0]}: required key is missing")
        return cls(
            vocab_size=d["vocab_size"],
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_layers=d["num_hidden_layers"],
            num_heads=d["num_attention_heads"],
            num_kv_heads=d.get("num_key_value_heads") or d["num_attention_heads"],
            head_dim=d.get("head_dim"),
            rope_theta=float(theta),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-5)),
            max_position_embeddings=d.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
        )

    def to_hf_dict(self) -> dict[str, Any]:
        """HF LlamaConfig config.json keys (both the rope_theta and the rope_parameters spelling)."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": False,
            "mlp_bias": False,
        }


# Shapes from the published HF config.json files (meta-llama/Llama-2-*-hf, meta-llama/Meta-Llama-3-*); the
# tiny ones are for tests.
PRESETS: dict[str, ModelConfig] = {
    "tiny-mha": ModelConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=4,
        max_position_embeddings=512,
    ),
    "tiny-gqa": ModelConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=160,
        num_layers=2,
        num_heads=8,
        num_kv_heads=2,
        rope_theta=500000.0,
        max_position_embeddings=512,
    ),
    "tiny-draft": ModelConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=352,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=2048,
    ),
    "tiny-target": ModelConfig(
        vocab_size=256,
        hidden_size=256,
        intermediate_size=688,
        num_layers=6,
        num_heads=8,
        num_kv_heads=4,
        max_position_embeddings=2048,
    ),
    "bench-small": ModelConfig(
        vocab_size=256,
        hidden_size=256,
        intermediate_size=688,
        num_layers=4,
        num_heads=8,
        num_kv_heads=4,
        max_position_embeddings=16384,
    ),
    "llama2-7b": ModelConfig(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        max_position_embeddings=4096,
    ),
    "llama2-70b": ModelConfig(
        vocab_size=32000,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        max_position_embeddings=4096,
    ),
    "llama3-8b": ModelConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        rope_theta=500000.0,
        max_position_embeddings=8192,
    ),
    "llama3-70b": ModelConfig(
        vocab_size=128256,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        rope_theta=500000.0,
        max_position_embeddings=8192,
    ),
}
