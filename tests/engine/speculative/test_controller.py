"""Adaptive K and fallback: the cost model against hand-computed values, the controller falls back
at low acceptance and raises K at high acceptance (with hysteresis and re-probes), and in the
engine a fallen-back run is identical to plain decoding, token for token, even when sampling."""

from __future__ import annotations

import pytest
import torch

from tripath.engine.engine import Engine, EngineConfig
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.sampling import SamplingParams
from tripath.engine.speculative.controller import (
    AdaptiveK,
    ControllerConfig,
    SpecCosts,
    best_k,
    break_even_acceptance,
    expected_tokens,
    predicted_speedup,
)
from tripath.engine.speculative.engine import SpeculativeEngine
from tripath.engine.speculative.metrics import SpecCounters
from tripath.engine.speculative.proposers import DraftModelProposer

CFG = EngineConfig(num_blocks=64, block_size=4)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_expected_tokens_and_break_even_by_hand():
    assert expected_tokens(5, 0.75) == pytest.approx((1 - 0.75**6) / 0.25)  # 3.288...
    assert expected_tokens(3, 1.0) == 4.0 and expected_tokens(4, 0.0) == 1.0
    costs = SpecCosts(c=0.3)  # SEEDS.md: c ~ 0.3 puts break-even near 0.62 at K = 5
    a = break_even_acceptance(5, costs)
    assert 0.615 < a < 0.63
    assert predicted_speedup(5, a, costs) == pytest.approx(1.0, abs=1e-9)
    # dialogue in the seed table: a = 0.75, K = 5 -> 3.288 / 2.5 = 1.315x tokens per unit time
    assert predicted_speedup(5, 0.75, costs) == pytest.approx(3.2881 / 2.5, rel=1e-3)
    assert break_even_acceptance(3, SpecCosts(c=1.2)) == 1.0  # a draft slower than the target never pays


def test_best_k_grows_with_acceptance():
    costs = SpecCosts(c=0.1, verify_base=1.0, verify_per_token=0.02)
    ks = [best_k(a, costs, 8)[0] for a in (0.3, 0.6, 0.8, 0.95)]
    assert ks == sorted(ks) and ks[0] < ks[-1] == 8


def _feed(ctrl: AdaptiveK, rid: int, rounds: int, accept_all: bool) -> list[int]:
    chosen = []
    for _ in range(rounds):
        k = ctrl.choose(rid)
        chosen.append(k)
        ctrl.observe(rid, k, k if accept_all else 0)
    return chosen


def test_controller_falls_back_at_low_acceptance_and_reprobes():
    cfg = ControllerConfig(k_max=6, probe_interval=5, probe_k=2)
    ctrl = AdaptiveK(cfg, SpecCosts(c=0.2))
    ks = _feed(ctrl, 0, 40, accept_all=False)
    assert ks[0] > 0 and 0 in ks
    first_zero = ks.index(0)
    tail = ks[first_zero:]
    # in fallback: plain rounds, a probe of probe_k every probe_interval + 1 rounds, never back to speculating
    assert set(tail) == {0, 2}
    probes = [i for i, k in enumerate(tail) if k]
    assert probes and all(b - a == cfg.probe_interval + 1 for a, b in zip(probes, probes[1:], strict=False))


def test_controller_raises_k_at_high_acceptance_and_resumes_after_fallback():
    cfg = ControllerConfig(k_max=8, prior_acceptance=0.1, probe_interval=3)
    ctrl = AdaptiveK(cfg, SpecCosts(c=0.2))
    assert ctrl.choose(1) == 0  # the prior alone says no K pays at c = 0.2 -> start in fallback
    ks = _feed(ctrl, 1, 30, accept_all=True)
    assert ks[-1] == 8 and ks[-1] > max(ks[:4])  # probes succeeded, K climbed to k_max


def test_hysteresis_band_holds_the_state_between_exit_and_enter():
    costs = SpecCosts(c=0.4)
    # decay 0 and no prior: the estimate is the last round's, accepted / (accepted + 1 rejection)
    cfg = ControllerConfig(k_max=5, decay=0.0, engine_decay=0.0, exit_speedup=1.0, enter_speedup=1.25, prior_weight=0.0)
    ctrl = AdaptiveK(cfg, costs)
    assert 1.0 < best_k(2 / 3, costs, 5)[1] < 1.25  # a = 2/3 lies inside the band
    ctrl.observe(7, 5, 2)
    assert ctrl.acceptance(7) == pytest.approx(2 / 3)
    assert ctrl.choose(7) > 0  # speculating stays speculating inside the band
    ctrl.observe(7, 5, 0)
    assert ctrl.choose(7) == 0  # a = 0: falls back
    ctrl.observe(7, 5, 2)
    assert ctrl.choose(7) == 0  # back inside the band: stays fallen back (no flapping)
    ctrl.observe(7, 5, 5)
    assert ctrl.choose(7) > 0  # a = 1 clears enter_speedup: resumes


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
def models() -> tuple[LlamaModel, LlamaModel]:
    target = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()
    draft = LlamaModel(PRESETS["tiny-mha"], torch.Generator().manual_seed(2)).eval()  # unrelated: low acceptance
    return target, draft


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in (6, 11)]


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.9, top_p=0.95)])
def test_fallback_output_is_identical_to_plain_decoding(models, sampling):
    target, draft = models
    never = ControllerConfig(prior_acceptance=0.0, prior_weight=1e9, probe_interval=10_000)
    proposer = DraftModelProposer(draft, CFG.num_blocks, CFG.block_size, torch.Generator().manual_seed(8))
    eng = SpeculativeEngine(target, proposer, CFG, AdaptiveK(never, SpecCosts(c=0.3)), torch.Generator().manual_seed(9))
    got = eng.generate(_prompts(), 24, sampling)
    want = Engine(target, CFG, torch.Generator().manual_seed(9)).generate(_prompts(), 24, sampling)
    assert got == want  # same tokens, and with sampling the same generator draws in the same order
    assert eng.counters.num_drafts == 0 and proposer.pass_seconds == []  # the draft never ran


def test_engine_falls_back_with_an_unrelated_draft_and_climbs_with_a_perfect_one(models):
    target, draft = models
    prompts = _prompts()
    want = Engine(target, CFG).generate(prompts, 40)
    cfg = ControllerConfig(k_max=6, probe_interval=8)
    low = SpeculativeEngine(target, DraftModelProposer(draft, 64, 4), CFG, AdaptiveK(cfg, SpecCosts(c=0.4)))
    ids = [low.add_request(p, 40) for p in prompts]
    ks = []
    while low.has_unfinished:
        ks.append(low.step().ks)
    assert [low.output(i) for i in ids] == want
    assert low.counters.per_token_acceptance < 0.5 and all(k == 0 for k in ks[-1])  # in fallback at the end
    high = SpeculativeEngine(target, DraftModelProposer(target, 64, 4), CFG, AdaptiveK(cfg, SpecCosts(c=0.4)))
    ids = [high.add_request(p, 40) for p in prompts]
    ks = []
    while high.has_unfinished:
        ks.append(high.step().ks)
    assert [high.output(i) for i in ids] == want
    assert high.counters.acceptance_rate == 1.0 and max(max(k) for k in ks if k) == 6


def test_a_fallen_back_sequence_reverts_to_the_engine_acceptance():
    cfg = ControllerConfig(k_max=6, probe_interval=1000)  # no probes: only the fade can bring it back
    ctrl = AdaptiveK(cfg, SpecCosts(c=0.6))  # break-even a = 0.6 at K = 1
    for _ in range(30):
        ctrl.observe(1, 4, 4)  # another sequence accepts everything: the engine's long-run a is high
    for _ in range(10):
        ctrl.observe(2, 4, 0)  # a bad run for sequence 2: its estimate (shrunk to the engine's) < 0.6
    assert ctrl.choose(2) == 0
    ks = [ctrl.choose(2) for _ in range(30)]
    assert ks[0] == 0 and ks[-1] > 0  # its own bad evidence faded; it speculates again
