"""Asymmetric per-group integer quantization of K and V, as KIVI (Liu et al. 2024).

Each group of ``group`` numbers gets its own zero point z = min and scale s = (max - min) / (2^b - 1);
a number x is stored as the code q = round((x - z) / s) in [0, 2^b - 1] and read back as q * s + z,
so the error per element is at most s / 2.  KIVI's finding is that keys have outlier CHANNELS and
values do not, so keys are grouped per channel (a group = ``group`` consecutive tokens of one
channel) and values per token (a group = ``group`` consecutive channels of one token).
INT4 codes are packed two to a byte, so the stored bytes are the real footprint.

Mixed precision (the remedy of SEEDS.md): tokens marked ``protect`` (attention sinks, the recent
window, heavy hitters by accumulated attention as H2O, Zhang et al. 2023) keep their full-precision
values; they are also left out of their group's min/max so they do not widen its scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Quantized:
    """Codes (uint8; two INT4 codes per byte) and per-group scale / zero point of one tensor."""

    codes: Tensor
    scale: Tensor  # [..., groups, 1] in the source dtype
    zero: Tensor
    bits: int
    shape: tuple[int, ...]  # grouped shape [..., groups, group] before packing

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scale, self.zero))


def mode_bits(mode: str) -> int | None:
    """Code width of a compression mode name ("int8", "mixed-int4", ...); None for an unquantized mode."""
    return 8 if mode.endswith("int8") else 4 if mode.endswith("int4") else None


def check_mixed_fields(owner: str, sink_tokens: int, recent_tokens: int, heavy_fraction: float) -> None:
    """The mixed-precision settings KVCompression and StoreConfig share: windows >= 0, heavy share in [0, 1)."""
    for name, value in (("sink_tokens", sink_tokens), ("recent_tokens", recent_tokens)):
        if value < 0:
            raise ValueError(f"{owner}.{name}: must be >= 0, got {value}")
    if not 0.0 <= heavy_fraction < 1.0:
        raise ValueError(f"{owner}.heavy_fraction: must be in [0, 1), got {heavy_fraction}")


def _check_bits(bits: int) -> None:
    if bits not in (4, 8):
        raise ValueError(f"bits: must be 4 or 8, got {bits}")


def pack4(codes: Tensor) -> Tensor:
    """uint8 codes in [0, 15], even count along the flattened tensor -> half as many bytes (low nibble first)."""
    flat = codes.reshape(-1)
    if flat.numel() % 2:
        flat = torch.cat([flat, flat.new_zeros(1)])
    return flat[0::2] | (flat[1::2] << 4)


def unpack4(packed: Tensor, numel: int) -> Tensor:
    both = torch.stack([packed & 0x0F, packed >> 4], dim=-1)  # [n, 2]: low nibble first
    return both.reshape(-1)[:numel]


def row_range(x: Tensor, ignore: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(min, max) of each row of x's last dim, keepdim; elements marked ``ignore`` are left out, and a
    row with every element ignored gets (0, 0). Shared by quantize_groups and the compressed store."""
    if ignore is None:
        return x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    big = torch.finfo(x.dtype).max
    lo = torch.where(ignore, big, x).amin(-1, keepdim=True)
    hi = torch.where(ignore, -big, x).amax(-1, keepdim=True)
    all_ignored = ignore.all(-1, keepdim=True)
    return torch.where(all_ignored, 0.0, lo), torch.where(all_ignored, 0.0, hi)


def quantize_groups(x: Tensor, bits: int, ignore: Tensor | None = None) -> Quantized:
    """x [..., groups, group]: one (scale, zero) per row of the last dim.

    ``ignore`` (bool, same shape) marks elements left out of the min/max (they are protected and
    stored elsewhere); their codes are clamped but never used.
    """
    _check_bits(bits)
    levels = 2**bits - 1
    lo, hi = row_range(x, ignore)
    scale = (hi - lo) / levels
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant group: every code is 0
    codes = torch.round((x - lo) / safe).clamp_(0, levels).to(torch.uint8)
    packed = pack4(codes) if bits == 4 else codes
    return Quantized(packed, scale, lo, bits, tuple(x.shape))


def dequantize(q: Quantized) -> Tensor:
    numel = 1
    for n in q.shape:
        numel *= n
    codes = unpack4(q.codes, numel) if q.bits == 4 else q.codes.reshape(-1)
    return codes.view(q.shape).to(q.scale.dtype) * q.scale + q.zero


def quantize_keys(k: Tensor, bits: int, protect: Tensor | None = None) -> tuple[Tensor, Quantized]:
    """k [G, H, D] (one group of G tokens) per channel -> (dequantized k [G, H, D], stored form).

    protect [G] bool: those tokens keep their exact values.
    """
    grouped = k.permute(1, 2, 0)  # [H, D, G]: one group per (head, channel), over the G tokens
    ignore = None if protect is None else protect.view(1, 1, -1).expand_as(grouped)
    q = quantize_groups(grouped, bits, ignore)
    out = dequantize(q).permute(2, 0, 1)  # [G, H, D]
    if protect is not None:
        out = torch.where(protect.view(-1, 1, 1), k, out)
    return out, q


def quantize_values(v: Tensor, bits: int, group: int, protect: Tensor | None = None) -> tuple[Tensor, Quantized]:
    """v [T, H, D] per token, in groups of ``group`` channels -> (dequantized v [T, H, D], stored form)."""
    t, h, d = v.shape
    if d % group:
        raise ValueError(f"group: head_dim {d} is not a multiple of the value group {group}")
    grouped = v.reshape(t, h, d // group, group)  # [T, H, D/g, g]
    q = quantize_groups(grouped, bits)
    out = dequantize(q).reshape(t, h, d)
    if protect is not None:
        out = torch.where(protect.view(-1, 1, 1), v, out)
    return out, q


def bytes_per_token(kv_heads: int, head_dim: int, layers: int, bits: int | None, key_group: int,
                    value_group: int, meta_bytes: int, fp_bytes: int, protected_fraction: float = 0.0) -> float:
    """Stored bytes per token of K and V over all layers (the asymptotic figure of a long context).

    bits None: full precision.  Keys: b/8 bytes per element + (scale, zero) per key_group tokens of a
    channel; values: b/8 + (scale, zero) per value_group channels of a token; protected tokens add
    their full-precision copy.
    """
    elems = kv_heads * head_dim * layers  # per token, for K and again for V
    if bits is None:
        return 2 * elems * fp_bytes
    key = elems * (bits / 8 + 2 * meta_bytes / key_group)
    value = elems * (bits / 8 + 2 * meta_bytes / value_group)
    return key + value + protected_fraction * 2 * elems * fp_bytes
