"""The tiered KV cache in the simulator: where live KV sits (device, host, SSD) and what paging costs.

Placement (tokens): the device holds D = device_kv_tokens; live KV beyond D goes to host up to
H tokens, and only then to SSD (up to S tokens). Each sequence's attention sinks and its newest
chunk stay resident (the engine evicts least recently used middle chunks), so what a step pages is
the *amount* of non-resident KV it reads, which this model tracks; which chunk it is does not
change the bytes.

The device evicts and the host returns whole chunks (pages of chunk_tokens tokens), so the KV off
the device when L tokens are live is O(L) = min(L, ceil(max(0, L - D) / chunk) * chunk): a page
moves once per chunk_tokens tokens written, not once per token. Of O(L), host takes up to H and
SSD the rest: O_host = min(O, H), O_ssd = O - O_host. Per iteration, with L live tokens at its
start and N tokens read by its sequences (decode contexts + earlier chunks of prompts):

    paged in   n_in  = min(O(L), ceil(O(L) * N / L / chunk) * chunk)    (the read share, whole chunks)
               n_ssd = round(n_in * O_ssd(L) / O(L)),  n_host = n_in - n_ssd
    paged out  n_out = O(L + W) - O(L)  for the W tokens written (prefill chunks, emitted tokens);
               of which n_out_ssd = O_ssd(L + W) - O_ssd(L) go on to SSD
    bytes      device_host = (n_in + n_out) * b,   host_ssd = (n_ssd + n_out_ssd) * b
    time       t = link_ms(device_host) + link_ms(host_ssd)   (SSD pages are staged through host)
    stall      max(0, t - overlap * compute)

This aggregate model is what seed and published profiles get. Where the engine's rules apply (the
residency rule below), ``engine_step`` replaces ``iteration``: the engine reads every page of every
sequence each step and LRU misses every unpinned page once a step's pages exceed the pool
(tripath/simulator/paths/tiered_engine_rule.py), which the validation measured and this model missed.

b is kv_bytes_per_token (after compression: fewer bytes, less paging). link_ms is the profile's
paging_v1 for the link, setup_ms + bytes / bandwidth, one coalesced transfer per link per
iteration, fitted at the scenario's chunk size where the profile has per-chunk fits; a link with
nothing to move costs nothing. Both directions share the link's figure and are summed (a
conservative bound: PCIe is full duplex). overlap is the share of compute time that hides paging;
the profiles carry no measured figure for it yet, so it is 0 (every paging second stalls).

With sequence parallelism of degree P each rank holds 1/P of every sequence's KV and pages its
own shard over its own host link, in parallel: t is evaluated at bytes / P per rank (every rank
pays the setup once), while the bytes recorded are the replica's total.

Device residency (admission): the engine (tripath/engine/tiered/store.py) keeps every live
sequence's attention sinks and recent window on the device, and pages one layer's whole context in
at once for full attention. Its device pool is counted in pages of chunk_tokens tokens of ONE layer,
G = floor(D / chunk) x layers pages, and live sequences of lengths n_i fit only while

    pinned(n)  = min(ceil(n / chunk), ceil(sink / chunk) + ceil(window / chunk) + 1)
                 (the window can straddle one more chunk boundary)
    needed     = layers x sum_i pinned(n_i) + max_i (ceil(n_i / chunk) - pinned(n_i))  <=  G

(TieredStore.device_pages_needed). The rule is the engine's, so it applies by default where the
profile was measured on the engine (profile source "measured"); seed and published profiles describe
other engines whose residency rule is not known, and keep admitting against device + host + SSD
tokens ([strategy.tiered] device_residency = true/false says it outright). Where it applies, the
simulator admits (and keeps) a sequence only while the rule holds, with n_i the tokens each live
sequence has reserved; with a small device pool that is what serialises long sequences. Its
device pool is whole pages, so placement then takes D = floor(D / chunk) x chunk: a sequence pages
once it outgrows the pool's whole chunks, not the byte budget. With SP
each rank holds 1/P of every sequence, so n_i is taken per rank (ceil(n_i / P)) against the
rank's own pool D.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tripath.profile.engine_rules import follows_tripath_engine
from tripath.profile.profile import Profile
from tripath.profile.sections import PagingLink
from tripath.simulator.paths.tiered_engine_rule import EngineTierRule
from tripath.simulator.scenario.strategy import DEVICE_HOST, GIB, HOST_SSD, TieredSpec


@dataclass(frozen=True)
class TierTables:
    """What the tiered path reads from the profile: the hardware's host and SSD bytes (where the scenario gives
    no capacity), the paging fits, the model's layers, and whether it was measured on the engine."""

    host_memory_bytes: int
    ssd_bytes: int
    paging: Mapping[str, PagingLink]
    layers: int
    engine_rule: bool  # tripath/profile/engine_rules.py: the engine's residency rule applies by default

    @classmethod
    def from_profile(cls, profile: Profile) -> TierTables:
        return cls(profile.hardware.host_memory_bytes, profile.hardware.ssd_bytes, profile.paging,
                   int(profile.model.layers), follows_tripath_engine(profile))


class TierPhysics:
    """KV placement over three tiers and the paging cost of one iteration, for one replica."""

    def __init__(self, spec: TieredSpec, tables: TierTables, kv_bytes_per_token: int, device_tokens: int,
                 ranks: int = 1, overlap: float = 0.0) -> None:
        host = tables.host_memory_bytes if spec.host_capacity_gib is None else spec.host_capacity_gib * GIB
        ssd = tables.ssd_bytes if spec.ssd_capacity_gib is None else spec.ssd_capacity_gib * GIB
        paging = tables.paging
        self.bytes_per_token = kv_bytes_per_token
        self.device_tokens = device_tokens
        self.host_tokens = int(host) // kv_bytes_per_token
        self.ssd_tokens = int(ssd) // kv_bytes_per_token if HOST_SSD in paging else 0
        self.chunk = spec.chunk_tokens
        self.ranks = ranks
        self.overlap = overlap
        self._links = {name: paging[name].cost_for(spec.chunk_tokens) for name in (DEVICE_HOST, HOST_SSD)
                       if name in paging}
        self.live = 0
        self.layers = tables.layers
        self.sink_tokens = spec.sink_tokens
        self.window_tokens = spec.window_tokens
        self.device_pages = (device_tokens // spec.chunk_tokens) * self.layers
        residency = spec.device_residency
        self.residency = tables.engine_rule if residency is None else residency
        self.rule: EngineTierRule | None = None
        if self.residency:  # the engine's pool holds whole pages: D rounds down to whole chunks
            self.device_tokens = (device_tokens // self.chunk) * self.chunk
            # its per-step read and page moves (tiered_engine_rule.py); each SP rank has 1/P of the pools
            host_pages = (self.host_tokens // self.chunk) * self.layers
            self.rule = EngineTierRule(paging, self.chunk, self.layers, kv_bytes_per_token, self.device_pages // ranks,
                                       host_pages // ranks, spec.sink_tokens, spec.window_tokens, ranks)

    def pinned_chunks(self, tokens: int) -> int:
        """One layer's chunks of a ``tokens``-long sequence the engine keeps on the device."""
        chunk = self.chunk
        bound = -(-self.sink_tokens // chunk) + -(-self.window_tokens // chunk) + 1
        return min(-(-tokens // chunk), bound)

    def device_pages_needed(self, lengths: list[int]) -> int:
        """Device pages the engine needs for live sequences of these lengths (module docstring)."""
        if not lengths:
            return 0
        per_rank = [-(-n // self.ranks) for n in lengths]
        pinned = [self.pinned_chunks(n) for n in per_rank]
        working = max(-(-n // self.chunk) - p for n, p in zip(per_rank, pinned, strict=True))
        return sum(pinned) * self.layers + working

    def device_fits(self, lengths: list[int]) -> bool:
        """Whether live sequences of these lengths fit the engine's device residency rule. A single
        sequence always does: the router already checked it against the capacity, and refusing it
        would stall the replica forever."""
        return not self.residency or len(lengths) <= 1 or self.device_pages_needed(lengths) <= self.device_pages

    @property
    def capacity_tokens(self) -> int:
        """Tokens that may be admitted: device + host + SSD."""
        return self.device_tokens + self.host_tokens + self.ssd_tokens

    def placement(self, live: int) -> tuple[int, int, int]:
        """(device, host, ssd) tokens when ``live`` tokens are held: whole chunks off the device,
        SSD only after host is full."""
        over = max(0, live - self.device_tokens)
        off = min(live, -(-over // self.chunk) * self.chunk)
        host = min(off, self.host_tokens)
        return live - off, host, off - host

    def link_ms(self, link: str, nbytes: int) -> float:
        """One coalesced transfer per rank of its 1/P share; nothing to move costs nothing."""
        if nbytes <= 0:
            return 0.0
        return self._links[link].evaluate(bytes=nbytes / self.ranks)

    def iteration(self, live: int, read: int, written: int) -> tuple[float, dict[str, int]]:
        """Paging seconds (before overlap) and bytes per link of one iteration."""
        _, host0, ssd0 = self.placement(live)
        off = host0 + ssd0
        n_in = n_ssd = 0
        if off > 0 and read > 0:
            share = off * min(read, live) / live
            n_in = min(off, math.ceil(share / self.chunk) * self.chunk)
            n_ssd = round(n_in * ssd0 / off)
        self.live = live + written
        _, host1, ssd1 = self.placement(self.live)
        n_out = max(0, host1 + ssd1 - off)
        n_out_ssd = max(0, ssd1 - ssd0)
        b = self.bytes_per_token
        moved = {DEVICE_HOST: (n_in + n_out) * b, HOST_SSD: (n_ssd + n_out_ssd) * b}
        ms = sum(self.link_ms(link, nbytes) for link, nbytes in moved.items())
        return ms / 1000.0, {link: nbytes for link, nbytes in moved.items() if nbytes > 0}

    def engine_step(self, reads: list[int], held: list[int], live: int) -> tuple[float, dict[str, int]]:
        """the engine's tier work of one step (tiered_engine_rule.py): paging seconds (the tiered read's extra
        plus page moves, before overlap) and bytes per link; ``reads``/``held``: tokens of each sequence read
        / holding pages after the step's appends; ``live``: tokens held after the step."""
        read_s, move_s, moved = self.engine_step_split(reads, held, live)
        return read_s + move_s, moved

    def engine_step_split(self, reads: list[int], held: list[int], live: int) -> tuple[float, float, dict[str, int]]:
        """``engine_step`` with its two parts apart: (the tiered read's extra over the paged read, s; the page
        moves, s; bytes per link). The step loop books the read as the step's attention compute and only the
        moves as paging, the part comparable with the engine's own paging stall beyond a step that moves
        nothing (tripath/fidelity/tier_paging.py)."""
        assert self.rule is not None, "engine_step applies the real engine's rule (residency on)"
        read_ms, move_ms, moved = self.rule.step_ms(reads, held)
        self.live = live
        return read_ms / 1000.0, move_ms / 1000.0, moved

    def stall_s(self, paging_s: float, compute_s: float) -> float:
        """Paging the engine cannot hide behind compute."""
        return max(0.0, paging_s - self.overlap * compute_s)

    def tier_bytes(self) -> dict[str, int]:
        device, host, ssd = self.placement(self.live)
        b = self.bytes_per_token
        return {"device": device * b, "host": host * b, "ssd": ssd * b}
