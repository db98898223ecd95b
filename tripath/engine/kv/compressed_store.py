"""A paged KV store that keeps only compressed KV resident: codes, per-group scales and zero points.

Blocks are the engine's (tripath/engine/kv/paged.py: same physical block ids and block tables).  A block
lives in one of two forms:

- **staged**: full precision, [layers, 2, block_size, Hkv, D], while it is being filled (the last
  block of a sequence) and, in mixed mode, while it holds attention sinks or lies in the recent
  window (KIVI's full-precision residual; StreamingLLM's sinks);
- **sealed**: quantized once complete (and, in mixed mode, once it has left the recent window):
  keys per channel over the block's tokens (a block is one KIVI key group), values per token in
  groups of ``value_group`` channels (tripath/engine/kv/quant.py's grouping), INT4 packed two per byte.
  In mixed mode each sealed block also keeps its ``heavy_per_block`` tokens with the largest
  accumulated attention (H2O scores, summed over heads and queries while the block was staged) in
  full precision, and leaves them out of the block's min/max so they do not widen its scales.

Nothing else is resident: attention (tripath/engine/kv/compressed_attention.py) dequantizes a chunk of
blocks at a time into a working buffer.  Scales and zero points are stored in ``meta_dtype`` (fp16
as KIVI) and rounded outward (zero down, scale up) before the codes are computed, so every element
still reconstructs within half a (stored) step.  Mode "fp" never seals: the same chunked attention
over full-precision blocks, the reference that isolates the cost of dequantization.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from tripath.engine.kv.quant import check_mixed_fields, mode_bits, row_range
from tripath.engine.model.config import ModelConfig

STORE_MODES = ("fp", "int8", "int4", "mixed-int8", "mixed-int4")


@dataclass(frozen=True)
class StoreConfig:
    mode: str = "int8"
    block_size: int = 16  # tokens per block = tokens per key group (per channel)
    value_group: int = 32  # channels per value group (per token); must divide head_dim
    sink_tokens: int = 4  # mixed: blocks holding positions < sink_tokens are never sealed
    recent_tokens: int = 64  # mixed: a block is sealed once it ends this many tokens behind the newest
    heavy_fraction: float = 0.05  # mixed: ceil(fraction * block_size) tokens per sealed block stay exact
    meta_dtype: torch.dtype = torch.float16
    chunk_tokens: int = 256  # attention's working buffer: tokens dequantized at a time

    def __post_init__(self) -> None:
        if self.mode not in STORE_MODES:
            raise ValueError(f"StoreConfig.mode: must be one of {STORE_MODES}, got {self.mode!r}")
        for name in ("block_size", "value_group", "chunk_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"StoreConfig.{name}: must be >= 1, got {getattr(self, name)}")
        if self.block_size % 2:
            raise ValueError(f"StoreConfig.block_size: must be even (INT4 packs token pairs), got {self.block_size}")
        if self.chunk_tokens % self.block_size:
            raise ValueError(f"StoreConfig.chunk_tokens: must be a multiple of block_size {self.block_size}")
        check_mixed_fields("StoreConfig", self.sink_tokens, self.recent_tokens, self.heavy_fraction)
        if not self.meta_dtype.is_floating_point:
            raise ValueError(f"StoreConfig.meta_dtype: must be a floating dtype, got {self.meta_dtype}")

    @property
    def bits(self) -> int | None:
        return mode_bits(self.mode)

    @property
    def mixed(self) -> bool:
        return self.mode.startswith("mixed")

    @property
    def heavy_per_block(self) -> int:
        return math.ceil(self.heavy_fraction * self.block_size) if self.mixed else 0


def _round_out(x: Tensor, dtype: torch.dtype, up: bool) -> Tensor:
    """x rounded to dtype, moved one ulp outward where rounding went the wrong way (in dtype)."""
    r = x.to(dtype)
    wrong = r.to(x.dtype) < x if up else r.to(x.dtype) > x
    return torch.where(wrong, torch.nextafter(r, torch.full_like(r, math.inf if up else -math.inf)), r)


def quantize_last(x: Tensor, bits: int, meta: torch.dtype, ignore: Tensor | None = None) -> tuple[Tensor, ...]:
    """Asymmetric quantization of each row of x's last dim: (codes uint8 unpacked, scale, zero) in meta dtype.

    Elements marked ``ignore`` are left out of the min/max (they are kept exactly elsewhere).
    """
    levels = 2**bits - 1
    lo, hi = row_range(x, ignore)
    zero = _round_out(lo.float(), meta, up=False)
    scale = _round_out((hi.float() - zero.float()) / levels, meta, up=True)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale)).float()  # a constant group: codes 0
    codes = torch.round((x.float() - zero.float()) / safe).clamp_(0, levels).to(torch.uint8)
    return codes, scale.squeeze(-1), zero.squeeze(-1)


def pack_pairs(codes: Tensor) -> Tensor:
    """uint8 codes in [0, 15] along an even last dim -> half as many bytes, low nibble first."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_pairs(packed: Tensor) -> Tensor:
    return torch.stack([packed & 0x0F, packed >> 4], dim=-1).flatten(-2)  # [..., 2n]: low nibble first


class CompressedKVStore:
    """Sealed blocks in preallocated code pools indexed by physical block id; staged blocks in a dict."""

    def __init__(self, model: ModelConfig, num_blocks: int, config: StoreConfig, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        d, hkv, layers = int(model.head_dim), model.num_kv_heads, model.num_layers
        if d % config.value_group:
            raise ValueError(f"StoreConfig.value_group: {config.value_group} does not divide head_dim {d}")
        self.config, self.dtype, self.device = config, dtype, torch.device(device)
        self.layers, self.kv_heads, self.head_dim, self.num_blocks = layers, hkv, d, num_blocks
        bs, bits, meta = config.block_size, config.bits, config.meta_dtype
        self.staged: dict[int, Tensor] = {}  # block -> [layers, 2, bs, Hkv, D] full precision
        self.scores: dict[int, Tensor] = {}  # mixed: block -> [layers, bs] attention received (H2O)
        self.pools: dict[str, Tensor] = {}
        if bits is None:
            return
        per_byte = 8 // bits
        u8 = dict(dtype=torch.uint8, device=self.device)
        m = dict(dtype=meta, device=self.device)
        self.pools = {
            "k_codes": torch.zeros(layers, num_blocks, hkv, d, bs // per_byte, **u8),  # per (head, channel)
            "k_scale": torch.zeros(layers, num_blocks, hkv, d, **m),
            "k_zero": torch.zeros(layers, num_blocks, hkv, d, **m),
            "v_codes": torch.zeros(layers, num_blocks, bs, hkv, d // per_byte, **u8),  # per token
            "v_scale": torch.zeros(layers, num_blocks, bs, hkv, d // config.value_group, **m),
            "v_zero": torch.zeros(layers, num_blocks, bs, hkv, d // config.value_group, **m),
        }
        p = config.heavy_per_block
        if p:
            self.pools["h_rows"] = torch.zeros(layers, num_blocks, p, 2, hkv, d, dtype=dtype, device=self.device)
            self.pools["h_offsets"] = torch.zeros(layers, num_blocks, p, dtype=torch.int16, device=self.device)

    # ---- lifecycle -------------------------------------------------------------------------------
    def open_block(self, block: int) -> None:
        """A block (re)starts at offset 0: fresh full-precision staging (whatever it held before)."""
        shape = (self.layers, 2, self.config.block_size, self.kv_heads, self.head_dim)
        self.staged[block] = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if self.config.mixed:
            self.scores[block] = torch.zeros(self.layers, self.config.block_size, device=self.device)

    def drop_free(self, refcount: list[int]) -> None:
        """Forget staging of blocks the block pool has freed (finished or preempted sequences)."""
        for block in [b for b in self.staged if refcount[b] == 0]:
            del self.staged[block]
            self.scores.pop(block, None)

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        """Copy-on-write pairs (src -> dst), as KVTensors.copy_blocks."""
        for src, dst in copies:
            if src in self.staged:
                self.staged[dst] = self.staged[src].clone()
                if src in self.scores:
                    self.scores[dst] = self.scores[src].clone()
            else:
                for pool in self.pools.values():
                    pool[:, dst] = pool[:, src]

    def write(self, layer: int, block: int, lo: int, k: Tensor, v: Tensor) -> None:
        """k/v [n, Hkv, D] at offsets lo..lo+n of a staged block."""
        st = self.staged[block]
        st[layer, 0, lo : lo + k.shape[0]] = k
        st[layer, 1, lo : lo + v.shape[0]] = v

    def sealable(self, index: int, length: int) -> bool:
        """May logical block ``index`` of a sequence of ``length`` tokens be quantized now?"""
        c, bs = self.config, self.config.block_size
        if c.bits is None or (index + 1) * bs > length:
            return False
        if c.mixed:
            return index * bs >= c.sink_tokens and (index + 1) * bs <= length - c.recent_tokens
        return True

    def seal(self, block: int) -> None:
        """Quantize a staged block (all layers) into the pools and drop its full-precision copy."""
        c, st = self.config, self.staged.pop(block)
        bits = c.bits
        assert bits is not None
        protect = None
        if c.heavy_per_block:
            offsets = self.scores.pop(block).topk(c.heavy_per_block, dim=-1).indices.sort(-1).values  # [layers, P]
            protect = torch.zeros(self.layers, c.block_size, dtype=torch.bool, device=self.device)
            protect.scatter_(1, offsets, True)
            rows = st.gather(2, offsets[:, None, :, None, None].expand(-1, 2, -1, self.kv_heads, self.head_dim))
            self.pools["h_rows"][:, block] = rows.transpose(1, 2)  # [layers, P, 2, Hkv, D]
            self.pools["h_offsets"][:, block] = offsets.to(torch.int16)
        keys = st[:, 0].permute(0, 2, 3, 1)  # [layers, Hkv, D, bs]: one group per (head, channel)
        ignore = None if protect is None else protect[:, None, None, :].expand_as(keys)
        codes, scale, zero = quantize_last(keys, bits, c.meta_dtype, ignore)
        self.pools["k_codes"][:, block] = pack_pairs(codes) if bits == 4 else codes
        self.pools["k_scale"][:, block], self.pools["k_zero"][:, block] = scale, zero
        values = st[:, 1].unflatten(-1, (-1, c.value_group))  # [layers, bs, Hkv, D/g, g]
        codes, scale, zero = quantize_last(values, bits, c.meta_dtype)
        codes = codes.flatten(-2)  # [layers, bs, Hkv, D]
        self.pools["v_codes"][:, block] = pack_pairs(codes) if bits == 4 else codes
        self.pools["v_scale"][:, block], self.pools["v_zero"][:, block] = scale, zero

    # ---- reading ---------------------------------------------------------------------------------
    def read(self, layer: int, blocks: list[int]) -> tuple[Tensor, Tensor]:
        """K, V of these blocks, [n * bs, Hkv, D] each in the compute dtype: the attention working buffer."""
        c, n = self.config, len(blocks)
        work = torch.float32 if self.dtype in (torch.float16, torch.bfloat16) else self.dtype
        if all(b in self.staged for b in blocks):
            both = torch.stack([self.staged[b][layer] for b in blocks], dim=1).to(work)  # [2, n, bs, Hkv, D]
            return both[0].flatten(0, 1), both[1].flatten(0, 1)
        idx = torch.tensor(blocks, dtype=torch.int64, device=self.device)
        p = self.pools
        kc = p["k_codes"][layer].index_select(0, idx)  # [n, Hkv, D, bs (/2)]
        kc = unpack_pairs(kc) if c.bits == 4 else kc
        k = kc.to(work) * p["k_scale"][layer, idx].to(work)[..., None] + p["k_zero"][layer, idx].to(work)[..., None]
        k = k.permute(0, 3, 1, 2)  # [n, bs, Hkv, D]
        vc = p["v_codes"][layer].index_select(0, idx)  # [n, bs, Hkv, D (/2)]
        vc = (unpack_pairs(vc) if c.bits == 4 else vc).unflatten(-1, (-1, c.value_group))  # [n, bs, Hkv, D/g, g]
        v = vc.to(work) * p["v_scale"][layer, idx].to(work)[..., None] + p["v_zero"][layer, idx].to(work)[..., None]
        v = v.flatten(-2)  # [n, bs, Hkv, D]
        if c.heavy_per_block:
            rows = p["h_rows"][layer, idx].to(work)  # [n, P, 2, Hkv, D]
            at = (torch.arange(n, device=self.device)[:, None], p["h_offsets"][layer, idx].long())
            k[at], v[at] = rows[:, :, 0], rows[:, :, 1]
        for i, b in enumerate(blocks):
            if b in self.staged:
                k[i], v[i] = self.staged[b][layer, 0].to(work), self.staged[b][layer, 1].to(work)
        return k.flatten(0, 1), v.flatten(0, 1)

    def add_scores(self, layer: int, block: int, received: Tensor) -> None:
        if block in self.scores:
            self.scores[block][layer] += received

    # ---- memory ----------------------------------------------------------------------------------
    def resident_bytes(self) -> dict[str, int]:
        """Actual tensor storage: KV (code pools, heavy rows, staged blocks) and H2O bookkeeping."""
        pools = sum(t.untyped_storage().nbytes() for t in self.pools.values())
        staged = sum(t.untyped_storage().nbytes() for t in self.staged.values())
        scores = sum(t.untyped_storage().nbytes() for t in self.scores.values())
        return {"pools": pools, "staged": staged, "kv": pools + staged, "scores": scores}

    # ---- rollback (speculative decoding) ---------------------------------------------------------
    def truncate(self, table: list[int], length: int) -> None:
        """Keep a sequence's first ``length`` tokens of ``table`` (its block table before the manager
        truncates): blocks past them lose their staging, the kept tail block's rows past them are
        zeroed (H2O scores too), so the store holds exactly the accepted prefix.

        Rejected tokens can only be rolled back while their block is staged: a sealed block's codes
        and scales mix its tokens, so a caller that may roll back must seal only blocks wholly inside
        the accepted prefix (tripath/engine/speculative/compressed.py seals after verification).
        """
        bs = self.config.block_size
        keep = -(-length // bs)
        for block in table[keep:]:
            self.staged.pop(block, None)
            self.scores.pop(block, None)
        if length % bs and keep:
            tail = table[keep - 1]
            if tail not in self.staged:
                raise RuntimeError(f"block {tail}: cannot roll back into a sealed block")
            self.staged[tail][:, :, length % bs :] = 0
            if tail in self.scores:
                self.scores[tail][:, length % bs :] = 0
