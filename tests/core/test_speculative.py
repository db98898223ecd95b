"""Speculative decoding's cost model against hand-computed values and closed forms (E, round cost, speedup,
latency ratio, break-even, best K against brute force), and the adaptive controller's rule: it falls back at
low acceptance and raises K at high acceptance, with hysteresis, re-probes and the fade to the engine's a."""

from __future__ import annotations

import itertools
import math

import pytest

from tripath.core.speculative import (
    AdaptiveK,
    ControllerConfig,
    SpecCosts,
    acceptance_for_tokens,
    best_k,
    breakeven_acceptance,
    expected_tokens,
    latency_ratio,
    predicted_speedup,
    round_cost,
)


def test_expected_tokens_at_zero_one_and_a_half():
    assert expected_tokens(5, 0.0) == 1.0  # the first draft is rejected: only the target's token
    assert expected_tokens(5, 1.0) == 6.0  # every draft accepted: K + 1
    assert expected_tokens(3, 0.5) == 1 + 0.5 + 0.25 + 0.125  # 1.875, exact in binary
    assert expected_tokens(2, 0.5) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(5, 0.999999) == pytest.approx(6.0, rel=1e-5)  # continuous at a = 1
    assert expected_tokens(0, 0.7) == 1.0
    with pytest.raises(ValueError, match="acceptance must be in"):
        expected_tokens(3, 1.5)


def test_round_cost_speedup_and_latency_ratio_by_hand():
    assert round_cost(0, 0.3, 1.4) == 1.0  # a plain decode step
    assert round_cost(4, 0.25, 1.5) == 2.5
    assert round_cost(4, 0.25, 1.0, 0.125) == 2.5  # v(4) = 1 + 0.125 * 4
    # a measured v(K) (no per-token term) gives K c + v bit for bit, as the simulator's round factor did
    for k, c, v in itertools.product((1, 3, 5, 7), (0.1, 0.265262, 0.3), (1.0, 1.1, 1.37)):
        assert round_cost(k, c, v) == k * c + v
    costs = SpecCosts(c=0.25, verify_base=1.0, verify_per_token=0.125)
    assert costs.round_cost(4) == 2.5
    assert predicted_speedup(0, 0.3, costs) == 1.0
    assert predicted_speedup(3, 0.5, SpecCosts(c=0.25)) == 1.875 / 1.75
    assert latency_ratio(2, 0.5, SpecCosts(c=0.25)) == pytest.approx(1.5 / 1.75)


def test_expected_tokens_and_break_even_by_hand():
    assert expected_tokens(5, 0.75) == pytest.approx((1 - 0.75**6) / 0.25)  # 3.288...
    assert expected_tokens(3, 1.0) == 4.0 and expected_tokens(4, 0.0) == 1.0
    costs = SpecCosts(c=0.3)  # SEEDS.md: c ~ 0.3 puts break-even near 0.62 at K = 5
    a = breakeven_acceptance(5, costs)
    assert 0.615 < a < 0.63
    assert predicted_speedup(5, a, costs) == pytest.approx(1.0, abs=1e-9)
    # dialogue in the seed table: a = 0.75, K = 5 -> 3.288 / 2.5 = 1.315x tokens per unit time
    assert predicted_speedup(5, 0.75, costs) == pytest.approx(3.2881 / 2.5, rel=1e-3)
    assert breakeven_acceptance(3, SpecCosts(c=1.2)) is None  # a draft slower than the target never pays


@pytest.mark.parametrize("c, v", [(0.3, 1.0), (0.5, 1.0), (0.2, 1.3)])
def test_k1_is_c_plus_v_minus_one(c, v):
    # K = 1: E = 1 + a, so 1 + a* = c + v
    assert breakeven_acceptance(1, SpecCosts(c, v)) == pytest.approx(c + v - 1.0, abs=1e-10)


@pytest.mark.parametrize("c, v", [(0.3, 1.0), (0.25, 1.1), (0.4, 1.0)])
def test_k2_solves_the_quadratic(c, v):
    # K = 2: 1 + a + a^2 = 2c + v  ->  a* = (-1 + sqrt(1 - 4 (1 - 2c - v))) / 2
    expected = (-1.0 + math.sqrt(1.0 - 4.0 * (1.0 - 2.0 * c - v))) / 2.0
    assert breakeven_acceptance(2, SpecCosts(c, v)) == pytest.approx(expected, abs=1e-10)


def test_breakeven_boundaries_always_and_never():
    assert breakeven_acceptance(4, SpecCosts(0.0, 0.9)) == 0.0  # a round costs less than one step: pays at a = 0
    assert breakeven_acceptance(3, SpecCosts(1.0, 1.0)) is None  # K c + v = K + 1: can never pay
    with pytest.raises(ValueError):
        breakeven_acceptance(0, SpecCosts(0.3, 1.0))


def test_best_k_grows_with_acceptance():
    costs = SpecCosts(c=0.1, verify_base=1.0, verify_per_token=0.02)
    ks = [best_k(lambda k, a=a: predicted_speedup(k, a, costs), 8)[0] for a in (0.3, 0.6, 0.8, 0.95)]
    assert ks == sorted(ks) and ks[0] < ks[-1] == 8


@pytest.mark.parametrize("a", [0.2, 0.55, 0.75, 0.9, 1.0])
@pytest.mark.parametrize("costs", [SpecCosts(0.05), SpecCosts(0.3), SpecCosts(0.1, 1.0, 0.05)])
def test_best_k_is_the_brute_force_argmax(a, costs):
    table = {k: expected_tokens(k, a) / (k * costs.c + costs.verify_base + costs.verify_per_token * k)
             for k in range(1, 9)}
    k, s = best_k(lambda kk: predicted_speedup(kk, a, costs), 8)
    assert s == max(table.values()) and k == min(kk for kk, v in table.items() if v == s)


def test_best_k_takes_the_smallest_k_on_ties():
    assert best_k(lambda k: 1.0, 5) == (1, 1.0)
    assert best_k(lambda k: -abs(k - 3.5), 6) == (3, -0.5)


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
    assert 1.0 < best_k(lambda k: predicted_speedup(k, 2 / 3, costs), 5)[1] < 1.25  # a = 2/3 lies inside the band
    ctrl.observe(7, 5, 2)
    assert ctrl.acceptance(7) == pytest.approx(2 / 3)
    assert ctrl.choose(7) > 0  # speculating stays speculating inside the band
    ctrl.observe(7, 5, 0)
    assert ctrl.choose(7) == 0  # a = 0: falls back
    ctrl.observe(7, 5, 2)
    assert ctrl.choose(7) == 0  # back inside the band: stays fallen back (no flapping)
    ctrl.observe(7, 5, 5)
    assert ctrl.choose(7) > 0  # a = 1 clears enter_speedup: resumes


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


def test_acceptance_for_tokens_inverts_expected_tokens():
    for k in (1, 3, 5):
        for a in (0.0, 0.3, 0.75, 0.99):
            assert acceptance_for_tokens(k, expected_tokens(k, a)) == pytest.approx(a, abs=1e-9)
    # K + 1: every draft accepted (E's cancellation near a = 1 limits the bisection to about 1e-9)
    assert acceptance_for_tokens(4, 5.0) == pytest.approx(1.0, abs=1e-8)
    for bad in (0.5, 6.5):
        with pytest.raises(ValueError, match=r"\[1, 6\]"):
            acceptance_for_tokens(5, bad)
