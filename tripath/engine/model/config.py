"""The shape of a LLaMA-architecture model, with the same field meanings as HF's LlamaConfig.

One frozen dataclass, validated when built, so every later module (model, KV cache,
calibration) can trust it.  ``from_hf_dict`` / ``to_hf_dict`` speak the config.json
keys that HF checkpoints ship, so a checkpoint written here loads in transformers and back.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

from tripath.core.errors import InputError, shown
from tripath.core.limits import MAX_MODEL_SIZE

# The config.json keys every checkpoint must give; the others have transformers' defaults.
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
# ModelConfig fields whose config.json key differs (errors name the key the user can find in the file).
_HF_KEYS = {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
            "num_kv_heads": "num_key_value_heads"}


def _bad(key: str, problem: str) -> NoReturn:
    raise InputError(None, key, problem)


def _real(value: object) -> bool:
    """A JSON number (bool is an int in Python, not in JSON)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(key: str, value: object) -> float:
    """A config.json number as a float; an integer too large for a float is refused, not an OverflowError."""
    if not _real(value):
        _bad(key, f"must be a number, got {shown(value)}")
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        _bad(key, f"must be a finite number, got an integer of {len(str(value))} digits")


def _flag(key: str, value: object) -> bool:
    """A config.json boolean: "false" is a string, which bool() would read as true."""
    if not isinstance(value, bool):
        _bad(key, f"must be true or false, got {shown(value)}")
    return value


def _rope_section(d: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(key, RoPE settings): transformers >= 5 nests them in rope_parameters, older files in rope_scaling (null or
    {} where plain); ("rope_parameters", {}) when neither holds any."""
    found: list[tuple[str, dict[str, Any]]] = []
    for key in ("rope_parameters", "rope_scaling"):
        value = d.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            _bad(key, f"must be an object or null, got {shown(value)}")
        if value:
            found.append((key, value))
    return found[0] if found else ("rope_parameters", {})


def _check_size(name: str, value: object, low: int) -> None:
    """A ModelConfig size: an integer in low..MAX_MODEL_SIZE (tripath/core/limits.py), else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_MODEL_SIZE:
        raise ValueError(f"ModelConfig.{name}: must be an integer in {low}..{MAX_MODEL_SIZE:,}, got {shown(value)}")


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
            _check_size(name, getattr(self, name), 1)
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
        _check_size("head_dim", self.head_dim, 2)
        if int(self.head_dim) % 2 != 0:  # RoPE rotates pairs of channels
            raise ValueError(f"ModelConfig.head_dim: must be even for RoPE, got {self.head_dim}")
        # theta^(-2i/D) must fall with the channel i, so the base is above 1 (published: 1e4 .. 5e6)
        if not _real(self.rope_theta) or not (math.isfinite(self.rope_theta) and self.rope_theta > 1.0):
            raise ValueError(f"ModelConfig.rope_theta: must be a finite number > 1, got {shown(self.rope_theta)}")
        # a small guard added to the mean square of the activations (published: 1e-6 .. 1e-5)
        if not _real(self.rms_norm_eps) or not 0.0 < self.rms_norm_eps <= 1.0:
            raise ValueError(f"ModelConfig.rms_norm_eps: must be a number in (0, 1], got {shown(self.rms_norm_eps)}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(
                f"ModelConfig.tie_word_embeddings: must be a bool, got {shown(self.tie_word_embeddings)}"
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
        """Read an HF LlamaConfig config.json dict; an InputError naming the config.json key (no file: the
        caller adds it) on any value of the wrong JSON type, out of range, or a feature we cannot run."""
        arch = d.get("model_type", "llama")
        if arch not in ("llama", "mistral"):
            _bad("model_type", f"only LLaMA-architecture models are supported, got {shown(arch)}")
        if d.get("hidden_act", "silu") != "silu":
            _bad("hidden_act", f"only 'silu' (SwiGLU) is supported, got {shown(d.get('hidden_act'))}")
        for key in ("attention_bias", "mlp_bias"):
            if _flag(key, d.get(key, False)):
                _bad(key, "biases are not supported")
        if d.get("sliding_window") is not None:
            _bad("sliding_window", "sliding-window attention is not supported")
        rope_key, rope = _rope_section(d)
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            _bad(f"{rope_key}.rope_type", f"only 'default' RoPE is supported, got {shown(rope_type)}")
        if "factor" in rope:  # unused by default RoPE (as in transformers), but a wrong type is a broken file
            factor = _number(f"{rope_key}.factor", rope["factor"])
            if not (math.isfinite(factor) and factor >= 1.0):
                _bad(f"{rope_key}.factor", f"must be a finite number >= 1, got {shown(rope['factor'])}")
        theta_key = f"{rope_key}.rope_theta" if "rope_theta" in rope else "rope_theta"
        theta = _number(theta_key, rope.get("rope_theta", d.get("rope_theta", 10000.0)))
        eps = _number("rms_norm_eps", d.get("rms_norm_eps", 1e-5))
        missing = [key for key in _REQUIRED if key not in d]
        if missing:
            _bad(missing[0], "required key is missing")
        kv_heads = d.get("num_key_value_heads")  # absent or null: multi-head attention, as in transformers
        tied = _flag("tie_word_embeddings", d.get("tie_word_embeddings", False))
        try:
            return cls(
                vocab_size=d["vocab_size"],
                hidden_size=d["hidden_size"],
                intermediate_size=d["intermediate_size"],
                num_layers=d["num_hidden_layers"],
                num_heads=d["num_attention_heads"],
                num_kv_heads=d["num_attention_heads"] if kv_heads is None else kv_heads,
                head_dim=d.get("head_dim"),
                rope_theta=theta,
                rms_norm_eps=eps,
                max_position_embeddings=d.get("max_position_embeddings", 2048),
                tie_word_embeddings=tied,
            )
        except ValueError as exc:  # a field's own check: name the config.json key, not the dataclass field
            name, _, problem = str(exc).removeprefix("ModelConfig.").partition(": ")
            if name == "rope_theta":
                name = theta_key
            raise InputError(None, _HF_KEYS.get(name, name), problem) from None

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
