"""A sequence's KV as chunked pages spread over device, host and SSD, paged in before each layer's attention.

Policy (the tiered-cache path of SEEDS.md):
- pages of the attention sinks (the first ``sink_tokens``) and of the recent window (the last
  ``window_tokens``) are pinned on the device;
- when the device pool is full the least recently used unpinned page moves to the host tier, and
  when the host is full its LRU page moves to the SSD tier (SSD only after host is full);
- full attention needs every chunk of a layer at once, so ``gather`` pages the layer's chunks in
  and concatenates them; while that layer computes, the next layer's pages are fetched ahead on a
  background thread (a side CUDA stream inside it on GPU), so paging overlaps compute.
Pages move bit for bit, so attention over them (tripath/engine/tiered/batch_attention.py) is bit-identical
to the untiered cache.  Under full attention and LRU a context larger than the device pool re-reads
every unpinned page each step: paging cost is linear in the KV that does not fit (SEEDS.md: ~3 ms
per extra 2K tokens on its hardware).

Prefix pages (EngineConfig.prefix_caching; the block accounting is tripath/engine/tiered/store.py's
TieredPrefixAccounting): a full prompt chunk registered under its chained hash as prefix block b is keyed
``(shared_owner(b), layer, chunk)`` instead of ``(seq, layer, chunk)``, and each sequence maps its chunk
indices to the blocks it holds by reference (tripath/engine/tiered/prefix_links.py). Such pages outlive the
sequences that read them: unreferenced, they are ordinary LRU pages (demoted device -> host -> SSD like any
other, never pinned), and they leave every tier only when the index evicts their block (``drop_block``).
A hit maps the block's pages into the new sequence (``attach``); they are paged back in from wherever they
sit when its attention needs them, and never written again (only full prompt chunks are shared, and a hit
always computes the last prompt token).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import Tensor

from tripath.engine.model.config import ModelConfig
from tripath.engine.tiered.faults import DeviceFull, PageCorrupt, PageMissing, PageStale, PageUnreadable, TierFault
from tripath.engine.tiered.prefix_links import TIERS, PageKey, PrefixLinks, shared_owner
from tripath.engine.tiered.tier_config import TierConfig
from tripath.engine.tiered.tiers import Tiers


@dataclass
class PageState:
    tier: str  # "device" | "host" | "ssd"
    slot: int  # device slot, host slot or SSD page id
    pending: Future | None = None  # a prefetch still copying into the device slot
    source: tuple[str, int] | None = None  # where the pending copy reads from (released once it lands)


class TieredKVCache:
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
        self.prefix = PrefixLinks(self.num_layers)  # who reads which prefix block (see the module docstring)

    # ---- policy -------------------------------------------------------------------------------
    def pinned(self, key: PageKey) -> bool:
        """A sink or window page of its sequence; a prefix page when it is one for a sequence linking it (an
        unreferenced cached page is never pinned)."""
        owner, layer, chunk = key
        if owner < 0:
            return any(self._pins(seq, layer, chunk) for seq in self.prefix.readers(owner))
        return self._pins(owner, layer, chunk)

    def _pins(self, seq: int, layer: int, chunk: int) -> bool:
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

    def _layer_keys(self, seq: int, layer: int) -> list[PageKey]:
        return [self.prefix.key(seq, layer, c) for c in range(self._num_chunks(seq, layer))]

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
            key = self.prefix.key(seq, layer, chunk)
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
        keys = self._layer_keys(seq, layer)
        self._busy.update(keys)
        try:
            for key in keys:
                state = self._hit_to_device(seq, key) if key[0] < 0 else self._to_device(key)
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
        """Drop every page of seq from every tier (after it finishes or fails); the prefix pages it holds by
        reference stay (TieredKVCache.unlink)."""
        for key in [k for k in self.pages if k[0] == seq]:
            self._drop_page(key)
        self.unlink(seq)
        self.lengths.pop(seq, None)

    def _drop_page(self, key: PageKey) -> None:
        """Remove one page from its tier (waiting for a copy in flight first) and free its slot."""
        state = self.pages.pop(key)
        if state.pending is not None:
            try:
                state.pending.result()
            except BaseException:  # noqa: BLE001 - the page is being dropped anyway
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

    def residency(self, prefix_only: bool = False) -> dict[str, int]:
        """How many pages sit in each tier now (``prefix_only``: only prefix pages, live or cached)."""
        counts = dict.fromkeys(TIERS, 0)
        for key, state in self.pages.items():
            if not prefix_only or key[0] < 0:
                counts[state.tier] += 1
        return counts

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.tiers.close()

    # ---- moves between tiers ------------------------------------------------------------------
    @staticmethod
    def _clock() -> tuple[float, float]:
        """(wall, this thread's CPU time): the start of a timed transfer."""
        return time.perf_counter(), time.thread_time()

    def _time(self, link: str, nbytes: int, start: tuple[float, float]) -> None:
        self.tiers.stats.add(link, nbytes, time.perf_counter() - start[0], time.thread_time() - start[1])

    def _evict_host(self) -> None:
        key = self._victim(self.host_lru, device=False)
        if key is None and self._land_from_host():
            return  # a prefetch landed and gave its host slot back
        if key is None:
            raise TierFault("host tier: every page is in use")
        state = self.pages[key]
        page_id = self.tiers.ssd.write(self.tiers.host_pool.data[state.slot])  # raises before any change
        self.tiers.host_pool.release(state.slot)
        del self.host_lru[key]
        self.pages[key] = PageState("ssd", page_id)

    def _land_from_host(self) -> bool:
        """Finish a prefetch whose source is a host slot (every host page is one); True if a slot came free."""
        for key, state in list(self.pages.items()):
            if state.pending is not None and state.source is not None and state.source[0] == "host":
                free_before = self.tiers.host_pool.num_free
                try:
                    self._land(key, state)
                except TierFault:
                    pass  # the page stays on the host; the fault resurfaces when its owner reads it
                return self.tiers.host_pool.num_free > free_before
        return False

    def free_slots(self) -> int:
        """Page slots free in all tiers together: a move down the tiers needs one."""
        ssd = self.tiers.ssd
        return self.tiers.device_pool.num_free + self.tiers.host_pool.num_free + ssd.capacity - len(ssd.live)

    def _land_a_prefetch(self) -> PageKey | None:
        """Finish the oldest evictable prefetch (fetched ahead for a later step) so its page can move."""
        for key, state in list(self.pages.items()):
            if state.pending is not None and key not in self._busy and not self.pinned(key):
                try:
                    self._land(key, state)
                except TierFault:
                    return None  # the slot is free again; the fault resurfaces when its owner reads it
                return key
        return None

    def _evict_device(self, for_prefetch: bool = False) -> None:
        key = self._victim(self.device_lru, device=True)
        if key is None and for_prefetch:  # never undo one fetch-ahead to make room for another
            raise DeviceFull("device pool: no page to evict for a fetch-ahead")
        if key is None:
            free_before = self.tiers.device_pool.num_free
            key = self._land_a_prefetch()
            if self.tiers.device_pool.num_free > free_before:
                return
        if key is None:
            raise DeviceFull(
                f"device pool: all {self.tiers.device_pool.capacity} pages are pinned or in use "
                f"(sinks + window of live sequences and one layer's context must fit)"
            )
        state, tiers = self.pages[key], self.tiers
        if tiers.host_pool.capacity == 0:  # no host tier: straight to SSD
            page_id = tiers.ssd.write(tiers.device_pool.data[state.slot].cpu())
            new = PageState("ssd", page_id)
        else:
            if tiers.host_pool.num_free == 0:
                self._evict_host()
            start = self._clock()  # after the host eviction, which is timed as host->ssd
            slot = tiers.host_pool.allocate()
            tiers.host_pool.data[slot].copy_(tiers.device_pool.data[state.slot])
            self._time("device->host", tiers.page_bytes, start)
            self.host_lru[key] = None
            new = PageState("host", slot)
        tiers.device_pool.release(state.slot)
        del self.device_lru[key]
        self.pages[key] = new

    def _device_slot(self, for_prefetch: bool = False) -> int:
        if self.tiers.device_pool.num_free == 0:
            if not for_prefetch and self.free_slots() == 0:
                self._land_any_prefetch()
            self._evict_device(for_prefetch)
        return self.tiers.device_pool.allocate()

    def _land_any_prefetch(self) -> None:
        """Finish the oldest fetch-ahead, giving its source slot back. The accounting keeps one page slot spare
        for the chain of evictions a move down starts, but a copy in flight holds two (its device slot and its
        source): with every slot of every tier taken (a full cache of prefix pages), the spare is that source."""
        for key, state in list(self.pages.items()):
            if state.pending is not None:
                try:
                    self._land(key, state)
                except TierFault:
                    pass  # its device slot is free again; the fault resurfaces when its owner reads it
                return

    def _copy_in(self, dst: int, source: tuple[str, int]) -> None:
        """Copy a host or SSD page into device slot dst (runs on the main or the prefetch thread)."""
        tier, slot = source
        if tier == "host":
            page = self.tiers.host_pool.data[slot]
        else:  # ssd->host, timed inside read; into this thread's reused buffer (warm in the CPU cache)
            page = self.tiers.ssd.read(slot, out=self._staging_page())
        start = self._clock()
        if self._stream is not None:
            with torch.cuda.stream(self._stream):
                self.tiers.device_pool.data[dst].copy_(page, non_blocking=True)
            self._stream.synchronize()
        else:
            self.tiers.device_pool.data[dst].copy_(page)
        self._time("host->device", self.tiers.page_bytes, start)

    def _staging_page(self) -> Tensor:
        page = getattr(self._staging, "page", None)
        if page is None:  # pinned on CUDA: the host->device copy from it can run on the side stream
            page = torch.empty(self.tiers.page_shape, dtype=self.tiers.dtype, pin_memory=self.device.type == "cuda")
            self._staging.page = page
        return page

    def _release_source(self, source: tuple[str, int], key: PageKey) -> None:
        tier, slot = source
        if tier == "host":
            self.tiers.host_pool.release(slot)
            self.host_lru.pop(key, None)
        else:
            self.tiers.ssd.delete(slot)

    def _land(self, key: PageKey, state: PageState) -> None:
        """Wait for a prefetch into the device slot; on a fault the page stays where it was."""
        future, source = state.pending, state.source
        assert future is not None and source is not None
        try:
            future.result()
        except BaseException:
            self.tiers.device_pool.release(state.slot)
            self.device_lru.pop(key, None)
            self.pages[key] = PageState(*source)
            raise
        state.pending = state.source = None
        self._release_source(source, key)

    def _to_device(self, key: PageKey) -> PageState:
        state = self.pages[key]
        if state.tier == "device":
            if state.pending is not None:
                self._land(key, state)
        else:
            slot = self._device_slot()  # may push this very page from host to SSD: re-read its state
            state = self.pages[key]
            source = (state.tier, state.slot)
            try:
                self._copy_in(slot, source)
            except BaseException:
                self.tiers.device_pool.release(slot)
                raise
            self._release_source(source, key)
            state = self.pages[key] = PageState("device", slot)
        self.device_lru[key] = None
        self.device_lru.move_to_end(key)
        return state

    def _prefetch(self, seq: int, layer: int) -> None:
        """Start copying the layer's off-device pages into device slots on the background thread."""
        if self._executor is None:
            return
        keys = self._layer_keys(seq, layer)
        self._busy.update(keys)  # the pages the next layer needs must not be evicted to make room
        if self._stream is not None:
            # a reused device slot may still be read by kernels queued on the compute stream
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            for key in keys:
                state = self.pages.get(key)
                if state is None:
                    continue  # a prefix page its failed writer never stored: the read reports it
                if key[0] < 0:
                    self._note_hit(seq, key)
                if state.tier == "device":
                    continue
                if self.free_slots() < 2:
                    return  # a pending copy holds two slots; keep one free for on-demand moves
                try:
                    slot = self._device_slot(for_prefetch=True)
                except TierFault:
                    return  # no room to fetch ahead: the page is fetched on demand instead
                state = self.pages[key]  # the eviction may have moved it from host to SSD
                source = (state.tier, state.slot)
                future = self._executor.submit(self._copy_in, slot, source)
                self.pages[key] = PageState("device", slot, future, source)
                self.device_lru[key] = None
        finally:
            self._busy.difference_update(keys)

    # ---- prefix pages (TieredPrefixAccounting drives these) ------------------------------------------
    def attach(self, seq: int, blocks: list[int]) -> None:
        """A new sequence takes these prefix blocks by reference as its leading chunks (a hit): it starts with
        their tokens cached in every layer; their pages come in when its attention asks for them."""
        if seq in self.lengths:
            raise ValueError(f"sequence {seq}: already has pages; a hit attaches only to a new sequence")
        self.prefix.attach(seq, blocks)
        self.lengths[seq] = [len(blocks) * self.chunk] * self.num_layers

    def share(self, seq: int, chunk: int, block: int) -> None:
        """seq's chunk (a full prompt chunk, scheduled) became prefix block ``block``: its pages, those written
        already and those the step will write, are the block's from now on."""
        self.prefix.share(seq, chunk, block)
        self.lengths.setdefault(seq, [0] * self.num_layers)
        owner = shared_owner(block)
        renamed = {(seq, layer, chunk): (owner, layer, chunk) for layer in range(self.num_layers)
                   if (seq, layer, chunk) in self.pages}
        for old, new in renamed.items():
            self.pages[new] = self.pages.pop(old)
        for lru in (self.device_lru, self.host_lru):  # same recency, new names
            if any(old in lru for old in renamed):
                order = [renamed.get(key, key) for key in lru]
                lru.clear()
                lru.update(dict.fromkeys(order))

    def unlink(self, seq: int) -> None:
        """seq no longer reads its prefix blocks (finished, preempted or failed). A block it linked that lacks a
        layer's page (its writer failed mid-step) is marked broken: no later request may hit it."""
        for chunk, block in self.prefix.unlink(seq):
            owner = shared_owner(block)
            if any((owner, layer, chunk) not in self.pages for layer in range(self.num_layers)):
                self.prefix.broken.add(block)

    def drop_block(self, block: int) -> None:
        """The index evicted this prefix block: its pages leave every tier."""
        chunk = self.prefix.evict(block)
        if chunk is None:
            return
        owner = shared_owner(block)
        for layer in range(self.num_layers):
            if (owner, layer, chunk) in self.pages:
                self._drop_page((owner, layer, chunk))

    def _note_hit(self, seq: int, key: PageKey) -> None:
        """Count where a hit page sits the first time its hitting sequence asks for it (a copy already in
        flight counts from the tier it is read from)."""
        if not self.prefix.first_read(seq, key):
            return
        state = self.pages[key]
        tier = state.source[0] if state.pending is not None and state.source is not None else state.tier
        self.prefix.hit_loads[tier] += 1

    def _hit_to_device(self, seq: int, key: PageKey) -> PageState:
        """_to_device for a prefix page: a missing one (its writer failed before storing it) or one whose stored
        copy is missing, corrupt, stale or unreadable fails this request, and the block is marked broken for later
        lookups."""
        block = shared_owner(key[0])
        if key not in self.pages:
            self.prefix.broken.add(block)
            raise TierFault(f"prefix block {block}: no page for layer {key[1]} (the request computing it failed)")
        self._note_hit(seq, key)
        try:
            return self._to_device(key)
        except (PageMissing, PageCorrupt, PageStale, PageUnreadable):  # its own copy is bad (a full tier is not)
            self.prefix.broken.add(block)
            raise
