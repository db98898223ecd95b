"""What the engine's tiered cache does in one step, priced from the profile: the read and the page moves.

Used by TierPhysics where the real engine's rules apply (profile source "measured", or
[strategy.tiered] device_residency = true); seed and published profiles keep TierPhysics.iteration.
Measured on the engine (docs/tiered_kv.md, "What the engine does per step"):

1. **Every step reads every page.** TieredBatchAttention pages in each scheduled sequence's whole layer
   and copies it into a zeroed buffer, every layer, every step, whether or not anything is off the
   device; the paged engine (whose timings the profile's decode and prefill costs are) reads the same
   context with one vectorized gather. The difference is the profile's ``paging.gather``, fitted per
   (sequence, layer) read against that layer's context bytes (tripath/calibrate/sweeps/gather.py):

       read_ms = sum over sequences read of  layers x gather(n_i x bytes_per_token / layers)

   n_i = tokens the sequence holds after the step's append (a decode's context; a prefill chunk's
   cached + new tokens); a first prompt chunk reads nothing from the cache (attention over its own
   K/V). A profile without ``paging.gather`` books no read overhead.
2. **LRU under a cyclic scan.** Pages are per (sequence, layer, chunk); a sequence of n tokens has
   c(n) = ceil(n / chunk) chunks per layer, of which pinned(n) (the chunks holding a sink token or a
   token of the recent window, TieredKVCache.pinned) never leave the device. Each step reads the
   layers in order, so when the step's pages P = layers x sum c(n_i) exceed the device pool G, LRU
   always evicts the page read longest ago, which is the next one needed: every unpinned page read
   misses, m = layers x sum over sequences read of (c(n_i) − pinned(n_i)), each a page in and a
   page out. While P <= G nothing moves (the pages stay after the first step).
3. **Which links.** Off the device sit O = P − G pages. With a host tier of H pages and O < H every
   miss is device->host + host->device. Once O >= H the host is full and its LRU page, the next one
   needed, goes on to SSD before each eviction, so every miss also crosses host->ssd and ssd->host.
   With H = 0 the device evicts straight to SSD (no device->host copy).
4. **Cost of a move** is per page, as the engine moves them: each direction's paging_v1 at the page's
   bytes (chunk x bytes_per_token / layers), from the profile's per-direction fits ("device->host",
   ...) where present, else its simulator link (device_host, host_ssd) for both directions, at the
   scenario's chunk size. The paging sweep times cold pages (tripath/calibrate/sweeps/paging.py), as the engine
   moves them. No overlap: on a CPU the fetch-ahead thread competes with the model for the same cores.
5. **Measured misses replace the link copies** where the profile has them: ``paging.miss_{kind}``
   (tripath/calibrate/sweeps/tier_miss.py) times tiered Engine decode steps that miss a known number of pages
   against the same steps with every page resident, wall clock, one fit per set of links a miss
   crosses (kind ``host``: device<->host; ``ssd``: all four links, the host full; ``direct``: no host).
   A step's moves then cost miss_{kind}(m x page bytes) = setup_ms + m x page bytes / bandwidth (one
   setup per step that misses, none otherwise): the copies, the files, the eviction chain and the main
   thread's wait on the fetch-ahead thread, which the bare copies of rule 4 leave out (they under-price
   a missing step several times over: docs/tiered_kv.md, "Page misses measured on the Engine"). The sweep
   runs at the main page size (256 tokens); at another chunk size the fit is evaluated at that size's
   bytes, so a per-page cost that does not scale with bytes is carried as if it did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tripath.profile.sections import MISS_KINDS, PagingLink, miss_key
from tripath.simulator.scenario.strategy import DEVICE_HOST, HOST_SSD

GATHER = "gather"  # tripath/calibrate/sweeps/gather.py's profile key
DIRECTIONS = {"device->host": DEVICE_HOST, "host->device": DEVICE_HOST, "host->ssd": HOST_SSD,
              "ssd->host": HOST_SSD}


class EngineTierRule:
    """the engine's per-step tier work for one replica: read overhead and page moves, in ms, from the profile's
    ``paging`` fits (``paging``: link or direction -> PagingLink)."""

    def __init__(self, paging: Mapping[str, PagingLink], chunk: int, layers: int, bytes_per_token: int,
                 device_pages: int, host_pages: int, sink_tokens: int, window_tokens: int, ranks: int = 1) -> None:
        self.chunk, self.layers, self.ranks = chunk, layers, ranks
        self.bytes_per_token = bytes_per_token
        self.device_pages, self.host_pages = device_pages, host_pages
        self.sink, self.window = sink_tokens, window_tokens
        self.page_bytes = chunk * bytes_per_token / layers  # one layer's K and V of one chunk
        self.gather = paging[GATHER].cost_for(chunk) if GATHER in paging else None
        self.page_ms = {d: paging[d if d in paging else link].cost_for(chunk).evaluate(bytes=self.page_bytes)
                        for d, link in DIRECTIONS.items() if d in paging or link in paging}
        self.miss = {kind: paging[miss_key(kind)].cost_for(chunk) for kind in MISS_KINDS if miss_key(kind) in paging}

    def pinned(self, n: int) -> int:
        """Chunks of one layer that hold a sink token or a window token (the engine's TieredKVCache.pinned)."""
        chunks = -(-n // self.chunk)
        return sum(1 for j in range(chunks)
                   if j * self.chunk < self.sink or (j + 1) * self.chunk > n - self.window)

    def read_ms(self, reads: Sequence[int]) -> float:
        """The tiered read's extra over the paged engine's for sequences holding ``reads`` tokens."""
        if self.gather is None:
            return 0.0
        per_token = self.bytes_per_token / self.layers
        return sum(self.layers * self.gather.evaluate(bytes=-(-n // self.ranks) * per_token) for n in reads if n > 0)

    def misses(self, reads: Sequence[int], held: Sequence[int]) -> tuple[int, int]:
        """(pages missed per step, pages off the device) for sequences read and all sequences held."""
        per_rank = [-(-n // self.ranks) for n in held]
        pages = self.layers * sum(-(-n // self.chunk) for n in per_rank)
        off = pages - self.device_pages
        if off <= 0:
            return 0, 0
        read = [-(-n // self.ranks) for n in reads]
        return self.layers * sum(-(-n // self.chunk) - self.pinned(n) for n in read if n > 0), off

    def moves(self, missed: int, off: int) -> dict[str, int]:
        """Pages per direction for ``missed`` misses with ``off`` pages off the device (module docstring, 3)."""
        if missed <= 0:
            return {}
        if self.host_pages == 0:
            return {"host->ssd": missed, "ssd->host": missed, "host->device": missed}
        out = {"device->host": missed, "host->device": missed}
        if off >= self.host_pages:
            out.update({"host->ssd": missed, "ssd->host": missed})
        return out

    def miss_kind(self, off: int) -> str:
        """Which links a miss crosses with ``off`` pages off the device (rule 3)."""
        if self.host_pages == 0:
            return "direct"
        return "ssd" if off >= self.host_pages else "host"

    def step_ms(self, reads: Sequence[int], held: Sequence[int]) -> tuple[float, float, dict[str, int]]:
        """(read ms, move ms, bytes per simulator link) of one step; ranks move their shards in parallel."""
        missed, off = self.misses(reads, held)
        pages = self.moves(missed, off)
        # a direction the profile lacks moves only where the scenario has no such tier (check_against_profile
        # requires host_ssd for an SSD tier): such a step would fault on the engine, it is not priced here
        move_ms = sum(count * self.page_ms.get(d, 0.0) for d, count in pages.items())
        kind = self.miss_kind(off)
        if missed > 0 and kind in self.miss:  # rule 5: the Engine's own step, measured
            move_ms = self.miss[kind].evaluate(bytes=missed * self.page_bytes)
        moved: dict[str, int] = {}
        for d, count in pages.items():  # the replica's bytes (every rank's shard)
            moved[DIRECTIONS[d]] = moved.get(DIRECTIONS[d], 0) + round(count * self.ranks * self.page_bytes)
        return self.read_ms(reads), move_ms, moved
