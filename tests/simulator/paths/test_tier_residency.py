"""Tiered KV: the engine's device residency rule (sinks + window of every live sequence on the device)
bounds how many sequences run at once (tripath/simulator/paths/tiered.py, tripath/engine/tiered/store.py)."""

from __future__ import annotations

import copy
import dataclasses
import tomllib

import pytest

from tests.helpers import SEED
from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.core.errors import InputError
from tripath.profile.profile import resolve_profile
from tripath.simulator.paths.capacity import path_saturation
from tripath.simulator.paths.run_costs import RunCosts, kv_capacity
from tripath.simulator.paths.tiered import TierPhysics, TierTables
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.strategy import TieredSpec

# SEED: 80 layers
B = 327_680  # LLaMA-2-70B fp16 KV bytes per token
D = 8192  # device tokens: 32 chunks of 256 per layer, 2,560 device pages
SCENARIO = SCENARIOS_DIR / "validation/tiered-host-ssd.toml"


def _tiers(**spec: object) -> TierPhysics:
    spec.setdefault("device_residency", True)  # the seed profile is not real_engine's: ask for the rule
    return TierPhysics(TieredSpec(**spec), TierTables.from_profile(SEED), B, D)


def test_pinned_chunks_are_sinks_window_and_one_more() -> None:
    tiers = _tiers()  # sink 4, window 256, chunk 256: 1 + 1 + 1 chunks
    assert tiers.device_pages == 32 * 80
    assert tiers.pinned_chunks(100) == 1  # a one-chunk sequence pins all it has
    assert tiers.pinned_chunks(600) == 3
    assert tiers.pinned_chunks(4096) == 3
    assert _tiers(sink_tokens=0, window_tokens=0).pinned_chunks(4096) == 1
    assert _tiers(sink_tokens=300, window_tokens=600).pinned_chunks(4096) == 2 + 3 + 1


def test_device_pages_needed_by_hand() -> None:
    tiers = _tiers()
    # 4096 tokens = 16 chunks, 3 pinned in each of 80 layers, 13 paged in for one layer's attention
    assert tiers.device_pages_needed([4096]) == 3 * 80 + 13
    assert tiers.device_pages_needed([4096, 600]) == 6 * 80 + 13  # the longest one's unpinned rest
    # B sequences fit while 240 B + 13 <= 2560: 10 do, 11 do not
    assert tiers.device_fits([4096] * 10)
    assert not tiers.device_fits([4096] * 11)
    assert tiers.device_fits([10**6])  # one sequence alone is never refused here (the router sizes it)


def test_sequence_parallel_counts_each_ranks_shard() -> None:
    tiers = TierPhysics(TieredSpec(device_residency=True), TierTables.from_profile(SEED), B, D, ranks=2)
    assert tiers.device_pages_needed([4096]) == 3 * 80 + (8 - 3)  # 2048 tokens per rank


def test_the_rule_follows_the_profile_source() -> None:
    """On by default only where the profile was measured on real_engine, whose rule it is."""
    assert not TierPhysics(TieredSpec(), TierTables.from_profile(SEED), B, D).residency  # seed: another engine
    assert TierPhysics(TieredSpec(), TierTables.from_profile(SEED), B, D).device_fits([4096] * 11)
    tiny = resolve_profile("cpu-tiny")
    assert tiny.source == "measured"
    assert TierPhysics(TieredSpec(), TierTables.from_profile(tiny), tiny.model.kv_bytes_per_token, 1024).residency
    assert not TierPhysics(TieredSpec(device_residency=False), TierTables.from_profile(tiny),
                           tiny.model.kv_bytes_per_token, 1024).residency


def test_negative_window_is_refused() -> None:
    with pytest.raises(InputError):
        TieredSpec(window_tokens=-1)


def _validation(**tiered: object) -> dict:
    data = tomllib.loads(SCENARIO.read_text())
    data = copy.deepcopy(data)
    data["strategy"]["tiered"].update(tiered)
    return data


def _max_live(result: object) -> int:
    """Most requests live (admitted, not finished) at once, from the records."""
    events = []
    for r in result.runs[0].records:
        events += [(r.admitted_s, 1), (r.finish_s, -1)]
    live = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # finishes before admissions at a tie
        live += step
        peak = max(peak, live)
    return peak


def test_validation_scenario_serves_one_sequence_at_a_time() -> None:
    """Device 4 pages per layer of 6: two 600+-token sequences need 2 x 3 x 6 > 24 pages (the engine's
    mean batch 1.00); pinning nothing but the newest chunk lets 3 run: 3 x 6 + 3 <= 24."""
    profile = resolve_profile("cpu-tiny")
    scenario = scenario_from_dict(_validation())
    assert kv_capacity(scenario, profile)[0] // profile.model.kv_bytes_per_token // 256 == 4
    assert _max_live(simulate(scenario, profile, seed=0)) == 1
    loose = simulate(scenario_from_dict(_validation(sink_tokens=0, window_tokens=0)), profile, seed=0)
    assert _max_live(loose) == 3


def test_saturation_batch_follows_the_rule() -> None:
    profile = resolve_profile("cpu-tiny")
    scenario = scenario_from_dict(_validation())
    assert path_saturation(scenario, RunCosts.for_scenario(scenario, profile), 750, 150, 1, 4).batch == 1
    loose = scenario_from_dict(_validation(sink_tokens=0, window_tokens=0))
    assert path_saturation(loose, RunCosts.for_scenario(loose, profile), 750, 150, 1, 4).batch == 3


def test_the_engine_pool_is_whole_pages() -> None:
    """1,052 device tokens are 4 pages of 256 per layer in the engine: a 1,030-token sequence pages one
    chunk out; the byte budget alone would hold it. Only sequences past 1,024 tokens page."""
    tiny = resolve_profile("cpu-tiny")
    b = tiny.model.kv_bytes_per_token
    assert TierPhysics(TieredSpec(), TierTables.from_profile(tiny), b, 1052).placement(1030)[0] == 1030 - 256
    assert TierPhysics(TieredSpec(device_residency=False), TierTables.from_profile(tiny), b,
                       1052).placement(1030) == (1030, 0, 0)
    # page moves only: without the tiered read's overhead (paging.gather) a step pages iff it holds more than
    # 4 chunks per layer; the last decode holds prompt + output - 1 tokens
    moves_only = dataclasses.replace(tiny, paging={k: v for k, v in tiny.paging.items() if k != "gather"})
    records = simulate(scenario_from_dict(_validation()), moves_only, seed=0).runs[0].records
    for r in records:
        assert (r.paging_s > 0) == (r.prompt_tokens + r.output_tokens - 1 > 1024), r
