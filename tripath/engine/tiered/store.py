"""The continuous-batching Engine's KV back end when tiering is on (tripath/engine/kv/backend.py): a
TieredKVCache, the block accounting the Scheduler admits and preempts against, and per-step paging counters.

The Scheduler only asks a KVCacheManager ``can_reserve`` / ``reserve`` / ``free``.  Here its blocks are
the tiered cache's chunks (block_size = chunk_tokens), and there are as many as one layer's share of
all three tiers (device + host + SSD pages less one spare, divided by the layers), so a reservation that
succeeds can never run the tiers out of pages: the SSD tier's quota is never what fails (fetch-ahead
stops before it would take the spare page: TieredKVCache.free_slots).  One more limit applies on
the device: every live sequence keeps its sinks and recent window there, and one sequence's whole layer
context must be paged in at once for full attention.  ``can_reserve`` refuses (and the Scheduler then
preempts by recompute, or queues) when the device could not hold that, so a device pool that is too
small shows up as waiting, not as a fault.  ``free`` (finish and preemption alike) drops the sequence's
pages from every tier.

With prefix caching (TieredPrefixAccounting) the chunks are a PrefixBlockIndex's blocks over the same budget,
the policy the plain pool (tripath/engine/kv/prefix_cache.py) and the simulator run: a registered full prompt
chunk's pages in every layer become the block's (TieredKVCache.share), a release leaves them cached (they page
down the tiers by the cache's LRU), a hit maps them into the new sequence (TieredKVCache.attach) and an index
eviction drops them from every tier (TieredKVCache.drop_block).  A cached block holds at most one page per
layer, so the index's budget is the same per-layer share of all three tiers.
"""

from __future__ import annotations

import shutil
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from tripath.engine.kv.paged import KVCacheManager
from tripath.engine.kv.paged_attention import SequenceChunk
from tripath.engine.kv.prefix_cache import PrefixCachingKVManager
from tripath.engine.model.config import ModelConfig
from tripath.engine.tiered.batch_attention import TieredBatchAttention
from tripath.engine.tiered.cache import TieredKVCache
from tripath.engine.tiered.tier_config import TierConfig

LINKS = ("device->host", "host->device", "host->ssd", "ssd->host")


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class PagingSnapshot:
    """Cumulative per-link bytes and seconds and the main thread's paging stall, at one moment."""

    bytes: tuple[int, ...]  # in LINKS order
    seconds: tuple[float, ...]
    stall_s: float

    def minus(self, before: PagingSnapshot) -> PagingSnapshot:
        return PagingSnapshot(
            tuple(a - b for a, b in zip(self.bytes, before.bytes, strict=True)),
            tuple(a - b for a, b in zip(self.seconds, before.seconds, strict=True)),
            self.stall_s - before.stall_s,
        )


class TieredAccounting(KVCacheManager):
    """KVCacheManager over chunks of the tiered cache, with the device-pool admission limit."""

    def __init__(self, store: TieredStore, num_blocks: int, chunk_tokens: int) -> None:
        super().__init__(num_blocks, chunk_tokens)
        self.store = store

    def can_reserve(self, seq_id: int, num_tokens: int) -> bool:
        if not super().can_reserve(seq_id, num_tokens):
            return False
        sizes = {sid: t.num_tokens for sid, t in self.tables.items()}
        sizes[seq_id] = max(sizes.get(seq_id, 0), num_tokens)
        return self.store.device_pages_needed(list(sizes.values())) <= self.store.config.device_pages

    def check_request(self, kv_tokens: int) -> str | None:
        return self.store.check_request(kv_tokens)

    def free(self, seq_id: int) -> None:
        super().free(seq_id)
        self.store.cache.free(seq_id)


class TieredPrefixAccounting(TieredAccounting, PrefixCachingKVManager):
    """TieredAccounting whose chunks are PrefixCachingKVManager's blocks (prefix caching over the tiers).

    Counters as the plain pool's: ``prefix_stats``, ``hit_tokens``, ``cached_tokens``; ``prefix_page_loads``
    says where the hit pages came from. A block whose pages cannot be trusted (a failed writer, a fault
    reading it: PrefixLinks.broken) ends every later lookup before it, until the index evicts it."""

    def __init__(self, store: TieredStore, num_blocks: int, chunk_tokens: int) -> None:
        super().__init__(store, num_blocks, chunk_tokens)
        self.index.on_evict = lambda _hash, block: store.cache.drop_block(block)

    def _acquired(self, seq_id: int, blocks: list[int]) -> None:
        self.store.cache.attach(seq_id, blocks)

    def _registered(self, seq_id: int, position: int, block: int) -> None:
        self.store.cache.share(seq_id, position, block)

    def _lookup_hashes(self, seq_id: int) -> list[int]:
        hashes = super()._lookup_hashes(seq_id)
        broken = self.store.cache.prefix.broken
        for i, h in enumerate(hashes if broken else ()):
            if self.index.block_of(h) in broken:
                return hashes[:i]
        return hashes

    @property
    def prefix_page_loads(self) -> dict[str, int]:
        """Hit pages by the tier each sat in when its hitting request first needed it ("device": no load;
        "host": one host->device copy; "ssd": an SSD read staged through the host, then host->device)."""
        return dict(self.store.cache.prefix.hit_loads)

    def drop_cached(self) -> int:
        """Evict every unreferenced cached block (its pages leave every tier); returns how many. Counted as
        evictions in prefix_stats."""
        before = self.index.stats.evictions
        taken = [self.index.allocate() for _ in range(self.index.num_free)]
        self.index.release(taken)
        return self.index.stats.evictions - before


class TieredStore:
    """A TieredKVCache for one Engine, its accounting, and per-step paging counters; block_size is the
    Engine's (the padding of the batched decode buffer, as the paged pool's block multiple); with
    prefix_caching the accounting is TieredPrefixAccounting (prefix blocks of chunk_tokens tokens)."""

    def __init__(self, model_config: ModelConfig, tier_config: TierConfig, dtype: torch.dtype,
                 device: torch.device, block_size: int, prefix_caching: bool = False) -> None:
        self.config = tier_config
        self.num_layers = model_config.num_layers
        self.device, self.block_size, self.group = device, block_size, model_config.kv_group_size
        self.cache = TieredKVCache(model_config, tier_config, dtype, device, tier_config.sink_tokens,
                                   tier_config.window_tokens, tier_config.prefetch)
        total_pages = tier_config.device_pages + tier_config.host_pages + tier_config.ssd_pages
        # per layer (a chunk needs a page in every layer), less one page: paging a page in when every tier
        # is full needs one free slot for the chain of evictions (device -> host -> SSD) it starts
        self.capacity_chunks = (total_pages - 1) // self.num_layers
        accounting = TieredPrefixAccounting if prefix_caching else TieredAccounting
        self.manager = accounting(self, max(self.capacity_chunks, 1), tier_config.chunk_tokens)
        self._mark = self.snapshot()
        # the SSD directory goes even if close() is never called (interpreter exit, garbage collection)
        self._finalizer = weakref.finalize(self, _remove_dir, self.cache.tiers.ssd)

    # ---- admission ----------------------------------------------------------------------------
    def pinned_chunks(self, tokens: int) -> int:
        """Upper bound of one layer's chunks pinned on the device for a sequence of this length: the
        sink chunks and the window's chunks (the window can straddle one more chunk boundary)."""
        chunk, total = self.config.chunk_tokens, _ceil(tokens, self.config.chunk_tokens)
        bound = _ceil(self.config.sink_tokens, chunk) + _ceil(self.config.window_tokens, chunk) + 1
        return min(total, bound)

    def device_pages_needed(self, lengths: list[int]) -> int:
        """Device pages for these live sequences: every layer's pinned chunks of each, plus the unpinned
        rest of the longest one layer's context (paged in together for full attention)."""
        if not lengths:
            return 0
        pinned = sum(self.pinned_chunks(n) for n in lengths) * self.num_layers
        working = max(_ceil(n, self.config.chunk_tokens) - self.pinned_chunks(n) for n in lengths)
        return pinned + working

    def check_request(self, total_tokens: int) -> str | None:
        """Why a sequence of total_tokens KV slots can never run on these tiers, or None."""
        chunks = _ceil(total_tokens, self.config.chunk_tokens)
        if chunks > self.capacity_chunks:
            return (f"needs {chunks * self.num_layers} KV pages of {self.config.chunk_tokens} tokens, the tiers "
                    f"hold {self.capacity_chunks * self.num_layers} (device + host + SSD)")
        need = self.device_pages_needed([total_tokens])
        if need > self.config.device_pages:
            return (f"needs {need} device pages (sinks and window of every layer plus one layer's context), "
                    f"the device pool holds {self.config.device_pages}")
        return None

    # ---- one step ----------------------------------------------------------------------------
    def prepare(self, copies: list[tuple[int, int]]) -> None:
        """Nothing to copy: no tiered sequence shares a partly filled block (prefix blocks are full)."""

    def attention(self, chunks: list[SequenceChunk], request_ids: list[int]) -> TieredBatchAttention:
        return TieredBatchAttention(self.cache, request_ids, [c.num_cached for c in chunks],
                                    [c.num_new for c in chunks], self.block_size, self.group, self.device)

    def faults(self, attention: TieredBatchAttention) -> dict[int, str]:
        """Requests a tier fault ended in this forward: they end, the rest of the batch goes on."""
        return attention.failed

    def step_fields(self) -> dict[str, Any]:
        """StepRecord's paging fields: what moved since the end of the previous step (fetch-ahead runs between)."""
        moved = self.since_last()
        fields: dict[str, Any] = {}
        for link, nbytes, seconds in zip(("device_host", "host_device", "host_ssd", "ssd_host"), moved.bytes,
                                         moved.seconds, strict=True):
            fields[f"paging_bytes_{link}"], fields[f"paging_s_{link}"] = nbytes, seconds
        fields["paging_stall_s"] = moved.stall_s
        return fields

    def kv_bytes(self) -> int:
        """The device pool's pages (host and SSD pages are not device memory)."""
        return self.cache.tiers.device_pool.data.untyped_storage().nbytes()

    # ---- counters -----------------------------------------------------------------------------
    def snapshot(self) -> PagingSnapshot:
        stats = self.cache.tiers.stats
        with stats.lock:
            links = [stats.get(link) for link in LINKS]
            return PagingSnapshot(tuple(s.bytes for s in links), tuple(s.seconds for s in links),
                                  self.cache.stall_s)

    def since_last(self) -> PagingSnapshot:
        """What moved since the previous call: a fetch-ahead that lands between two steps counts in the next."""
        now = self.snapshot()
        moved, self._mark = now.minus(self._mark), now
        return moved

    def close(self) -> None:
        """Stop the prefetch thread and remove the SSD tier's directory and page files."""
        self.cache.close()
        self._finalizer.detach()


def _remove_dir(ssd: object) -> None:
    directory = getattr(ssd, "directory", None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
