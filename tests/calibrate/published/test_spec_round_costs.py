"""Round costs of draft/target pairs from Vidur's rows: each derivation against hand values from source rows, and
on the shipped rows the batch effect the data shows (verify turns compute-bound, speculation stops paying)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tripath.calibrate.published.speculative import (
    ARCHS,
    attention_per_token,
    breakeven_batch,
    derived_points,
    measured_points,
    operator_floors,
    round_costs,
    round_table,
    speculative_section,
    thinned,
)
from tripath.calibrate.published.vidur import LINEAR_OPS
from tripath.core.errors import InputError
from tripath.core.speculative import expected_tokens
from tripath.profile.profile import resolve_profile

SHIPPED = Path(__file__).resolve().parents[3] / "data/peer-data/vidur"
TOKENS = (1, 2, 4, 8, 16, 64, 128)
BW = 2.039e12  # A100 HBM peak (hardware.SPECS)
# Llama-2-7b's GEMM parameters per layer: QKV 4096 x 12288, O 4096 x 4096, gate+up 2 x 4096 x 11008, down
READ_MS = {"attn_pre_proj": 50331648 * 2 / BW * 1e3, "attn_post_proj": 16777216 * 2 / BW * 1e3,
           "mlp_up_proj": 90177536 * 2 / BW * 1e3, "mlp_down_proj": 45088768 * 2 / BW * 1e3}


def _fake_root(tmp_path: Path) -> Path:
    """Vidur's layout with Llama-2-7b rows at tp 1 and 2: a GEMM takes its weight read at peak + 4 us + 0.5 us per
    token beyond the first; other ops 5 us + 0.1 us per token; embedding 3 us; a 2-GPU all-reduce 10 us + 0.1 us/KB."""
    rows = []
    for tp in (1, 2):
        for t in TOKENS:
            row = {"num_tokens": t, "num_tensor_parallel_workers": tp, "time_stats.emb.median": 0.003}
            for op in set(LINEAR_OPS):
                row[f"time_stats.{op}.median"] = (READ_MS[op] / tp + 0.004 + 0.0005 * (t - 1) if op in READ_MS
                                                  else 0.005 + 0.0001 * (t - 1))
            rows.append(row)
    mlp = tmp_path / "data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
    mlp.parent.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(mlp, index=False)
    net = tmp_path / "data/profiling/network/a100_dgx/all_reduce.csv"
    net.parent.mkdir(parents=True)
    pd.DataFrame({"time_stats.all_reduce.median": [0.01, 0.11], "size": [0, 1_000_000], "num_workers": [2, 2],
                  "devices_per_node": [2, 2], "collective": ["all_reduce"] * 2}).to_csv(net, index=False)
    return tmp_path


def test_thinning_keeps_small_counts_and_eight_per_octave() -> None:
    assert thinned([1, 2, 40, 64, 72, 80, 128, 136, 144, 4096, 4128]) == [1, 2, 40, 64, 72, 80, 128, 144, 4096]


def test_measured_curve_rebuilds_full_depth_with_all_reduces(tmp_path: Path) -> None:
    root = _fake_root(tmp_path)
    gemm = sum(READ_MS.values())
    # tp 1, T = 8: 32 layers x (4 GEMMs: read + 4 us + 3.5 us; 6 other ops: 5.7 us) + embedding 3 us
    linear = gemm + 4 * (0.004 + 0.0035) + 6 * 0.0057
    assert dict(measured_points(root, "a100-80gb", "llama-2-7b", 1))[8] == pytest.approx(32 * linear + 0.003,
                                                                                         rel=1e-5)
    # tp 2: half the reads, + 2 all-reduces of 8 x 4096 x 2 bytes = 65536 B: 0.01 + 0.1 x 0.065536 ms each
    linear2 = gemm / 2 + 4 * (0.004 + 0.0035) + 6 * 0.0057 + 2 * (0.01 + 0.1 * 0.065536)
    assert dict(measured_points(root, "a100-80gb", "llama-2-7b", 2))[8] == pytest.approx(32 * linear2 + 0.003,
                                                                                         rel=1e-5)
    with pytest.raises(InputError, match="no rows at tp 4"):
        measured_points(root, "a100-80gb", "llama-2-7b", 4)


def test_small_draft_is_its_layers_floors_plus_its_weights_over_hbm(tmp_path: Path) -> None:
    root = _fake_root(tmp_path)
    floors = operator_floors(root, "a100-80gb", "llama-2-7b")
    assert floors["attn_pre_proj"] == pytest.approx(0.004, abs=1e-12)  # the rows less the weight read at peak
    assert floors["add"] == pytest.approx(0.005)
    # llama-68m: 2 layers x (6 x 5 us + 4 x 4 us) + the LM head's 4 us + embedding 3 us + its weights at peak:
    # 2 x (768 x 2304 + 768 x 768 + 2 x 768 x 3072 + 3072 x 768) + 32000 x 768 = 43,450,368 parameters
    weights_ms = 43_450_368 * 2 / BW * 1e3
    one = dict(derived_points(root, "a100-80gb", "llama-68m", "llama-2-7b", 1))[1]
    assert one == pytest.approx(2 * 0.046 + 0.004 + 0.003 + weights_ms, rel=1e-5)
    # T = 128: the family's time beyond its floors (reads + 0.5 us/token x 127 on 4 GEMMs + 0.1 us x 127 on 6 ops)
    # x the weight ratio exceeds the weight read: compute-bound
    beyond = 32 * (sum(READ_MS.values()) + 4 * 0.0635 + 6 * 0.0127)
    ratio = 43_450_368 / (32 * 202_375_168)
    embed = 0.003  # 3 us x 768 / 4096 is below the one-token time
    big = dict(derived_points(root, "a100-80gb", "llama-68m", "llama-2-7b", 1))[128]
    assert big == pytest.approx(2 * 0.046 + 0.004 + embed + ratio * beyond, rel=1e-5)
    assert ratio * beyond > weights_ms


def test_attention_is_the_targets_d_ctx_or_scaled_by_kv_bytes_per_gpu() -> None:
    seven = resolve_profile("published-llama2-7b-a100")
    d_ctx = seven.costs["decode"].coefficients["d_ctx"]
    same = attention_per_token(seven, "llama-2-7b", 1)
    assert (same.value, same.source) == (d_ctx.value, d_ctx.source)
    # llama-68m: 2 layers x 2 x 12 heads x 64 x 2 bytes = 6144 B per token vs Llama-2-7b's 524288
    assert ARCHS["llama-68m"].kv_bytes_per_token() == 6144 and ARCHS["llama-2-7b"].kv_bytes_per_token() == 524288
    small = attention_per_token(seven, "llama-68m", 1)
    assert small.value == pytest.approx(d_ctx.value * 6144 / 524288, rel=1e-5) and small.source == "derived"
    seventy = resolve_profile("published-llama2-70b-tp2-a100")  # Llama-3-70B at tp4: same KV shape, half per GPU
    assert attention_per_token(seventy, "llama-3-70b", 4).value == pytest.approx(
        seventy.costs["decode"].coefficients["d_ctx"].value / 2, rel=1e-5)


def test_reference_on_another_gpu_and_unknown_pair_are_refused() -> None:
    with pytest.raises(InputError, match="not h100-sxm"):
        round_costs(SHIPPED, "llama2-7b/llama-68m", "h100-sxm", resolve_profile("published-llama2-7b-a100"))
    with pytest.raises(InputError, match="unknown draft/target pair"):
        round_costs(SHIPPED, "llama2-7b/nope", "a100-80gb", resolve_profile("published-llama2-7b-a100"))


@pytest.fixture(scope="module")
def small_pair():
    return speculative_section(SHIPPED, "llama2-7b/llama-68m", "a100-80gb", resolve_profile("published-llama2-7b-a100"))


def test_shipped_rows_verify_rises_with_batch_and_speculation_stops_paying(small_pair) -> None:
    rc = small_pair.round_costs
    rows = {b: row for b, *row in round_table(rc, (1, 32, 256, 512), 128, 4, 0.7)}
    v = [rows[b][1] for b in (1, 32, 256, 512)]
    assert v == sorted(v) and v[-1] > 2.5 * v[0]  # the verify of B x 5 tokens turns compute-bound
    assert round_table(rc, (1,), 2048, 4, 0.8)[0][3] > 1.5  # batch 1, good acceptance: it pays
    assert rows[512][2] < 1.0  # 512 sequences of 128 tokens: a round at a = 0.7 costs more than it emits
    b = breakeven_batch(rc, 128, 4, 0.7)
    assert b is not None and 1 < b <= 512
    assert expected_tokens(4, 0.7) / rc.round_factor(4, b - 1, (b - 1) * 129.0) >= 1.0


def test_section_scalars_are_the_batch_one_values(small_pair) -> None:
    rc, s = small_pair.round_costs, 2049.0
    assert small_pair.cost_ratio.value == pytest.approx(rc.cost_ratio(1, s), rel=1e-5)
    assert small_pair.verify_cost_ratio.value == pytest.approx(rc.verify_ratio(4, 1, s), rel=1e-5)
    assert small_pair.verify_at(6) == pytest.approx(rc.verify_ratio(6, 1, s), rel=1e-5)
    assert small_pair.round_costs.draft.source == "derived" and small_pair.round_costs.target.source == "published"
    assert 0 < small_pair.prefill_ratio < small_pair.cost_ratio.value  # per-layer floors weigh less in a prompt


def test_seventy_b_with_a_seven_b_draft_c_and_v_rise_with_batch() -> None:
    rc = round_costs(SHIPPED, "llama2-70b-tp2/llama2-7b", "a100-80gb",
                     resolve_profile("published-llama2-70b-tp2-a100"))
    rows = round_table(rc, (8, 32, 64, 128, 256), 2048, 4, 0.7)
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)
    assert [r[2] for r in rows] == sorted(r[2] for r in rows)
    assert rows[-1][3] < 1.0 < round_table(rc, (1,), 2048, 4, 0.8)[0][3]
