"""Mixture-of-experts and FP8 models: the model description read from HF configs, its weight and KV
bytes by hand, the MLA invariant, expert-parallel naming, the shipped MoE profiles against the weight-read floors,
and every shipped profile re-saved byte for byte."""

import json
from pathlib import Path

import pytest

from tripath.calibrate.aic.architecture import Architecture
from tripath.calibrate.aic.builder import model_section, weight_read_floor_ms
from tripath.calibrate.hardware import SPECS
from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError
from tripath.profile.catalog import MODEL_CONFIGS, MODELS, combinations, layouts, profile_name
from tripath.profile.profile import ModelSpec, ProfileKey, load_profile

MIXTRAL = MODEL_CONFIGS / "Mixtral-8x7B-v0.1"
DEEPSEEK = MODEL_CONFIGS / "DeepSeek-V3"
QWEN_FP8 = MODEL_CONFIGS / "Qwen3-235B-A22B-FP8"
GPT_OSS = MODEL_CONFIGS / "gpt-oss-120b"
ALL_SHIPPED = sorted(PROFILES_DIR.glob("*.json"))
MOE_SHIPPED = sorted(p for p in PROFILES_DIR.glob("aic-*.json")
                     if any(p.stem.startswith(f"aic-{m.short}-") for m in MODELS.values() if m.moe))

# Mixtral-8x7B by hand (config: hidden 4096, 32 layers, 32 heads, 8 KV heads of 128, 8 experts of 14336, top 2,
# vocab 32000, untied)
MIX_ATTENTION = 4096 * 128 * (32 * 2 + 8 * 2)  # q, o + k, v
MIX_EXPERT = 3 * 4096 * 14336  # gate, up, down
MIX_LAYER = MIX_ATTENTION + 8 * MIX_EXPERT + 4096 * 8 + 2 * 4096  # + router + two norms
MIX_EMBEDDINGS = 2 * 32000 * 4096 + 4096  # embedding, LM head, final norm

# DeepSeek-V3 by hand (hidden 7168, 61 layers of which the first 3 dense (18432), 128 heads, MLA q_lora 1536,
# kv_lora 512, qk_nope 128, qk_rope 64, v 128; 256 routed experts of 2048 + 1 shared, top 8, vocab 129280)
DS_MLA = (7168 * 1536 + 1536 + 1536 * 128 * (128 + 64)  # q down, its norm, q up
          + 7168 * (512 + 64) + 512 + 512 * 128 * (128 + 128)  # kv down (+ rope key), its norm, kv up
          + 128 * 128 * 7168)  # o
DS_EXPERT = 3 * 7168 * 2048
DS_LAYERS = (61 * (DS_MLA + 2 * 7168) + 3 * 3 * 7168 * 18432
             + 58 * (256 * DS_EXPERT + DS_EXPERT + 7168 * 256))  # routed + shared + router
DS_EMBEDDINGS = 2 * 129280 * 7168 + 7168


def test_mixtral_parameters_weight_bytes_and_kv_by_hand():
    arch = Architecture.from_config("mixtral-8x7b", MIXTRAL)
    assert arch.attention == "gqa" and arch.moe is not None and arch.moe.dense_layers == 0
    assert arch.params() == (32 * MIX_LAYER, MIX_EMBEDDINGS)
    assert 32 * MIX_LAYER + MIX_EMBEDDINGS == 46_702_792_704  # the published 46.7B
    assert arch.weight_bytes("fp16") == 2 * (32 * MIX_LAYER + MIX_EMBEDDINGS)
    assert arch.weight_bytes("fp8") == 32 * MIX_LAYER + 2 * MIX_EMBEDDINGS  # embeddings and LM head 16-bit
    active = 32 * (MIX_LAYER - 6 * MIX_EXPERT) + 32000 * 4096 + 4096  # 2 of 8 experts; LM head, not the lookup
    assert arch.active_params() == active  # 12.7B (the published 12.9B counts the input embedding too)
    assert arch.kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2 == 131_072
    spec = model_section(arch, "fp8", "fp16")
    assert spec.attention == "gqa" and spec.kv_latent_dim is None and spec.moe is not None
    assert (spec.moe.experts, spec.moe.top_k, spec.moe.active_params) == (8, 2, active)
    assert spec.moe.active_weight_bytes == active - (32000 * 4096 + 4096) + 2 * (32000 * 4096 + 4096)


def test_deepseek_v3_parameters_weight_bytes_and_mla_kv_by_hand():
    arch = Architecture.from_config("deepseek-v3", DEEPSEEK)
    assert arch.attention == "mla" and arch.quantization == "fp8_block" and arch.mtp_layers == 1
    assert arch.moe is not None and (arch.moe.dense_layers, arch.moe.shared_experts) == (3, 1)
    assert arch.params() == (DS_LAYERS, DS_EMBEDDINGS)
    assert DS_LAYERS + DS_EMBEDDINGS == 671_026_404_352  # the published 671B (MTP layer not counted)
    assert arch.weight_bytes("fp8") == DS_LAYERS + 2 * DS_EMBEDDINGS
    # MLA: one latent of kv_lora_rank + qk_rope_head_dim per layer and token, not K and V per head
    assert arch.kv_bytes_per_token(2) == 61 * (512 + 64) * 2 == 70_272
    assert arch.kv_replication(8) == 8  # the latent on every GPU of the group
    spec = model_section(arch, "fp8", "fp16")
    assert (spec.attention, spec.kv_latent_dim, spec.kv_bytes_per_token) == ("mla", 576, 70_272)
    assert 36e9 < spec.moe.active_params < 38e9  # the published 37B activated


def test_qwen3_moe_and_gpt_oss_shapes_and_precisions():
    qwen = Architecture.from_config("qwen3-235b-a22b", QWEN_FP8)
    assert qwen.moe is not None and (qwen.moe.experts, qwen.moe.top_k, qwen.moe.expert_intermediate) == (128, 8, 1536)
    assert 235.0e9 < sum(qwen.params()) < 235.2e9 and 21e9 < qwen.active_params() < 23e9
    assert qwen.quant_modes("fp8", "x") == ("fp8_block", "fp8_block")  # 128 x 128 block-scaled checkpoint
    assert qwen.kv_replication(8) == 2  # 4 KV heads over 8 GPUs: each held twice
    bf16 = Architecture.from_config("qwen3-235b-a22b", MODEL_CONFIGS / "Qwen3-235B-A22B")
    assert bf16.quant_modes("fp8", "x") == ("fp8", "fp8") and bf16.params() == qwen.params()
    oss = Architecture.from_config("gpt-oss-120b", GPT_OSS)
    assert oss.quantization == "mxfp4" and oss.quant_modes("fp4", "x") == ("bfloat16", "w4a16_mxfp4")
    assert 116.8e9 < sum(oss.params()) < 116.9e9 and 5.1e9 < oss.active_params() < 5.2e9  # published 116.8B, 5.1B
    layers, embeddings = oss.params()
    experts = 36 * 128 * (3 * 2880 * 2880 + 2 * 2880 + 2880)  # with their biases
    assert oss.weight_bytes("fp4") == round((layers - experts) * 2 + experts * 17 / 32) + 2 * embeddings
    with pytest.raises(InputError, match="quantization_config"):
        oss.quant_modes("fp8", "x")
    with pytest.raises(InputError, match="weights"):
        Architecture.from_config("mixtral", MIXTRAL).quant_modes("fp4", "x")


def test_weight_bytes_against_aiconfigurator_core_inventory():
    """The estimator's own weight inventory (its ops' get_weights, tp 1) against ours, the differences named."""
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model

    def theirs(folder: Path, gemm: str, moe: str) -> int:
        cfg = build_model_config(tp_size=1, pp_size=1, attention_dp_size=1, moe_tp_size=1, moe_ep_size=1,
                                 gemm_quant_mode=gemm, moe_quant_mode=moe, kvcache_quant_mode="bfloat16",
                                 fmha_quant_mode="bfloat16")
        return round(sum(op.get_weights() for op in get_model(str(folder), cfg, "vllm").context_ops))

    # Mixtral bf16: the package leaves out the LM head (32000 x 4096) and the RMSNorms; otherwise identical
    mine = Architecture.from_config("mixtral", MIXTRAL).weight_bytes("fp16")
    assert theirs(MIXTRAL, "bfloat16", "bfloat16") == mine - 2 * (32000 * 4096 + 32 * 2 * 4096 + 4096)
    # DeepSeek-V3 fp8: the package makes all 61 layers MoE (ignores first_k_dense_replace = 3), keeps the router
    # 16-bit and leaves out the norms: +4.9 % over ours, all of it those three terms
    mine = Architecture.from_config("deepseek-v3", DEEPSEEK).weight_bytes("fp8")
    norms = 61 * (2 * 7168 + 1536 + 512) + 2 * 7168  # layer norms at 1 byte, the final norm 16-bit
    expected = (mine - 3 * 3 * 7168 * 18432 + 3 * 257 * DS_EXPERT  # 3 dense MLPs -> 3 MoE layers
                - 58 * 7168 * 256 + 61 * 7168 * 256 * 2 - norms)  # the router 16-bit on all 61 layers
    assert theirs(DEEPSEEK, "fp8_block", "fp8_block") == expected
    assert expected / mine == pytest.approx(1.049, abs=0.001)


def test_a_malformed_moe_config_names_the_field(tmp_path: Path):
    def bad(source: Path, **edits: object) -> Path:
        folder = tmp_path / "_".join(edits)
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**json.loads((source / "config.json").read_text()),
                                                        **edits}))
        return folder

    cases = [(bad(MIXTRAL, num_experts_per_tok=9), "num_experts_per_tok"),
             (bad(DEEPSEEK, first_k_dense_replace=61), "first_k_dense_replace"),
             (bad(DEEPSEEK, kv_lora_rank="512"), "kv_lora_rank"),
             (bad(QWEN_FP8, moe_intermediate_size=0), "moe_intermediate_size"),
             (bad(QWEN_FP8, mlp_only_layers=[94]), "mlp_only_layers"),
             (bad(GPT_OSS, quantization_config={"quant_method": "awq"}), "quantization_config.quant_method")]
    for folder, field in cases:
        with pytest.raises(InputError) as err:
            Architecture.from_config("bad", folder)
        assert err.value.field == field and str(folder / "config.json") in str(err.value)


def test_model_spec_invariant_per_attention_kind():
    base = dict(name="m", layers=61, heads=128, kv_heads=128, head_dim=192, hidden=7168, params=10, dtype_bytes=2,
                weight_bytes=10)
    mla = ModelSpec(**base, kv_bytes_per_token=61 * 576 * 2, attention="mla", kv_latent_dim=576)
    assert mla.attention_kind == "mla" and mla.to_dict()["kv_latent_dim"] == 576
    with pytest.raises(InputError, match="layers\\*kv_latent_dim\\*dtype_bytes = 70272"):
        ModelSpec(**base, kv_bytes_per_token=2 * 61 * 128 * 192 * 2, attention="mla", kv_latent_dim=576)
    with pytest.raises(InputError, match="kv_latent_dim"):
        ModelSpec(**base, kv_bytes_per_token=2 * 61 * 128 * 192 * 2, kv_latent_dim=576)
    with pytest.raises(InputError, match="kv_heads\\*head_dim"):
        ModelSpec(**base, kv_bytes_per_token=61 * 576 * 2, attention="mha")
    dense = ModelSpec(**base, kv_bytes_per_token=2 * 61 * 128 * 192 * 2)
    assert dense.attention_kind == "mha" and {"attention", "kv_latent_dim", "moe"}.isdisjoint(dense.to_dict())


def test_expert_parallel_naming_and_key():
    assert profile_name("mixtral-8x7b", "h100-sxm", 8, "fp16") == "aic-mixtral-8x7b-tp8-h100"
    assert profile_name("mixtral-8x7b", "h100-sxm", 8, "fp8", expert_parallel=True) == \
        "aic-mixtral-8x7b-tp8-h100-fp8-ep"
    assert profile_name("mixtral-8x7b", "h200", 4, "fp8", "sglang", True) == "aic-mixtral-8x7b-tp4-h200-fp8-ep-sglang"
    assert profile_name("gpt-oss-120b", "b200", 8, "fp4") == "aic-gpt-oss-120b-tp8-b200-fp4"
    key = ProfileKey("h200", "deepseek-v3", "fp8", 8, "aic-0.12.0-vllm-0.24.0", expert_parallel=True)
    assert str(key) == "h200/deepseek-v3/fp8/tp8/ep/aic-0.12.0-vllm-0.24.0" and key.to_dict()["expert_parallel"]
    plain = ProfileKey("h200", "deepseek-v3", "fp8", 8, "aic-0.12.0-vllm-0.24.0")
    assert "/ep" not in str(plain) and "expert_parallel" not in plain.to_dict()  # older files keep their bytes
    moe = [(m.name, g, t, w, e) for m, g, t, w, e, _ in combinations() if m.moe]
    assert {e for *_, e in moe} == {False, True} and {g for _, g, *_ in moe} == {"h100-sxm", "h200", "b200"}
    assert not any(g == "b200" for m, g, *_ in moe if m in ("qwen3-235b-a22b", "deepseek-v3"))  # block-fp8 rows
    assert not any(e or d > 1 for m, *_, e, d in combinations() if not m.moe)
    family = layouts("aic-mixtral-8x7b-tp8-h100")
    assert "aic-mixtral-8x7b-tp8-h100-ep" in family and "aic-mixtral-8x7b-tp4-h200" in family


@pytest.mark.parametrize("path", MOE_SHIPPED, ids=[p.stem for p in MOE_SHIPPED])
def test_a_moe_profile_decodes_between_the_active_and_all_expert_floors(path: Path):
    profile = load_profile(path)
    moe = profile.model.moe
    assert moe is not None and profile.key.expert_parallel == path.stem.endswith("-ep")
    assert (profile.key.attention_dp > 1) == ("-dp" in path.stem)
    one = profile.decode_ms(1, 1024)
    active, every = weight_read_floor_ms(profile), weight_read_floor_ms(profile, all_experts=True)
    # over all the replica's GPUs (tp x attention dp): a lower bound on what one rank's GPUs read
    assert active == pytest.approx(moe.active_weight_bytes / profile.key.gpus
                                   / (SPECS[profile.key.hardware].memory_tbps * 1e12) * 1e3)
    # at least the active weights read; not absurdly above reading them all: the most, 7.0 x, is Mixtral fp8 with
    # EP over 8 B200s (the measured per-tensor fp8 MoE kernels at one token are slower than the bf16 ones: 14.7 ms
    # against 5.2 ms a step over 4 H100s)
    # with attention DP a rank's one sequence puts D tokens through the MoE layers and every GPU reads the non-expert
    # weights whole: the most, 11.5 x, is Mixtral fp8 as 8 ranks of one H200 (the same per-tensor fp8 MoE kernels)
    assert active < one < (8 if profile.key.attention_dp == 1 else 12) * every
    # speculative: Qwen3-235B's Qwen3-0.6B draft and DeepSeek-V3's own MTP layer (test_aic_mtp.py); none elsewhere
    assert (profile.speculative is not None) == (profile.key.model in ("qwen3-235b-a22b", "deepseek-v3"))
    assert not profile.sequence_parallel
    assert (not profile.compression) == (profile.model.attention == "mla")


def test_the_catalogue_ships_the_moe_models():
    names = {p.stem for p in MOE_SHIPPED}
    assert {"aic-mixtral-8x7b-tp8-h100", "aic-mixtral-8x7b-tp8-h100-ep", "aic-qwen3-235b-a22b-tp8-h200-fp8-ep",
            "aic-deepseek-v3-tp8-h200-fp8", "aic-gpt-oss-120b-tp8-h100-fp4"} <= names
    index = json.loads((PROFILES_DIR.parent / "aic-profiles.json").read_text())
    catalogue = {profile_name(m.short, g, tp, w, expert_parallel=ep, attention_dp=dp)
                 for m, g, tp, w, ep, dp in combinations()}
    assert names & catalogue <= set(index["built"])
    # the rest are the layouts the silicon validation serves (docs/silicon_validation.md): SGLang, TP 1 and 2
    from tripath.planning.validation.silicon import load_rows

    assert names - catalogue <= {r.profile for r in load_rows()}
    # vLLM refuses a 128 x 128 block-fp8 expert split 8 ways (1536 / 8 = 192): the estimator too
    assert "block" in index["skipped"]["aic-qwen3-235b-a22b-tp8-h200-fp8"]


@pytest.mark.parametrize("path", ALL_SHIPPED, ids=[p.stem for p in ALL_SHIPPED])
def test_every_shipped_profile_resaves_byte_identically(path: Path):
    assert load_profile(path).to_json() == path.read_text()


def test_a_shipped_moe_profile_is_what_the_builder_makes_today():
    from tripath.calibrate.aic.builder import build_profile

    model = MODELS["gpt-oss-120b"]
    profile = build_profile(model.name, model.config_dir, "h100-sxm", 8, "fp4", expert_parallel=True)
    assert profile.to_json() == (PROFILES_DIR / "aic-gpt-oss-120b-tp8-h100-fp4-ep.json").read_text()
    assert str(profile.key) == "h100-sxm/gpt-oss-120b/fp4/tp8/ep/aic-0.12.0-vllm-0.24.0"
    with pytest.raises(InputError, match="expert_parallel"):
        build_profile("llama-2-7b", MODELS["llama-2-7b"].config_dir, "h100-sxm", 1, expert_parallel=True)
