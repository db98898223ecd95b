"""A sequence's KV as chunked pages spread over device, host and SSD, paged in before each layer's attention.

Policy (the tiered-cache path of SEEDS.md):
- pages of the attention sinks (the first ``sink_tokens``) and of the recent window (the last
  ``window_tokens``) are pinned on the device;
- when the device pool is full the least recently used unpinned page moves to the host tier, and
  when the host is full its LRU page moves to the SSD tier (SSD only after host is full);
- full attention needs every chunk of a layer at once, so ``gather`` pages the layer's chunks in
  and concatenates them; while that layer computes, the next layer's pages are fetched ahead on a
  background thread (a side CUDA stream inside it on GPU), so paging overlaps compute.
Pages move bit for bit, so attention over them (tripath/engine/tiered/attention.py) is bit-identical
to the untiered cache.  Under full attention and LRU a context larger than the device pool re-reads
every unpinned page each step: paging cost is linear in the KV that does not fit (SEEDS.md: ~3 ms
per extra 2K tokens on its hardware).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from tripath.engine.model.config import ModelConfig
from tripath.engine.tiered.page_mover import PageKey, PageMover, PageState
from tripath.engine.tiered.tiers import TierConfig, Tiers


class TieredKVCache(PageMover):
    """Pages of live sequences over one set of Tiers, with LRU eviction and per-layer prefetch."""

    def __init__(self, model_config: ModelConfig, tier_config: TierConfig, dtype: torch.dtype,
                 device: torch.device | str, sink_tokens: int = 4, window_tokens: int = 256,
                 prefetch: bool = True) -> None:
        if sink_tokens < 0 or window_tokens < 0:
            raise ValueError(f"sink_tokens/window_tokens: must be >= 0, got {sink_tokens}/{window_tokens}")
        self.device = torch.device(device)
        self.chunk = tier_config.chunk_tokens
        self.num_layers = model_config.num_layers
        page_shape = (2, self.chunk, model_config.num_kv_heads, int(model_config.head_dim))
        self.tiers = Tiers(tier_config, page_shape, dtype, self.device)
        self.sink_tokens, self.window_tokens = sink_tokens, window_tokens
        self.pages: dict[PageKey, PageState] = {}
        self.device_lru: OrderedDict[PageKey, None] = OrderedDict()
        self.host_lru: OrderedDict[PageKey, None] = OrderedDict()
        self.lengths: dict[int, list[int]] = {}  # tokens stored per layer
        self._busy: set[PageKey] = set()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="kv-prefetch") if prefetch else None
        self._stream = torch.cuda.Stream(self.device) if prefetch and self.device.type == "cuda" else None
        self.stall_s = 0.0  # main-thread time spent paging or waiting for a prefetch
        self._staging = threading.local()  # per thread: the host buffer SSD pages are read into

    # ---- policy -------------------------------------------------------------------------------
    def pinned(self, key: PageKey) -> bool:
        seq, layer, chunk = key
        length = self.lengths[seq][layer]
        first, last = chunk * self.chunk, (chunk + 1) * self.chunk  # tokens [first, last)
        return first < self.sink_tokens or last > length - self.window_tokens

    def _victim(self, lru: OrderedDict[PageKey, None], device: bool) -> PageKey | None:
        for key in lru:  # oldest first
            if self.pages[key].pending is not None:
                continue  # its host slot is the source of an in-flight copy
            # busy pages must stay on the device; a busy page on the host may still move down to
            # the SSD (it is read back from there), since _to_device reads the state after evicting
            if device and (key in self._busy or self.pinned(key)):
                continue
            return key
        return None

    # ---- the sequence API ---------------------------------------------------------------------
    def _num_chunks(self, seq: int, layer: int) -> int:
        return -(-self.lengths[seq][layer] // self.chunk)

    def append(self, seq: int, layer: int, k: Tensor, v: Tensor) -> None:
        """Store k, v [T, Hkv, D] after the layer's cached tokens."""
        lengths = self.lengths.setdefault(seq, [0] * self.num_layers)
        start = time.perf_counter()
        first = pos = lengths[layer]
        end = first + k.shape[0]
        lengths[layer] = end
        while pos < end:
            chunk, off = divmod(pos, self.chunk)
            n = min(self.chunk - off, end - pos)
            key = (seq, layer, chunk)
            self._busy.add(key)
            if key in self.pages:
                state = self._to_device(key)
            else:
                state = self.pages[key] = PageState("device", self._device_slot())
                self.device_lru[key] = None
            page = self.tiers.device_pool.data[state.slot]  # [2, chunk, Hkv, D]
            src = pos - first  # index of token pos within k
            page[0, off : off + n] = k[src : src + n]
            page[1, off : off + n] = v[src : src + n]
            pos += n
        self._busy.clear()
        self.stall_s += time.perf_counter() - start

    def length(self, seq: int, layer: int) -> int:
        """Tokens of seq cached in this layer (0 for a sequence the cache has not seen)."""
        lengths = self.lengths.get(seq)
        return lengths[layer] if lengths else 0

    def gather(self, seq: int, layer: int) -> tuple[Tensor, Tensor]:
        """The layer's whole cached K and V, each [L, Hkv, D] contiguous on the device."""
        both = torch.empty((2, self.lengths[seq][layer], *self.tiers.page_shape[2:]), dtype=self.tiers.dtype,
                           device=self.device)  # [2, L, Hkv, D]
        self.gather_into(seq, layer, both)
        return both[0], both[1]

    def gather_into(self, seq: int, layer: int, out: Tensor, prefetch_next: bool = True) -> None:
        """Page the layer's chunks in and copy its K and V into out [2, L, Hkv, D] (a view the caller lays
        out, e.g. one row of a padded decode batch); then fetch the next layer ahead, unless the caller
        does that itself (a batch fetches ahead once every sequence's layer is in: prefetch())."""
        start = time.perf_counter()
        length = self.lengths[seq][layer]
        keys = [(seq, layer, c) for c in range(self._num_chunks(seq, layer))]
        self._busy.update(keys)
        try:
            for key in keys:
                state = self._to_device(key)
                first = key[2] * self.chunk
                valid = min(self.chunk, length - first)
                out[:, first : first + valid] = self.tiers.device_pool.data[state.slot][:, :valid]
        finally:
            self._busy.difference_update(keys)
        self.stall_s += time.perf_counter() - start
        if prefetch_next:
            self._prefetch(seq, (layer + 1) % self.num_layers)

    def prefetch(self, seq: int, layer: int) -> None:
        """Start fetching seq's pages of this layer ahead, as far as the device pool has room without
        undoing other fetch-aheads (no-op without the background thread)."""
        start = time.perf_counter()
        self._prefetch(seq, layer)
        self.stall_s += time.perf_counter() - start

    def free(self, seq: int) -> None:
        """Drop every page of seq from every tier (after it finishes or fails)."""
        for key in [k for k in self.pages if k[0] == seq]:
            state = self.pages.pop(key)
            if state.pending is not None:
                try:
                    state.pending.result()
                except BaseException:  # noqa: BLE001 - the request is being dropped anyway
                    pass
                assert state.source is not None
                self._release_source(state.source, key)
            if state.tier == "device":
                self.tiers.device_pool.release(state.slot)
                self.device_lru.pop(key, None)
            elif state.tier == "host":
                self.tiers.host_pool.release(state.slot)
                self.host_lru.pop(key, None)
            else:
                self.tiers.ssd.delete(state.slot)
        self.lengths.pop(seq, None)

    def residency(self) -> dict[str, int]:
        """How many pages sit in each tier now."""
        counts = {"device": 0, "host": 0, "ssd": 0}
        for state in self.pages.values():
            counts[state.tier] += 1
        return counts

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.tiers.close()
