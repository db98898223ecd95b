"""real_engine's tiered rule in the simulator (tripath/simulator/paths/tiered_engine_rule.py): the per-step read
overhead and
LRU page moves, by hand on one request, the link choice (host, SSD, no host), and the invariants."""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib

import pytest

from tests.helpers import SEED, TINY, tiny_paging_link
from tests.helpers import TINY_PAGE_BYTES as PAGE
from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.simulator.paths.tiered import TierPhysics, TierTables
from tripath.simulator.paths.tiered_engine_rule import EngineTierRule
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.strategy import TieredSpec

SCENARIO = SCENARIOS_DIR / "validation/tiered-host-ssd.toml"


DH, HS, GATHER = tiny_paging_link(0.01, 1.0), tiny_paging_link(0.02, 0.5), tiny_paging_link(0.005, 10.0)
DH_PAGE = 0.01 + PAGE / 1e6  # ms per page over device<->host: 0.141072
HS_PAGE = 0.02 + PAGE / 0.5e6  # ms per page over host<->SSD: 0.282144


def _profile(gather: bool = True):
    paging = {"device_host": DH, "host_ssd": HS} | ({"gather": GATHER} if gather else {})
    return dataclasses.replace(TINY, paging=paging)


def _scenario(prompt: int, output: int, device_gib: float = 0.019, host_tokens: int = 1024) -> object:
    data = copy.deepcopy(tomllib.loads(SCENARIO.read_text()))
    data["workload"] = {"requests": 1, "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                        "tasks": {"summarization": 1.0},
                        "prompt_tokens": {"kind": "fixed", "value": prompt},
                        "output_tokens": {"kind": "fixed", "value": output}}
    data["cluster"]["device_memory_gib"] = device_gib
    data["strategy"]["tiered"]["host_capacity_gib"] = host_tokens * 3072 / 2**30
    return scenario_from_dict(data)


def test_one_request_paging_by_hand() -> None:
    """880 + 200 tokens, device 4 pages per layer (24), host 24 pages. The prefill reads nothing and its 24
    pages fit. 199 decode steps read n = 881 ... 1079 tokens: gather = 6 x (0.005 + n x 512 B / 10 GB/s) each.
    Steps with n >= 1025 (55 of them) hold 5 chunks per layer = 30 pages > 24: chunks 0 (sinks), 3 and 4
    (window) are pinned, chunks 1 and 2 of every layer miss each step: 12 pages in and 12 out over
    device<->host (6 pages off the device < 24 host pages: no SSD)."""
    record = simulate(_scenario(880, 200), _profile(), seed=0).runs[0].records[0]
    reads = range(881, 1080)
    gather_ms = sum(6 * (0.005 + n * 512 / 1e7) for n in reads)
    moves_ms = 55 * 12 * 2 * DH_PAGE
    assert gather_ms == pytest.approx(65.880144)
    assert moves_ms == pytest.approx(186.21504)
    # the read extra is the step's attention compute (paid with nothing moved), the moves are its paging
    assert record.paging_s * 1e3 == pytest.approx(moves_ms, rel=1e-9)
    bare = simulate(_scenario(880, 200), _profile(gather=False), seed=0).runs[0].records[0]
    assert (record.finish_s - bare.finish_s) * 1e3 == pytest.approx(gather_ms, rel=1e-9)


def test_nothing_moves_when_everything_fits() -> None:
    """A device holding the whole sequence: no page moves, so no paging at all; with a gather fit the
    request finishes later by exactly the read overhead."""
    big = 0.05  # GiB: (0.05 GiB - weights) / 3,072 B = 11,878 tokens
    assert simulate(_scenario(880, 200, big), _profile(gather=False), seed=0).runs[0].records[0].paging_s == 0.0
    record = simulate(_scenario(880, 200, big), _profile(), seed=0).runs[0].records[0]
    bare = simulate(_scenario(880, 200, big), _profile(gather=False), seed=0).runs[0].records[0]
    assert record.paging_s == 0.0  # the read extra is compute, not paging
    assert (record.finish_s - bare.finish_s) * 1e3 == pytest.approx(sum(6 * (0.005 + n * 512 / 1e7)
                                                                        for n in range(881, 1080)), rel=1e-9)
    # and the 0.019 GiB device with a sequence that never passes 1,024 tokens: read overhead only
    record = simulate(_scenario(779, 188), _profile(gather=False), seed=0).runs[0].records[0]
    assert record.paging_s == 0.0


def _rule(host_pages: int) -> EngineTierRule:
    return EngineTierRule(_profile().paging, 256, 6, 3072, device_pages=24, host_pages=host_pages, sink_tokens=4,
                          window_tokens=256)


def test_pinned_chunks_match_the_cache() -> None:
    """By hand (sinks 4, window 256, chunks of 256): 1,024 tokens pin chunks 0 and 3 (chunk 2 ends at 768, the
    window starts there); 1,025 also pin chunk 3 and the new chunk 4; and the real cache agrees."""
    import torch

    from tripath.engine.model.config import PRESETS
    from tripath.engine.tiered.cache import TieredKVCache
    from tripath.engine.tiered.tier_config import TierConfig

    rule = _rule(24)
    lengths = (100, 256, 257, 600, 1024, 1025, 1279, 1280, 4096)
    assert [rule.pinned(n) for n in lengths] == [1, 1, 2, 3, 2, 3, 3, 2, 2]
    config = PRESETS["tiny-gqa"]
    cache = TieredKVCache(config, TierConfig(256, 8, 0, 0), torch.float32, "cpu", prefetch=False)
    try:
        for n in lengths:
            cache.lengths[0] = [n] * config.num_layers
            assert sum(cache.pinned((0, 0, j)) for j in range(-(-n // 256))) == rule.pinned(n), n
    finally:
        cache.close()


def test_links_follow_host_room() -> None:
    """12 misses with 6 pages off the device: host room (24) -> device<->host only; a full host (6 pages) ->
    each miss also crosses host<->SSD; no host tier -> straight to SSD."""
    for host, pages in ((24, {"device->host": 12, "host->device": 12}),
                        (6, {"device->host": 12, "host->device": 12, "host->ssd": 12, "ssd->host": 12}),
                        (0, {"host->ssd": 12, "ssd->host": 12, "host->device": 12})):
        rule = _rule(host)
        assert rule.misses([1030], [1030]) == (12, 6)
        assert rule.moves(*rule.misses([1030], [1030])) == pages
        _, move_ms, moved = rule.step_ms([1030], [1030])
        dh, hs = pages.get("device->host", 0) + pages["host->device"], pages.get("host->ssd", 0) * 2
        assert move_ms == pytest.approx(dh * DH_PAGE + hs * HS_PAGE)
        assert moved == {k: v for k, v in {"device_host": dh * PAGE, "host_ssd": hs * PAGE}.items() if v}


def test_misses_count_every_sequence_read() -> None:
    rule = _rule(1000)
    # 600 tokens = 3 chunks, all pinned (sinks, window straddling chunks 1 and 2): 36 pages > 24 but nothing
    # unpinned to miss (the engine's admission would not hold both); two 1,030-token sequences: 60 pages,
    # 2 x 2 unpinned chunks x 6 layers miss
    assert rule.misses([600, 600], [600, 600]) == (0, 12)
    assert rule.misses([1030, 1030], [1030, 1030]) == (24, 36)
    assert rule.misses([1030], [1030, 40]) == (12, 12)  # a fresh prompt chunk holds pages, reads none


def test_seed_profiles_keep_the_aggregate_model() -> None:
    assert TierPhysics(TieredSpec(), TierTables.from_profile(SEED), 327_680, 8192).rule is None
    assert TierPhysics(TieredSpec(), TierTables.from_profile(TINY), 3072, 1052).rule is not None
    assert math.isclose(TierPhysics(TieredSpec(), TierTables.from_profile(TINY), 3072, 1052).rule.page_bytes, PAGE)
