"""Prefix caching in the simulator: a block-hash cache per replica, what a hit saves, and where blocks sit.

Each replica's KV budget is ``capacity // block_tokens`` blocks, kept by tripath/core/prefix.py's
PrefixBlockIndex (the engine's allocator policy, so both hit the same blocks on the same requests). A request's
full prompt blocks are hashed blocks in the index; the rest of what it reserves (its partial last block and its
output, reserved at admission as the loop does with preemption "none") is held as its own unhashed blocks,
ceil(tokens / block_tokens) of them, as paged KV keeps each sequence's partial block. Cached blocks no request
references stay in the
index's LRU until an allocation needs their room: prefix blocks and running requests compete for one budget.

Admission (``plan`` then ``commit``): the leading cached blocks of the prompt, at most (prompt - 1) //
block_tokens of them (the last prompt token is always computed), are hits; the prefill starts after them, so
the suffix is priced as a chunk over the cached context (the profile's prefill-with-context cost, the one
chunked prefill uses). A request that does not fit waits, as one without the cache does.

With the tiered path the index spans the device, host and SSD tokens the tiered path admits against.
Referenced blocks are live and on the device; cached unreferenced blocks fill the room live KV leaves on the
device, then host, then SSD, most recently released first, so an evicted prefix goes to host, then SSD, then
is dropped. A hit on blocks off the device either loads them (device_host, and host_ssd before it for SSD
blocks, the profile's paging cost, stalling the admission iteration) or recomputes them (a longer suffix
prefill), whichever the cost models price lower; each choice is counted.

Routing (``route``): "least_loaded" is the cluster's rule; "affinity" sends a request to the replica holding
the longest cached prefix of it, among those with at most ``affinity_slack`` more outstanding requests than
the least loaded (ties: fewer outstanding, then the lower index), as cache-aware routers (llm-d, Dynamo) do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tripath.core.prefix import PrefixBlockIndex, chain_hashes, max_hit_blocks
from tripath.simulator.scenario.prefix_workload import RequestPrefixes
from tripath.simulator.scenario.strategy import DEVICE_HOST, HOST_SSD, PrefixCacheSpec

TIERS = ("device", "host", "ssd")


@dataclass
class PrefixCounters:
    """One replica's (or, summed, a run's) prefix-cache counts."""

    requests: int = 0  # admitted with the cache consulted
    queried_blocks: int = 0  # prompt blocks that could have hit (at most (prompt - 1) // block_tokens each)
    hit_blocks: int = 0  # of those, served from the cache (on the device, or loaded back)
    prompt_tokens: int = 0  # prompt tokens of the admitted requests
    saved_tokens: int = 0  # prompt tokens not prefilled thanks to hits
    hit_blocks_per_tier: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    loads: int = 0  # admissions that loaded off-device blocks back
    recomputes: int = 0  # admissions that recomputed off-device blocks (cheaper than loading them)
    recomputed_blocks: int = 0
    loaded_bytes: dict[str, int] = field(default_factory=lambda: {DEVICE_HOST: 0, HOST_SSD: 0})
    load_s: float = 0.0
    evictions: int = 0  # cached blocks dropped from the index (all tiers full)

    def add(self, other: PrefixCounters) -> None:
        for name in ("requests", "queried_blocks", "hit_blocks", "prompt_tokens", "saved_tokens", "loads",
                     "recomputes", "recomputed_blocks", "load_s", "evictions"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for tier in TIERS:
            self.hit_blocks_per_tier[tier] += other.hit_blocks_per_tier[tier]
        for link in self.loaded_bytes:
            self.loaded_bytes[link] += other.loaded_bytes[link]


@dataclass(frozen=True)
class PrefixRun:
    """What a replication's prefix caches did: summed counters and each request's cached prompt tokens."""

    block_tokens: int
    routing: str
    counters: PrefixCounters
    cached_tokens: dict[int, int]  # request index -> prompt tokens served from the cache at admission
    source: str = ""  # where the block keys came from (RequestPrefixes.source)
    note: str | None = None  # set when the workload has no prefix structure


@dataclass(frozen=True)
class PrefixSetup:
    """The run's prefix caching: the spec and each request's chained block hashes (request order)."""

    spec: PrefixCacheSpec
    hashes: tuple[tuple[int, ...], ...]
    prefixes: RequestPrefixes
    # blocks become findable once scheduled, as in the engine (tripath/engine/kv/prefix_cache.py): a policy that
    # prefills whole prompts schedules them all at admission; chunked prefill, chunk by chunk
    register_on_admission: bool = True

    @classmethod
    def build(cls, spec: PrefixCacheSpec, prefixes: RequestPrefixes, register_on_admission: bool = True
              ) -> PrefixSetup:
        return cls(spec, tuple(tuple(chain_hashes(keys)) for keys in prefixes.keys), prefixes, register_on_admission)


@dataclass
class _Plan:
    hits: int  # leading cached blocks acquired
    start_tokens: int  # prompt tokens already on the device (the prefill starts here)
    new_blocks: int  # hashed blocks to allocate
    private_blocks: int  # unhashed blocks for the rest of its reservation
    private: int  # the request's tokens outside its hashed blocks
    tiers: list[str]  # tier of each hit block
    load: bool  # off-device hits loaded (True) or recomputed (False)
    load_s: float
    load_bytes: dict[str, int]


class _Fenwick:
    """Counts over release stamps 1..n: how many cached unreferenced blocks were released after a given one."""

    def __init__(self, n: int) -> None:
        self.tree = [0] * (n + 1)
        self.total = 0

    def add(self, i: int, delta: int) -> None:
        self.total += delta
        while i < len(self.tree):
            self.tree[i] += delta
            i += i & -i

    def upto(self, i: int) -> int:
        s = 0
        while i > 0:
            s += self.tree[i]
            i -= i & -i
        return s


class PrefixCache:
    """One replica's prefix cache over its KV budget (see the module docstring)."""

    def __init__(self, setup: PrefixSetup, capacity_tokens: int, kv_bytes_per_token: int,
                 work_ms: Callable[[int, int], float], tiers: Any = None) -> None:
        self.bt = setup.spec.block_tokens
        self.hashes = setup.hashes
        self.register_on_admission = setup.register_on_admission
        self.index = PrefixBlockIndex(max(1, capacity_tokens // self.bt), on_evict=self._evicted)
        self.bytes_per_block = self.bt * kv_bytes_per_token
        self.work_ms = work_ms
        self.tiers = tiers  # TierPhysics or None (device only)
        self.counters = PrefixCounters()
        self.cached_tokens: dict[int, int] = {}
        self.held: dict[int, list[int]] = {}  # request -> its hashed blocks, prefix order
        self.own: dict[int, list[int]] = {}  # request -> its unhashed blocks (partial last block, output)
        self.pending: dict[int, list[tuple[int, int, int]]] = {}  # request -> (block, hash, end token) to register
        self.pending_load_s = 0.0
        self.pending_bytes: dict[str, int] = {}
        self._stamp: dict[int, int] = {}  # cached unreferenced block -> release stamp (tiers only)
        self._clock = 0
        self._order = _Fenwick(sum(len(h) for h in setup.hashes) + 1) if tiers is not None else None

    # ---- queries -----------------------------------------------------------------------------------

    def match_blocks(self, request: int, prompt: int) -> int:
        """Leading blocks of the request's prompt this replica holds (routing; no side effect)."""
        hashes = self.hashes[request]
        return self.index.match(hashes[: max_hit_blocks(prompt, self.bt)])

    def blocks_needed(self, prompt: int, output: int) -> int:
        """Blocks a request reserves with nothing cached: its full prompt blocks plus ceil(rest / block_tokens)."""
        return -(-(prompt + output) // self.bt)

    def occupied_tokens(self) -> int:
        """KV tokens in referenced blocks (hashed and private): the replica's live KV, shared blocks once."""
        return (self.index.num_blocks - self.index.num_free) * self.bt

    # ---- admission ---------------------------------------------------------------------------------

    def plan(self, request: int, prompt: int, need: int) -> _Plan | None:
        """What admitting the request would take, or None when it does not fit (nothing changes)."""
        index, bt = self.index, self.bt
        hashes = self.hashes[request]
        eligible = hashes[: max_hit_blocks(prompt, bt)]
        hits = index.match(eligible)
        blocks = [index.block_of(h) for h in eligible[:hits]]
        lru_hits = sum(1 for b in blocks if b is not None and index.refcount[b] == 0)
        private = need - bt * len(hashes)
        private_blocks = -(-private // bt)  # a sequence's partial block is its own, as in paged KV
        new_blocks = len(hashes) - hits
        if new_blocks + private_blocks > index.num_free - lru_hits:
            return None
        tiers = self._tiers(blocks)
        first_off = next((i for i, t in enumerate(tiers) if t != "device"), hits)
        load, load_s, load_bytes = True, 0.0, {}
        if first_off < hits:
            load_s, load_bytes = self._load_cost(tiers[first_off:])
            recompute_ms = (self.work_ms(prompt - first_off * bt, first_off * bt)
                            - self.work_ms(prompt - hits * bt, hits * bt))
            load = load_s * 1000.0 <= recompute_ms
        start = (hits if load else first_off) * bt
        return _Plan(hits, start, new_blocks, private_blocks, private, tiers, load, load_s if load else 0.0,
                     load_bytes if load else {})

    def commit(self, request: int, prompt: int, plan: _Plan) -> int:
        """Admit as planned; returns the prompt tokens already cached (where the prefill starts)."""
        index, bt = self.index, self.bt
        hashes = self.hashes[request]
        eligible = hashes[: max_hit_blocks(prompt, bt)]
        hit_blocks = index.acquire(eligible)
        assert len(hit_blocks) == plan.hits
        if self._order is not None:
            for block in hit_blocks:
                stamp = self._stamp.pop(block, None)
                if stamp is not None:
                    self._order.add(stamp, -1)
        held = list(hit_blocks)
        pending = []
        for j in range(plan.hits, len(hashes)):
            block = index.allocate()
            held.append(block)
            pending.append((block, hashes[j], (j + 1) * bt))
        self.held[request] = held
        self.own[request] = [index.allocate() for _ in range(plan.private_blocks)]
        self.pending[request] = pending
        c = self.counters
        c.requests += 1
        c.queried_blocks += len(eligible)
        c.prompt_tokens += prompt
        used = plan.start_tokens // bt
        c.hit_blocks += used
        c.saved_tokens += plan.start_tokens
        for tier in plan.tiers[:used]:
            c.hit_blocks_per_tier[tier] += 1
        off = sum(1 for t in plan.tiers if t != "device")
        if off:
            if plan.load:
                c.loads += 1
                c.load_s += plan.load_s
                self.pending_load_s += plan.load_s
                for link, nbytes in plan.load_bytes.items():
                    c.loaded_bytes[link] += nbytes
                    self.pending_bytes[link] = self.pending_bytes.get(link, 0) + nbytes
            else:
                c.recomputes += 1
                c.recomputed_blocks += plan.hits - used
        self.cached_tokens[request] = plan.start_tokens
        if self.register_on_admission:
            self.scheduled(request, prompt)
        return plan.start_tokens

    def take_load(self) -> tuple[float, dict[str, int]]:
        """Seconds and bytes per link of the prefix loads the admissions since the last call asked for."""
        out = self.pending_load_s, self.pending_bytes
        self.pending_load_s, self.pending_bytes = 0.0, {}
        return out

    def scheduled(self, request: int, tokens: int) -> None:
        """The request's prompt is scheduled up to ``tokens``: its full blocks so far become findable (their K/V
        are written in the iteration's forward before anything reads them)."""
        pending = self.pending.get(request)
        while pending and pending[0][2] <= tokens:
            block, block_hash, _ = pending.pop(0)
            self.index.register(block, block_hash)  # False: another copy is cached; this one frees on release

    def finish(self, request: int) -> None:
        """The request is done: its blocks are released (cached ones to the LRU, the rest freed)."""
        blocks = self.held.pop(request)
        self.pending.pop(request, None)
        self.index.release(blocks)
        if self._order is not None:
            for block in reversed(blocks):  # the index's own release order
                if self.index.refcount[block] == 0 and self.index.hash_of(block) is not None:
                    self._clock += 1
                    self._stamp[block] = self._clock
                    self._order.add(self._clock, 1)
        self.index.release(self.own.pop(request))

    # ---- tiers -------------------------------------------------------------------------------------

    def _evicted(self, block_hash: int, block: int) -> None:
        self.counters.evictions += 1
        if self._order is not None:
            stamp = self._stamp.pop(block, None)
            if stamp is not None:
                self._order.add(stamp, -1)

    def _tiers(self, blocks: Sequence[int | None]) -> list[str]:
        """The tier of each hit block: referenced ones are live on the device; unreferenced ones by recency."""
        if self.tiers is None or self._order is None:
            return ["device"] * len(blocks)
        live = self.occupied_tokens()
        device_room = max(0, self.tiers.device_tokens - live) // self.bt
        host_room = max(0, self.tiers.host_tokens - max(0, live - self.tiers.device_tokens)) // self.bt
        out = []
        for block in blocks:
            stamp = self._stamp.get(block) if block is not None else None
            if stamp is None:
                out.append("device")
                continue
            newer = self._order.total - self._order.upto(stamp)  # released after it
            out.append("device" if newer < device_room else "host" if newer < device_room + host_room else "ssd")
        return out

    def _load_cost(self, tiers: Sequence[str]) -> tuple[float, dict[str, int]]:
        """Seconds and bytes per link to bring these blocks to the device (SSD blocks are staged via host)."""
        off = sum(1 for t in tiers if t != "device")
        ssd = sum(1 for t in tiers if t == "ssd")
        moved = {DEVICE_HOST: off * self.bytes_per_block, HOST_SSD: ssd * self.bytes_per_block}
        ms = sum(self.tiers.link_ms(link, nbytes) for link, nbytes in moved.items())
        return ms / 1000.0, {link: nbytes for link, nbytes in moved.items() if nbytes > 0}


def route(caches: Sequence[PrefixCache], outstanding: Sequence[int], request: int, prompt: int,
          spec: PrefixCacheSpec) -> int:
    """The replica index a request goes to (see the module docstring)."""
    least = min(range(len(outstanding)), key=lambda i: (outstanding[i], i))
    if spec.routing == "least_loaded" or len(caches) == 1:
        return least
    limit = outstanding[least] + spec.affinity_slack
    best, best_key = least, (0, 0, 0)
    for i, cache in enumerate(caches):
        if outstanding[i] > limit:
            continue
        key = (cache.match_blocks(request, prompt), -outstanding[i], -i)
        if key > best_key:
            best, best_key = i, key
    return best if best_key[0] > 0 else least
