"""Attention data parallelism (a MoE replica of D ranks of tp GPUs, the experts over all of them): the estimator
key's checks, a DP profile's memory and KV as one rank's by hand from the parameter counts, its decode costs as
the estimator's per-rank answers, and the catalogue's DP names and families."""

import pytest

from tripath.calibrate.aic.architecture import Architecture
from tripath.calibrate.hardware import SPECS
from tripath.calibrate.job import GPU_MEMORY_UTILISATION
from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError
from tripath.profile.catalog import DP_LAYOUTS, MODEL_CONFIGS, MODELS, combinations, layouts, profile_name
from tripath.profile.profile import ProfileKey, load_profile

QWEN_FP8 = MODEL_CONFIGS / "Qwen3-235B-A22B-FP8"
DP8_EP = "aic-qwen3-235b-a22b-dp8-h200-fp8-ep"

# Qwen3-235B-A22B by hand (config: hidden 4096, 94 layers, 64 heads, 4 KV heads of 128, 128 experts of 1536, top
# 8, vocab 151936, untied); fp8 block checkpoint: decoder layers 1 byte, embeddings and LM head 2
Q_ATTENTION = 4096 * 128 * (64 * 2 + 4 * 2)
Q_OTHER = 94 * (Q_ATTENTION + 2 * 4096 + 4096 * 128)  # attention, two norms, router
Q_ROUTED = 94 * 128 * 3 * 4096 * 1536
Q_EMBEDDINGS = 2 * 151936 * 4096 + 4096


def test_the_estimator_key_checks_attention_dp():
    from tripath.calibrate.aic.estimator import EstimatorKey

    key = EstimatorKey(QWEN_FP8, "h200", tp=2, weights="fp8", attention_dp=4)
    assert key.gpus == 8 and key.layout() == "tp 2, attention dp 4"
    assert EstimatorKey(QWEN_FP8, "h200", weights="fp8").layout() == "tp 1"  # the old describe() text
    for tp, dp in ((1, 3), (2, 8), (8, 2), (1, 0)):
        with pytest.raises(InputError, match="attention_dp"):
            EstimatorKey(QWEN_FP8, "h200", tp=tp, weights="fp8", attention_dp=dp)


def test_a_dense_model_has_no_attention_dp():
    pytest.importorskip("aiconfigurator_core")
    from tripath.calibrate.aic.builder import build_profile
    from tripath.calibrate.aic.estimator import Estimator, EstimatorKey

    llama = MODELS["llama-3.1-8b"].config_dir
    with pytest.raises(InputError, match="attention_dp.*(mixture-of-experts|data-parallel)"):
        Estimator(EstimatorKey(llama, "h200", attention_dp=2))
    with pytest.raises(InputError, match="attention_dp.*dense"):
        build_profile("llama-3.1-8b", llama, "h200", 1, attention_dp=2)
    with pytest.raises(InputError, match="attention_dp"):
        Architecture.from_config("llama-3.1-8b", llama).rank_weight_bytes("fp16", 2)


def test_one_rank_holds_the_non_expert_weights_and_its_share_of_the_experts_by_hand():
    arch = Architecture.from_config("qwen3-235b-a22b", QWEN_FP8)
    assert arch.params() == (Q_OTHER + Q_ROUTED, Q_EMBEDDINGS)
    assert arch.rank_weight_bytes("fp8", 1) == arch.weight_bytes("fp8") == Q_OTHER + Q_ROUTED + 2 * Q_EMBEDDINGS
    for dp in (2, 4, 8):
        assert arch.rank_weight_bytes("fp8", dp) == round(Q_OTHER + Q_ROUTED / dp) + 2 * Q_EMBEDDINGS
    assert arch.rank_weight_bytes("fp8", 8) == 37_628_928_000  # 37.6 GB of the model's 236.3 GB per rank
    # gpt-oss: mxfp4 experts shared out, the 16-bit rest whole
    gpt = Architecture.from_config("gpt-oss-120b", MODELS["gpt-oss-120b"].config_dir)
    whole, half = gpt.weight_bytes("fp4"), gpt.rank_weight_bytes("fp4", 2)
    assert gpt.rank_weight_bytes("fp4", 4) - half == pytest.approx((whole - half) / -2, abs=1)


def test_a_dp_profile_is_one_ranks_memory_and_kv():
    profile = load_profile(PROFILES_DIR / f"{DP8_EP}.json")
    key = profile.key
    assert (key.tp, key.attention_dp, key.expert_parallel, key.gpus) == (1, 8, True, 8)
    assert str(key) == "h200/qwen3-235b-a22b/fp8/tp1/dp8/ep/aic-0.12.0-vllm-0.24.0"
    held = Q_OTHER + Q_ROUTED // 8 + 2 * Q_EMBEDDINGS
    usable = int(1 * SPECS["h200"].memory_bytes * GPU_MEMORY_UTILISATION)
    assert profile.kv_capacity_bytes == usable - held  # one GPU's, its 4 KV heads on it alone (no replication)
    assert profile.model.weight_bytes == Q_OTHER + Q_ROUTED + 2 * Q_EMBEDDINGS  # the model's, every expert
    assert "one attention data-parallel rank of 8" in profile.memory.note
    assert any("This profile is ONE rank's" in n and "same batch" in n for n in profile.notes)
    # 8 ranks hold 1.85 x the KV of TP 8 EP over the same GPUs (which stores each of the 4 KV heads twice)
    tp8 = load_profile(PROFILES_DIR / "aic-qwen3-235b-a22b-tp8-h200-fp8-ep.json")
    assert 8 * profile.kv_capacity_bytes / tp8.kv_capacity_bytes == pytest.approx(1.85, abs=0.01)
    assert profile.speculative is not None and any("one attention data-parallel rank's" in n for n in profile.notes)


def test_a_dp_profiles_decode_is_the_estimators_per_rank_answer():
    pytest.importorskip("aiconfigurator_core")
    from tripath.calibrate.aic.estimator import Estimator, EstimatorKey

    profile = load_profile(PROFILES_DIR / f"{DP8_EP}.json")
    est = Estimator(EstimatorKey(QWEN_FP8, "h200", tp=1, weights="fp8", expert_parallel=True, attention_dp=8))
    assert "attention dp 8, expert parallel" in est.describe()
    table = profile.costs["decode"].table
    assert table is not None
    for batch in (table.rows[0], table.rows[3], table.rows[-1]):
        for context in (table.columns[5], table.columns[-3]):
            b, c = int(batch), int(context)
            assert profile.decode_ms(b, b * c) == pytest.approx(est.decode(b, c), rel=1e-5)
    # the MoE layers see 8 x the rank's batch: a rank's step costs more than the same batch on one TP 8 EP replica
    plain = Estimator(EstimatorKey(QWEN_FP8, "h200", tp=8, weights="fp8", expert_parallel=True))
    assert est.decode(64, 1024) > plain.decode(64, 1024)
    assert profile.prefill_ms(2048, 0) == pytest.approx(est.prefill(2048, 0), rel=0.004)


def test_the_catalogue_names_and_searches_the_dp_layouts():
    assert profile_name("qwen3-235b-a22b", "h200", 1, "fp8", expert_parallel=True, attention_dp=8) == DP8_EP
    assert profile_name("qwen3-235b-a22b", "h200", 2, "fp8", attention_dp=2) == "aic-qwen3-235b-a22b-tp2-dp2-h200-fp8"
    dp = [(m.name, g, t, w, e, d) for m, g, t, w, e, d in combinations() if d > 1]
    assert all(MODELS[m].moe and t * d <= 8 and (t, d) in DP_LAYOUTS for m, g, t, w, e, d in dp)
    assert {(t, d) for _, _, t, _, _, d in dp} == set(DP_LAYOUTS) and {e for *_, e, _ in dp} == {False, True}
    family = layouts("aic-qwen3-235b-a22b-tp8-h200-fp8-ep")
    assert DP8_EP in family and "aic-qwen3-235b-a22b-tp2-dp2-h200-fp8" in family
    assert family == layouts(DP8_EP)  # a DP profile's family is its model's, DP layouts included
    assert all(load_profile(PROFILES_DIR / f"{n}.json").key.gpus <= 8 for n in family)
    assert not any("-dp" in n for n in layouts("aic-llama3.1-70b-tp4-h100"))
    plain = ProfileKey("h200", "qwen3-235b-a22b", "fp8", 8, "aic-0.12.0-vllm-0.24.0")
    assert "attention_dp" not in plain.to_dict() and plain.gpus == 8  # older files keep their bytes


def test_profile_build_refuses_a_bad_attention_dp_in_one_line(tmp_path):
    from tests.cli.inprocess import run_cli

    base = ["profile", "build", "--model", "qwen3-235b-a22b", "--gpu", "h200", "--weights", "fp8",
            "--out", str(tmp_path / "p.json")]
    for extra, says in ((["--attention-dp", "3"], "invalid choice: 3"),
                        (["--tp", "2", "--attention-dp", "8"], "16 GPUs: at most 8")):
        code, out, err = run_cli([*base, *extra])
        assert code == 2 and not out and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "p.json").exists()
