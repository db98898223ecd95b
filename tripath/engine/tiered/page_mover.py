"""Moving a TieredKVCache's pages between device, host and SSD: eviction down the tiers, paging in, prefetch.

A mixin of TieredKVCache (tripath/engine/tiered/cache.py), kept apart because the moves (and their
threading: a prefetch copies on a background thread) are one concern and the sequence API another.
The policy (which pages are pinned, LRU order) stays in cache.py; the moves call it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tripath.engine.tiered.tiers import DeviceFull, TierFault, Tiers

PageKey = tuple[int, int, int]  # (sequence id, layer, chunk index)


@dataclass
class PageState:
    tier: str  # "device" | "host" | "ssd"
    slot: int  # device slot, host slot or SSD page id
    pending: Future | None = None  # a prefetch still copying into the device slot
    source: tuple[str, int] | None = None  # where the pending copy reads from (released once it lands)


class PageMover:
    """TieredKVCache's page moves; the attributes and policy methods below are TieredKVCache's."""

    device: torch.device
    tiers: Tiers
    pages: dict[PageKey, PageState]
    device_lru: OrderedDict[PageKey, None]
    host_lru: OrderedDict[PageKey, None]
    _busy: set[PageKey]
    _executor: ThreadPoolExecutor | None
    _stream: torch.cuda.Stream | None
    _staging: threading.local

    if TYPE_CHECKING:  # defined by TieredKVCache (its policy and sequence API); declared for type checkers only
        def _victim(self, lru: OrderedDict[PageKey, None], device: bool) -> PageKey | None: ...
        def pinned(self, key: PageKey) -> bool: ...
        def _num_chunks(self, seq: int, layer: int) -> int: ...

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
            self._evict_device(for_prefetch)
        return self.tiers.device_pool.allocate()

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
        keys = [(seq, layer, c) for c in range(self._num_chunks(seq, layer))]
        self._busy.update(keys)  # the pages the next layer needs must not be evicted to make room
        if self._stream is not None:
            # a reused device slot may still be read by kernels queued on the compute stream
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            for key in keys:
                state = self.pages[key]
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
