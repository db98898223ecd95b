"""LLaMA decoder in plain PyTorch: RMSNorm, RoPE, grouped-query attention, SwiGLU.

Parameter names are exactly HF LlamaForCausalLM's, so a state_dict maps 1:1 onto an HF
safetensors checkpoint.  The model is only math: by default attention is dense causal
SDPA (training, reference); the engine passes an ``attention`` callable that writes K/V
into its paged cache and attends through block tables (tripath/engine/kv/paged_attention.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tripath.engine.model.config import ModelConfig

# (layer index, q [B, T, Hq, D], k [B, T, Hkv, D], v [B, T, Hkv, D]) -> attention output [B, T, Hq, D]
AttentionFn = Callable[[int, Tensor, Tensor, Tensor], Tensor]


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * w, computed in fp32 as HF does, then cast back."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class RotaryEmbedding:
    """cos/sin tables for RoPE (Su et al. 2021), HF rotate_half convention.

    Kept in fp32 per device and not registered as a buffer: model.to(bf16) must not round
    the angles (positions up to max_position_embeddings), and the state_dict stays HF's.
    """

    def __init__(self, head_dim: int, max_positions: int, theta: float) -> None:
        self.head_dim = head_dim
        self.max_positions = max_positions
        self.theta = theta
        self._tables: dict[torch.device, tuple[Tensor, Tensor]] = {}

    def tables(self, device: torch.device) -> tuple[Tensor, Tensor]:
        if device not in self._tables:
            # inv_freq_i = theta^(-2i/D), i = 0..D/2-1; angle = position * inv_freq
            channels = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=device).float()
            exponent = channels / self.head_dim
            inv_freq = 1.0 / (self.theta**exponent)
            pos = torch.arange(self.max_positions, device=device, dtype=torch.float32)
            freqs = torch.outer(pos, inv_freq)  # [P, D/2]
            emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]: HF duplicates the halves (rotate_half layout)
            self._tables[device] = (emb.cos(), emb.sin())
        return self._tables[device]

    def cos_sin(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """positions [B, T] -> cos, sin [B, T, 1, D] in the activations' dtype."""
        cos, sin = self.tables(positions.device)
        return cos[positions].unsqueeze(2).to(dtype), sin[positions].unsqueeze(2).to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, T, H, D] rotated by position: x*cos + rotate_half(x)*sin."""
    return x * cos + rotate_half(x) * sin


def dense_causal_attention(q: Tensor, k: Tensor, v: Tensor, group: int) -> Tensor:
    """Causal SDPA over the T new tokens only (no cache). q [B,T,Hq,D], k/v [B,T,Hkv,D] -> [B,T,Hq,D]."""
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, T, D]
    if group > 1:  # GQA: each KV head serves `group` consecutive query heads (HF repeat_kv order)
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.transpose(1, 2)  # [B, T, Hq, D]


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        d = int(config.head_dim)
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, d
        self.q_proj = nn.Linear(config.hidden_size, config.num_heads * d, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(config.num_heads * d, config.hidden_size, bias=False)
        # set by tripath/engine/model/fusion.py: [q; k; v] rows in one matrix, one matmul instead of three
        self.register_buffer("qkv_weight", None, persistent=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attention: AttentionFn | None) -> Tensor:
        b, t, _ = x.shape
        if self.qkv_weight is not None:
            q_width, kv_width = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
            q, k, v = F.linear(x, self.qkv_weight).split([q_width, kv_width, kv_width], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.reshape(b, t, self.num_heads, self.head_dim)  # [B, T, Hq, D]
        k = k.reshape(b, t, self.num_kv_heads, self.head_dim)  # [B, T, Hkv, D]
        v = v.reshape(b, t, self.num_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if attention is None:
            out = dense_causal_attention(q, k, v, self.num_heads // self.num_kv_heads)
        else:
            out = attention(self.layer_idx, q, k, v)
        return self.o_proj(out.reshape(b, t, self.num_heads * self.head_dim))  # [B, T, Hq*D]


class LlamaMLP(nn.Module):
    """SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.register_buffer("gate_up_weight", None, persistent=False)  # [gate; up], set by fusion.py

    def forward(self, x: Tensor) -> Tensor:
        if self.gate_up_weight is not None:
            gate, up = F.linear(x, self.gate_up_weight).chunk(2, dim=-1)
            return self.down_proj(F.silu(gate) * up)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attention: AttentionFn | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attention)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBackbone(nn.Module):
    """HF's ``model.`` prefix: embeddings, decoder layers, final norm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaModel(nn.Module):
    """LlamaForCausalLM-compatible module: ``model(input_ids [B, T]) -> logits [B, T, V]``."""

    def __init__(
        self, config: ModelConfig, generator: torch.Generator | None = None, *, initialize: bool = True
    ) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaBackbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rope = RotaryEmbedding(int(config.head_dim), config.max_position_embeddings, config.rope_theta)
        if initialize:  # False: the caller overwrites every weight (checkpoint loading on the meta device)
            self.reset_parameters(generator if generator is not None else torch.Generator().manual_seed(0))

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator) -> None:
        """HF's init: every Linear and the embedding ~ N(0, 0.02^2), norms = 1; seeded by the generator."""
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                # draw on CPU with the CPU generator, then copy: same numbers on every device
                values = torch.empty(module.weight.shape, dtype=torch.float32)
                values.normal_(0.0, 0.02, generator=generator)
                module.weight.copy_(values)
            elif isinstance(module, RMSNorm):
                module.weight.fill_(1.0)

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor | None = None,
        attention: AttentionFn | None = None,
        logits_index: Tensor | None = None,
    ) -> Tensor:
        """input_ids [B, T] -> logits [B, T, V].

        positions [B, T] default to 0..T-1 (a fresh dense sequence).  With ``logits_index``
        (indices into T) only those positions go through the LM head: [B, len(index), V].
        """
        b, t = input_ids.shape
        if positions is None:
            positions = torch.arange(t, device=input_ids.device).expand(b, t)
        x = self.model.embed_tokens(input_ids)  # [B, T, H]
        cos, sin = self.rope.cos_sin(positions, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, attention)
        if logits_index is not None:
            x = x[:, logits_index]  # [B, N, H]
        x = self.model.norm(x)
        return self.lm_head(x)
