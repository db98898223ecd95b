"""Speculative decoding by a model's own multi-token-prediction layer (DeepSeek-V3): the shipped profiles' MTP
draft is one decoder layer's share of the target's pass plus the head, recomputed here from the estimator; its
acceptance is the DeepSeek-V3 report's published range; multi-head latent attention has a cost per cached token."""

from pathlib import Path

import pytest

from tripath.calibrate.aic.builder import MTP_ACCEPTANCE
from tripath.core.data_dirs import PROFILES_DIR
from tripath.profile.catalog import MODEL_CONFIGS
from tripath.profile.profile import load_profile

DEEPSEEK = ("aic-deepseek-v3-tp8-h200-fp8", "aic-deepseek-v3-tp8-h200-fp8-ep")
LAYERS = 61  # DeepSeek-V3's config.json num_hidden_layers


@pytest.mark.parametrize("name", DEEPSEEK)
def test_the_mtp_draft_is_one_layer_of_the_target_plus_its_head(name):
    pytest.importorskip("aiconfigurator_core")
    from tripath.calibrate.aic.estimator import Estimator, EstimatorKey

    profile = load_profile(PROFILES_DIR / f"{name}.json")
    spec = profile.speculative
    assert spec is not None and spec.draft_model == "deepseek-v3 MTP (tp8)" and spec.k == 1
    est = Estimator(EstimatorKey(Path(MODEL_CONFIGS / "DeepSeek-V3"), "h200", "vllm", None, 8, "fp8",
                                 expert_parallel=profile.key.expert_parallel))
    ops = est.decode_ops(1, 1)
    head = sum(ms for n, ms, _ in ops if "embedding" in n or "logits" in n)
    body = sum(ms for n, ms, _ in ops if "attention" not in n) - head
    rc = spec.round_costs
    assert rc is not None
    assert rc.draft.linear_ms(1) == pytest.approx(body / LAYERS + head, rel=1e-5)  # points kept to 6 digits
    assert rc.draft.attention_per_token.value == pytest.approx(rc.target.attention_per_token.value / LAYERS,
                                                               rel=1e-5)
    # one layer and the head: a few per cent of the target's pass, so a round costs about one verify pass
    assert 0.005 < spec.cost_ratio.value < 0.06
    assert 1.0 <= spec.verify_cost_ratio.value < 1.1


@pytest.mark.parametrize("name", DEEPSEEK)
def test_mla_attention_costs_per_cached_token_and_mtp_acceptance_is_the_published_range(name):
    profile = load_profile(PROFILES_DIR / f"{name}.json")
    assert profile.speculative is not None and profile.speculative.round_costs is not None
    assert profile.speculative.round_costs.target.attention_per_token.value > 0
    low, high = MTP_ACCEPTANCE
    assert (low, high) == (0.85, 0.90)
    for task in profile.acceptance.values():
        assert task.mean == pytest.approx((low + high) / 2) and task.k == 1 and task.source == "derived"
        assert "2412.19437" in task.note
