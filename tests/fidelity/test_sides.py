"""fidelity's two sides: the same request list, the engine built from the simulator's settings, the CPU clock."""

from __future__ import annotations

import copy
import time

import pytest

from tripath.core.records import rejected_record
from tripath.fidelity.compare import check_same_requests
from tripath.fidelity.engine_settings import SSD_PAGES_CAP
from tripath.fidelity.engine_side import CpuClock, engine_config, unsupported
from tripath.fidelity.sim_side import requests_for, simulate_case, tier_tokens
from tripath.profile.profile import resolve_profile

SCENARIO = {
    "name": "t",
    "workload": {"requests": 12, "arrival": {"kind": "poisson", "rate_per_s": 5.0},
                 "tasks": {"code": 1.0},
                 "prompt_tokens": {"kind": "uniform", "low": 32, "high": 128},
                 "output_tokens": {"kind": "uniform", "low": 4, "high": 16}},
    "cluster": {"gpus": 1},
    "batching": {"policy": "continuous", "max_batch_size": 8, "max_batched_tokens": 2048},
}


@pytest.fixture(scope="module")
def profile():
    return resolve_profile("cpu-tiny")


def test_engine_requests_are_the_ones_the_simulator_serves(profile) -> None:
    requests, kv_tokens = requests_for(SCENARIO, None, profile, seed=3)
    sim = simulate_case(SCENARIO, None, profile, seed=3)
    as_records = [rejected_record(r.request_id, r.task, r.arrival_s, r.prompt_tokens, r.output_tokens, "")
                  for r in requests]
    check_same_requests(sim.records, as_records)  # raises if ids, arrivals, lengths or tasks differ
    assert kv_tokens == profile.kv_capacity_bytes // profile.model.kv_bytes_per_token
    other, _ = requests_for(SCENARIO, None, profile, seed=4)
    assert [r.arrival_s for r in other] != [r.arrival_s for r in requests]


def test_tier_pages_follow_the_simulators_memory(profile) -> None:
    # device 0.019 GiB - 17,167,360 weight bytes = 3,233,873 bytes = 1,052 tokens of 3,072 bytes -> 4 pages
    # of 256 per layer x 6 layers = 24; host 0.003 GiB = 1,048 tokens -> 4 x 6 = 24; SSD 1 GiB -> capped.
    data = copy.deepcopy(SCENARIO)
    data["cluster"]["device_memory_gib"] = 0.019
    data["strategy"] = {"tiered": {"host_capacity_gib": 0.003, "ssd_capacity_gib": 1.0, "chunk_tokens": 256}}
    _, kv_tokens = requests_for(data, None, profile, seed=0)
    assert kv_tokens == (int(0.019 * 2**30) - profile.model.weight_bytes) // 3072 == 1052
    tiers = tier_tokens(data, profile)
    assert tiers == (int(0.003 * 2**30) // 3072, 2**30 // 3072) == (1048, 349525)
    cfg = engine_config(data, kv_tokens, 6, tiers)
    assert (cfg.tiered.chunk_tokens, cfg.tiered.device_pages, cfg.tiered.host_pages) == (256, 24, 24)
    assert cfg.tiered.ssd_pages == SSD_PAGES_CAP * 24
    assert cfg.num_blocks == 1052 // 16 and cfg.max_batch_size == 8


def test_unsupported_combinations_are_named() -> None:
    assert unsupported(SCENARIO) is None
    both = {**SCENARIO, "strategy": {"speculative": {"k": 4}, "tiered": {}}}
    assert "speculative decoding has no tiered KV" in (unsupported(both) or "")
    # speculative decoding serves with its target's KV compressed (tripath/engine/speculative/compressed.py)
    assert unsupported({**SCENARIO, "strategy": {"speculative": {"k": 4}, "compression": {"mode": "int8"}}}) is None
    sp = {**SCENARIO, "strategy": {"sequence_parallel": {"degree": 2}}}
    assert "max_batch_size = 1" in (unsupported(sp) or "")


def test_cpu_clock_skips_idle_gaps_and_counts_work() -> None:
    clock = CpuClock()
    start = clock()
    clock.sleep(5.0)  # an idle gap: advanced, not slept
    assert clock() - start == pytest.approx(5.0, abs=0.05)
    wall = time.perf_counter()
    x = 0
    while time.perf_counter() - wall < 0.05:  # 50 ms of work: the clock advances by at most that
        x += 1
    assert 5.0 < clock() - start <= 5.0 + (time.perf_counter() - wall) + 0.01
