"""SP sections for the published profiles: one ring step and one decode step by hand from NCCL rows and the
profile's coefficients, the speedup bound, which degrees the data serves, the sections' round trip, and a
simulation of the shipped SP scenario on a published profile with them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import shipped_scenario_dict
from tripath.calibrate.published.seqpar import (
    NcclTable,
    build_sequence_parallel,
    decode_row,
    nccl_table,
    ring_prefill,
    sequence_parallel_sections,
)
from tripath.core.data_dirs import DATA_DIR
from tripath.core.errors import InputError
from tripath.profile.profile import Profile, load_profile, resolve_profile
from tripath.simulator.paths.seqpar import SpPhysics
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict

A100_70B = "published-llama2-70b-tp2-a100"  # 80 layers, 64 / 8 heads of 128 at tp 2, 327680 KV bytes per token
SEND_RECV_HEADER = ("time_stats.send_recv.median,rank,num_workers,size,collective,devices_per_node,"
                    "max_devices_per_node")
ALL_REDUCE_HEADER = SEND_RECV_HEADER.replace("send_recv", "all_reduce")
# send/recv (size bytes, ms): the rows of network/a100_dgx/send_recv.csv around 4 MiB at devices_per_node 2
# (Vidur: 0.025 ms at 4194304, 0.027 at 4227072), and made-up slow cross-node rows that a ring step cannot hide
NVLINK_ROWS = ((2048, 0.008), (4194304, 0.025), (4227072, 0.027), (67108864, 0.294))
SLOW_ROWS = ((2048, 1.0), (67108864, 5.0))
# all-reduce rows (made up, increasing): per (workers, devices_per_node)
REDUCE_ROWS = ((2048, 0.010), (16384, 0.020), (131072, 0.060))


def _write(path, header, collective, groups):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [header]
    for (workers, per_node), rows in groups.items():
        lines += [f"{ms},0,{workers},{size},{collective},{per_node},8" for size, ms in rows]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def vidur_root(tmp_path):
    """A Vidur data root with a100_dgx tables: NVLink send/recv and slow cross-node rows, all-reduce for 2 and 4
    GPUs in one node and none across nodes (so degree 8 at tp 2 has no decode data)."""
    network = tmp_path / "data/profiling/network/a100_dgx"
    _write(network / "send_recv.csv", SEND_RECV_HEADER, "send_recv", {(2, 2): NVLINK_ROWS, (2, 1): SLOW_ROWS})
    _write(network / "all_reduce.csv", ALL_REDUCE_HEADER, "all_reduce", {(2, 2): REDUCE_ROWS, (4, 4): REDUCE_ROWS})
    return tmp_path


@pytest.fixture(scope="module")
def a100() -> Profile:
    return resolve_profile(A100_70B)


def _coefficients(profile: Profile) -> tuple[float, float, float]:
    c = profile.costs["prefill"].coefficients
    return c["c0"].value, c["c_tok"].value, c["c_attn"].value


def test_one_ring_step_by_hand(vidur_root, a100):
    c0, c_tok, c_attn = _coefficients(a100)
    table = nccl_table(vidur_root, "a100-80gb", "send_recv", 2, 2)
    n, p = 8256, 2  # N / P = 4128 tokens x 2048 bytes (K and V of 4 KV heads of 128, fp16) = 8454144 bytes per layer
    ring = ring_prefill(a100, p, n, table)
    chunk = n / 4  # 2P zigzag chunks of 2064 tokens; every step after the first: 2 chunk^2 query-key pairs
    assert ring.attention_ms == pytest.approx(c_attn / 80 * 2 * chunk**2, rel=1e-12)
    assert ring.first_attention_ms == pytest.approx(c_attn / 80 * (2 * chunk**2 + chunk), rel=1e-12)
    # 8454144 bytes: interpolated between the rows at 4227072 (0.027 ms) and 67108864 (0.294 ms)
    transfer = 0.027 + (8454144 - 4227072) / (67108864 - 4227072) * (0.294 - 0.027)
    assert ring.transfer_ms == pytest.approx(transfer, rel=1e-12)
    # merge of 4128 queries x 32 heads: 128 x (4 + 2 + 4) bytes per element + 12 per lse, at A100's 2.039 TB/s
    merge = 4128 * 32 * (128 * 10 + 12) / 2.039e9
    assert ring.merge_step_ms == pytest.approx(merge, rel=1e-12)
    assert transfer < ring.first_attention_ms  # so the transfer is hidden: step 0 = attention, step 1 = a + merge
    assert ring.exposed_ms == 0.0
    assert ring.sp_ms == pytest.approx(c0 + c_tok * n / 2 + 80 * (ring.first_attention_ms + ring.attention_ms + merge),
                                       rel=1e-12)
    assert ring.merge_ms == pytest.approx(80 * merge, rel=1e-12)
    assert ring.one_ms == pytest.approx(c0 + c_tok * n + c_attn * n * (n + 1) / 2, rel=1e-12)


def test_an_exposed_transfer_is_what_attention_does_not_cover(vidur_root, a100):
    table = nccl_table(vidur_root, "a100-80gb", "send_recv", 2, 1)  # cross-node: 1 ms and up per message
    ring = ring_prefill(a100, 8, 4096, table)  # 512 tokens x 2048 bytes per step, attention ~0.02 ms
    x, a0, a, m = ring.transfer_ms, ring.first_attention_ms, ring.attention_ms, ring.merge_step_ms
    assert x > a + m
    assert ring.exposed_ms == pytest.approx(80 * ((x - a0) + 6 * (x - a - m)), rel=1e-12)
    # per layer: step 0 and the six middle steps wait for the transfer, the last has none
    assert ring.sp_ms == pytest.approx(ring.fixed_ms + _coefficients(a100)[1] * 512 + 80 * (7 * x + a + m), rel=1e-12)


def test_speedup_at_most_p_and_end_to_end_rises_towards_p(vidur_root, a100):
    build = build_sequence_parallel(vidur_root, a100, degrees=(2, 4))
    for p, ring in build.prefill.items():
        # the ring splits attention and linear work exactly by P, so the row speedup is P and the loss is merge_ms
        assert all(r.speedup <= p * (1 + 1e-12) and r.speedup == pytest.approx(p, rel=1e-9) for r in ring)
        ends = [r.end_to_end for r in ring]
        assert all(e < p for e in ends) and ends == sorted(ends) and len(set(ends)) == len(ends)
        rows = build.sections[p].rows
        assert [row.merge_ms for row in rows] == pytest.approx([r.overhead_ms for r in ring], rel=1e-5)


def test_simulator_gives_back_the_ring_prefill(vidur_root, a100):
    build = build_sequence_parallel(vidur_root, a100, degrees=(2,))
    sp = SpPhysics(build.sections[2])
    prefill = a100.costs["prefill"]

    def one(new_tokens, context_tokens):
        return prefill.evaluate(new_tokens=new_tokens, context_tokens=context_tokens)

    for ring in build.prefill[2]:
        assert sp.prefill_fn(one, ring.fixed_ms)(ring.tokens, 0) == pytest.approx(ring.sp_ms, rel=1e-5)


def test_decode_comm_interpolates_the_measured_table(vidur_root, a100):
    table = nccl_table(vidur_root, "a100-80gb", "all_reduce", 2, 2)
    row = decode_row(a100, 4, table)
    # lse max: 4 x 32 fp32 = 512 bytes, under the smallest row: held at 0.010; token: 16 bytes, also 0.010
    # outputs and weights: 4 x 32 x 129 x 4 = 66048 bytes, between 16384 (0.020) and 131072 (0.060)
    sum_ms = 0.020 + (66048 - 16384) / (131072 - 16384) * 0.040
    assert row.comm_ms == pytest.approx(80 * (0.010 + sum_ms) + 0.010, rel=1e-5)
    # rescale (256 + 8 + 516 bytes) and normalise (516 + 256) per (sequence, head), 80 layers, HBM peak
    assert row.merge_ms == pytest.approx(80 * 4 * 32 * (780 + 772) / 2.039e9, rel=1e-5)
    assert "under 2048 held at its time" in table.range_note()


def test_messages_over_the_largest_size_are_whole_largest_messages():
    table = NcclTable(DATA_DIR, "send_recv", 2, 2, np.array([1000.0, 4000.0]), np.array([1.0, 3.0]))
    assert table.ms_at(10_000) == pytest.approx(2 * 3.0 + (1.0 + (2000 - 1000) / 3000 * 2.0))
    assert table.ms_at(8000) == pytest.approx(6.0)
    assert "whole 4000-byte messages" in table.range_note()


def test_degrees_without_rows_are_left_out_and_said(vidur_root, a100):
    build = build_sequence_parallel(vidur_root, a100)
    assert sorted(build.sections) == [2, 4]
    assert "all_reduce" in build.omitted[8] and "16 GPUs" in build.omitted[8]
    assert "devices_per_node=2" in build.sections[4].note  # tp 2 x 4 = 8 GPUs: one node, NVLink send/recv
    assert "over 2 DGX nodes" not in build.sections[4].note


def test_a_missing_table_names_its_file(tmp_path, a100):
    with pytest.raises(InputError, match="a100_dgx/send_recv.csv.*missing"):
        sequence_parallel_sections(tmp_path, a100)


def test_sections_round_trip_in_a_profile(vidur_root, a100, tmp_path):
    sections = sequence_parallel_sections(vidur_root, a100)
    profile = dataclasses.replace(a100, sequence_parallel=sections)
    path = tmp_path / "with-sp.json"
    path.write_text(profile.to_json())
    again = load_profile(path)
    assert again.sequence_parallel == sections
    assert all(s.source == "derived" and s.decode_rows and s.merge is None for s in again.sequence_parallel.values())
    assert "decode_rows" not in (resolve_profile("seed-llama2-70b-a100").sequence_parallel[2].to_dict())


def test_the_sp_scenario_runs_on_a_published_profile_with_the_sections(vidur_root, a100):
    profile = dataclasses.replace(a100, sequence_parallel=sequence_parallel_sections(vidur_root, a100))
    data = shipped_scenario_dict("fixed-length-multi-gpu-sp")
    data["workload"]["requests"] = 20
    data["cluster"]["gpus"] = 4  # tp 2 x P 2: one replica
    sp = simulate(scenario_from_dict(data), profile, seed=0).runs[0].records
    del data["strategy"]
    plain = simulate(scenario_from_dict(data), profile, seed=0).runs[0].records  # two tp-2 replicas
    assert all(r.status == "completed" for r in sp) and len(sp) == 20
    ttft = [np.mean([r.first_token_s - r.arrival_s for r in records]) for records in (sp, plain)]
    assert ttft[0] < ttft[1]  # a lone prompt prefills about twice as fast on the ring
    assert all(r.merge_s > 0 for r in sp)


VIDUR = DATA_DIR / "peer-data" / "vidur"


@pytest.mark.parametrize(("name", "degrees"), [(A100_70B, [2, 4, 8]), ("published-llama2-70b-tp2-h100", [2, 4])])
def test_shipped_vidur_data_serves_these_degrees(name, degrees):
    profile = resolve_profile(name)
    build = build_sequence_parallel(VIDUR, profile)
    assert sorted(build.sections) == degrees
    for p, ring in build.prefill.items():
        assert all(r.speedup <= p * (1 + 1e-12) for r in ring)
        assert [r.end_to_end for r in ring] == sorted(r.end_to_end for r in ring)
