"""Tiered KV physics: placement (SSD only after host), paging time = setup + bytes / bandwidth, stalls."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import SEED
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep
from tripath.simulator.paths.tiered import TierPhysics, TierTables
from tripath.simulator.scenario.strategy import GIB, SequenceParallelSpec, StrategySpec, TieredSpec
from tripath.simulator.step_model import Decode, PrefillChunk

B = 327_680  # LLaMA-2-70B fp16 KV bytes per token
D = 8192  # the seed profile's device KV budget in tokens (2,684,354,560 bytes)
SETUP_MS, GBPS = 21.25, 143.166  # seed paging.device_host: paging_v1 fitted to Table 3.2
SSD_SETUP_MS, SSD_GBPS = 0.1, 7.0  # seed paging.host_ssd: vendor-typical NVMe


def _tiers(**spec):
    return TierPhysics(TieredSpec(**spec), TierTables.from_profile(SEED), B, D)


def test_placement_fills_host_before_ssd():
    tiers = _tiers(host_capacity_gib=1.0, chunk_tokens=256)
    host = GIB // B  # 3276 tokens
    assert tiers.placement(D) == (D, 0, 0)
    assert tiers.placement(D + 1) == (D + 1 - 256, 256, 0)  # a whole chunk leaves the device
    assert tiers.placement(D + 2048) == (D, 2048, 0)
    assert tiers.placement(D + 4096) == (D, host, 4096 - host)  # host full: the rest on SSD
    assert tiers.capacity_tokens == D + host + int(SEED.hardware.ssd_bytes) // B


def test_paging_time_is_setup_plus_bytes_over_bandwidth():
    tiers = _tiers()
    # one sequence decoding at 16K: 8K tokens off the device are read back every step
    seconds, moved = tiers.iteration(live=16_384, read=16_384, written=0)
    nbytes = 8192 * B
    assert moved == {"device_host": nbytes}
    assert seconds == pytest.approx((SETUP_MS + nbytes / (GBPS * 1e6)) / 1000, rel=1e-9)  # 40.0 ms
    assert seconds == pytest.approx(0.040, rel=1e-4)


def test_ssd_pages_cross_both_links():
    tiers = _tiers(host_capacity_gib=1.0)
    host = GIB // B
    live = D + 8192  # 8192 off the device: `host` tokens on host, the rest on SSD (chunks of 256)
    seconds, moved = tiers.iteration(live=live, read=live, written=0)
    ssd = 8192 - host
    assert moved == {"device_host": 8192 * B, "host_ssd": ssd * B}
    expected_ms = SETUP_MS + 8192 * B / (GBPS * 1e6) + SSD_SETUP_MS + ssd * B / (SSD_GBPS * 1e6)
    assert seconds == pytest.approx(expected_ms / 1000, rel=1e-9)


def test_page_out_once_per_chunk_written():
    tiers = _tiers(chunk_tokens=256)
    outs = []
    for live in range(D - 10, D + 600):
        _, moved = tiers.iteration(live=live, read=0, written=1)
        outs.append(moved.get("device_host", 0))
    # crossing D and D + 256 and D + 512: three chunks paged out, one transfer each
    assert [o for o in outs if o] == [256 * B] * 3


def test_read_share_of_off_device_kv_in_whole_chunks():
    tiers = _tiers(chunk_tokens=256)
    # 20,000 live, 11,808 off the device; the iteration reads 5,000 of the live tokens:
    # share = 11,808 * 5,000 / 20,000 = 2,952 -> 12 chunks = 3,072 tokens
    _, moved = tiers.iteration(live=20_000, read=5_000, written=0)
    assert moved == {"device_host": 3072 * B}


def test_stall_subtracts_overlapped_share_of_compute():
    tiers = TierPhysics(TieredSpec(), TierTables.from_profile(SEED), B, D, overlap=0.5)
    assert tiers.stall_s(0.05, 0.04) == pytest.approx(0.03)
    assert tiers.stall_s(0.01, 0.04) == 0.0
    assert _tiers().stall_s(0.05, 0.04) == 0.05  # no measured overlap: every paging second stalls


def test_sp_ranks_page_their_shards_in_parallel():
    one = _tiers()
    two = TierPhysics(TieredSpec(), TierTables.from_profile(SEED), B, 2 * D, ranks=2)
    s1, m1 = one.iteration(live=3 * D, read=3 * D, written=0)  # 2D off the device
    s2, m2 = two.iteration(live=4 * D, read=4 * D, written=0)  # 2D off the two devices, D per rank
    assert m1 == m2 == {"device_host": 2 * D * B}
    assert s2 == pytest.approx((SETUP_MS + D * B / (GBPS * 1e6)) / 1000, rel=1e-9)
    assert s1 == pytest.approx((SETUP_MS + 2 * D * B / (GBPS * 1e6)) / 1000, rel=1e-9)


def test_path_step_charges_paging_stall_and_records_it():
    step = PathStep(RunCosts.from_profile(SEED, StrategySpec(tiered=TieredSpec()), ["dialogue"],
                                          SEED.kv_capacity_bytes), np.random.default_rng(0))
    assert step.device_kv_tokens == D
    decode_ms = 2.15916 + 0.884316 + 0.00964886 * 16_000
    result = step.step([], [Decode(0, 0, 16_000, 10)], 16_000)
    off = 8192 - 256  # ceil((16,000 - 8,192) / 256) = 31 chunks
    paging_ms = SETUP_MS + off * B / (GBPS * 1e6)
    assert result.paging_bytes == {"device_host": off * B}
    assert result.paging_s == pytest.approx(paging_ms / 1000, rel=1e-9)
    assert result.seconds == pytest.approx((decode_ms + paging_ms) / 1000, rel=1e-9)
    assert step.tier_bytes() == {"device": (16_001 - off) * B, "host": off * B, "ssd": 0}


def test_long_prefill_pages_out_as_it_goes():
    step = PathStep(RunCosts.from_profile(SEED, StrategySpec(tiered=TieredSpec()), ["dialogue"],
                                          SEED.kv_capacity_bytes), np.random.default_rng(0))
    result = step.step([PrefillChunk(0, 0, 20_000, 0, True)], [], 0)
    off = 47 * 256  # 11,808 tokens over the device budget, in whole chunks: ceil(11,808 / 256) = 47
    assert result.paging_bytes == {"device_host": off * B}
    assert step.tier_bytes()["host"] == off * B


def test_sp_with_tiering_holds_twice_the_device_tokens():
    strategy = StrategySpec(tiered=TieredSpec(), sequence_parallel=SequenceParallelSpec(2))
    step = PathStep(RunCosts.from_profile(SEED, strategy, ["dialogue"], SEED.kv_capacity_bytes),
                    np.random.default_rng(0))
    assert step.device_kv_tokens == 2 * D and step.gpus == 2
    assert step.step([], [Decode(0, 0, 2 * D - 1, 10)], 2 * D - 1).paging_bytes == {}
