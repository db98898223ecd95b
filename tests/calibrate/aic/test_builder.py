"""GPU profiles from aiconfigurator-core: the profile agrees with the estimator, stays above physics, and the
shipped files are what the builder makes today."""

import json
import random
from pathlib import Path

import pytest

from tripath.calibrate.aic.builder import (
    Architecture,
    build_profile,
    simplified_axis,
    weight_read_floor_ms,
)
from tripath.calibrate.aic.estimator import Estimator, EstimatorKey
from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError
from tripath.profile.catalog import MODELS, draft_for
from tripath.profile.profile import load_profile

SHIPPED = sorted(PROFILES_DIR.glob("aic-*.json"))
LLAMA2_70B = MODELS["llama-2-70b"]


@pytest.fixture(scope="module")
def h100_70b():
    est = Estimator(EstimatorKey(LLAMA2_70B.config_dir, "h100-sxm", tp=4))
    return build_profile("llama-2-70b", LLAMA2_70B.config_dir, "h100-sxm", 4, draft=draft_for("llama-2-70b")), est


def test_profile_agrees_with_the_estimator_within_2_percent_at_random_points(h100_70b):
    profile, est = h100_70b
    rng = random.Random(20261203)
    for _ in range(400):  # off-grid points: interpolation between the grid's rows and columns
        batch, context = rng.randint(1, 512), rng.randint(1, 4096)
        assert profile.decode_ms(batch, batch * context) == pytest.approx(est.decode(batch, context), rel=0.02)
        tokens, cached = rng.randint(1, 4096), rng.randint(0, 4096)
        assert profile.prefill_ms(tokens, cached) == pytest.approx(est.prefill(tokens, cached), rel=0.02)


def test_the_shipped_profile_is_what_the_builder_makes_today(h100_70b):
    profile, _ = h100_70b
    assert (PROFILES_DIR / "aic-llama2-70b-tp4-h100.json").read_text() == profile.to_json()


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_decode_step_reads_the_weights_at_least_once(path):
    profile = load_profile(path)
    floor = weight_read_floor_ms(profile)
    table = profile.costs["decode"].table
    assert table is not None and min(min(row) for row in table.ms) >= floor
    # and the provenance says what was measured
    assert 0.5 < table.measured_share <= 1.0
    assert profile.key.engine_commit.startswith(("aic-0.12.0-vllm-", "aic-0.12.0-sglang-"))


def test_weight_read_floor_by_hand():
    profile = load_profile(PROFILES_DIR / "aic-llama2-70b-tp4-h100.json")
    # 68,976,648,192 fp16 parameters / 4 GPUs at 3.35 TB/s
    assert weight_read_floor_ms(profile) == pytest.approx(68_976_648_192 * 2 / 4 / 3.35e12 * 1e3)


def test_simplified_axis_keeps_the_steps_and_drops_the_straight_parts():
    xs = list(range(1, 101))
    ys = [10.0 + 0.1 * x + (5.0 if x > 50 else 0.0) for x in xs]  # a line with one jump between 50 and 51
    kept = simplified_axis(xs, ys, 0.001)
    assert kept[0] == 1 and kept[-1] == 100 and 50 in kept and 51 in kept and len(kept) == 4


def test_a_moe_config_without_its_top_k_and_a_model_that_does_not_fit_are_refused(tmp_path):
    config = json.loads((LLAMA2_70B.config_dir / "config.json").read_text())
    moe = tmp_path / "moe"
    moe.mkdir()
    (moe / "config.json").write_text(json.dumps({**config, "num_local_experts": 8}))
    with pytest.raises(InputError, match="experts_per_tok"):  # mixture-of-experts: tests/calibrate/aic/test_aic_moe.py
        Architecture.from_config("moe", moe)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({**config, "num_hidden_layers": "eighty"}))
    with pytest.raises(InputError, match="num_hidden_layers"):
        Architecture.from_config("bad", bad)
    big = MODELS["llama-3.1-405b"]
    with pytest.raises(InputError, match="under 10 %"):
        build_profile(big.name, big.config_dir, "a100-80gb", 1)


def test_no_tables_is_one_clear_error():
    with pytest.raises(InputError, match="a100"):
        build_profile(LLAMA2_70B.name, LLAMA2_70B.config_dir, "a100-80gb", 4, weights="fp8")


def test_unknown_hardware_and_missing_config_name_the_field(tmp_path: Path):
    with pytest.raises(InputError, match="hardware"):
        EstimatorKey(LLAMA2_70B.config_dir, "tpu-v5")
    with pytest.raises(InputError, match="config.json"):
        EstimatorKey(tmp_path, "h100-sxm")


def test_speculation_pays_at_batch_1_and_costs_at_high_batch_on_the_h100_70b_profile():
    from tripath.calibrate.published.speculative import breakeven_batch, round_table

    profile = load_profile(PROFILES_DIR / "aic-llama2-70b-tp4-h100.json")
    assert profile.speculative is not None and profile.speculative.round_costs is not None
    rc, a = profile.speculative.round_costs, profile.acceptance["dialogue"].mean
    (_, _, _, one), (_, _, _, many) = round_table(rc, (1, 256), 1024, 4, a)
    assert one > 1.0 > many  # the verify pass over B (K + 1) tokens turns compute-bound as the batch grows
    crossing = breakeven_batch(rc, 1024, 4, a)
    assert crossing is not None and 1 < crossing < 256
    # the draft's step is a fraction of the target's, both from the same tables
    assert 0.05 < rc.cost_ratio(1, 1025) < 0.5
