"""Adaptive K and fallback in the engine: a fallen-back run is identical to plain decoding, token for token,
even when sampling; the engine falls back with an unrelated draft and climbs with a perfect one; the vLLM
counters by hand. (The cost model and the controller's rule alone: tests/core/test_speculative.py.)"""

from __future__ import annotations

import pytest
import torch

from tripath.core.speculative import AdaptiveK, ControllerConfig, SpecCosts
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.sampling import SamplingParams
from tripath.engine.speculative.decoding import SpeculativeDecoding
from tripath.engine.speculative.metrics import SpecCounters
from tripath.engine.speculative.proposers import DraftModelProposer

CFG = EngineConfig(num_blocks=64, block_size=4)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_vllm_counter_definitions_by_hand():
    c = SpecCounters()
    for k, n in [(4, 4), (4, 1), (2, 0), (0, 0)]:  # the (0, 0) plain step is not a draft
        c.record(k, n)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (3, 10, 5)
    assert c.acceptance_rate == 0.5
    assert c.mean_acceptance_length == pytest.approx(1 + 5 / 3)
    assert c.per_position_acceptance == [2 / 3, 1 / 3, 1 / 2, 1 / 2]
    assert c.per_token_acceptance == pytest.approx(5 / 7)  # 5 accepted, 2 rounds ended in a rejection
    with pytest.raises(ValueError, match="num_accepted"):
        c.record(2, 3)


@pytest.fixture(scope="module")
def models(tiny_target: LlamaModel, tiny_draft: LlamaModel) -> tuple[LlamaModel, LlamaModel]:
    return tiny_target, tiny_draft  # an unrelated draft: low acceptance


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in (6, 11)]


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.9, top_p=0.95)])
def test_fallback_output_is_identical_to_plain_decoding(models, sampling):
    target, draft = models
    never = ControllerConfig(prior_acceptance=0.0, prior_weight=1e9, probe_interval=10_000)
    proposer = DraftModelProposer(draft, CFG.num_blocks, CFG.block_size, torch.Generator().manual_seed(8))
    strategy = SpeculativeDecoding(proposer, AdaptiveK(never, SpecCosts(c=0.3)))
    eng = Engine(target, CFG, torch.Generator().manual_seed(9), strategy)
    got = eng.generate(_prompts(), 24, sampling)
    want = Engine(target, CFG, torch.Generator().manual_seed(9)).generate(_prompts(), 24, sampling)
    assert got == want  # same tokens, and with sampling the same generator draws in the same order
    assert eng.strategy.counters.num_drafts == 0 and proposer.pass_seconds == []  # the draft never ran


def test_engine_falls_back_with_an_unrelated_draft_and_climbs_with_a_perfect_one(models):
    target, draft = models
    prompts = _prompts()
    want = Engine(target, CFG).generate(prompts, 40)
    cfg = ControllerConfig(k_max=6, probe_interval=8)
    low = Engine(target, CFG, strategy=SpeculativeDecoding(DraftModelProposer(draft, 64, 4),
                                                           AdaptiveK(cfg, SpecCosts(c=0.4))))
    ids = [low.add_request(p, 40) for p in prompts]
    ks = []
    while low.has_unfinished:
        ks.append(low.step().ks)
    assert [low.output(i) for i in ids] == want
    assert low.strategy.counters.per_token_acceptance < 0.5 and all(k == 0 for k in ks[-1])  # in fallback at the end
    high = Engine(target, CFG, strategy=SpeculativeDecoding(DraftModelProposer(target, 64, 4),
                                                            AdaptiveK(cfg, SpecCosts(c=0.4))))
    ids = [high.add_request(p, 40) for p in prompts]
    ks = []
    while high.has_unfinished:
        ks.append(high.step().ks)
    assert [high.output(i) for i in ids] == want
    assert high.strategy.counters.acceptance_rate == 1.0 and max(max(k) for k in ks if k) == 6
