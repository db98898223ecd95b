"""The profile's optional costs.step_overhead (overhead_v1) in the simulator: hand-computed values, exactly one
term per iteration on every loop, and profiles without it priced exactly as before."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import TINY as SHIPPED
from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient, CostModel
from tripath.profile.formulas import overhead_v1
from tripath.profile.profile import load_profile, save_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.provenance import one_line, strategies
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.strategy import SpeculativeSpec, StrategySpec, TieredSpec
from tripath.simulator.step_model import Decode, PrefillChunk

# the shipped profile without its measured overhead: each test adds the overhead it computes by hand
TINY = dataclasses.replace(SHIPPED, costs={k: v for k, v in SHIPPED.costs.items() if k != "step_overhead"})


def with_overhead(profile, o0: float, o_seq: float = 0.0, o_tok: float = 0.0, formula: str = "overhead_v1"):
    coefficients = {"o0": Coefficient(o0, "ms", "fitted"), "o_seq": Coefficient(o_seq, "ms/sequence", "fitted"),
                    "o_tok": Coefficient(o_tok, "ms/token", "fitted")}
    model = CostModel(formula, coefficients, ("sequences", "new_tokens"),
                      {"sequences": (1.0, 32.0), "new_tokens": (1.0, 512.0)})
    return dataclasses.replace(profile, costs={**profile.costs, "step_overhead": model})


def test_formula_by_hand() -> None:
    assert overhead_v1(sequences=4, new_tokens=100, o0=0.5, o_seq=0.125, o_tok=0.01) == pytest.approx(2.0)
    assert overhead_v1(sequences=1, new_tokens=1, o0=0.0, o_seq=0.0, o_tok=0.0) == 0.0


def test_profile_round_trip_and_wrong_inputs(tmp_path) -> None:
    profile = with_overhead(TINY, 0.25, 0.01, 0.001)
    save_profile(profile, tmp_path / "p.json")
    again = load_profile(tmp_path / "p.json")
    assert again.costs["step_overhead"] == profile.costs["step_overhead"]
    wrong = CostModel(TINY.costs["decode"].formula, TINY.costs["decode"].coefficients, ("batch", "total_context"),
                      TINY.costs["decode"].domain)
    with pytest.raises(InputError, match="costs.step_overhead.inputs"):
        dataclasses.replace(TINY, costs={**TINY.costs, "step_overhead": wrong})


def test_iteration_cost_adds_the_overhead_once_per_iteration() -> None:
    base = IterationCost.from_profile(TINY)
    cost = IterationCost.from_profile(with_overhead(TINY, 0.5, 0.125, 0.01))
    d = TINY.decode_ms(3, 900)
    # decode-only: N = B = 3 sequences, T = 3 new tokens -> 0.5 + 0.375 + 0.03 = 0.905 ms
    assert cost.decode_one_s(3, 900) == pytest.approx((d + 0.905) / 1000, rel=1e-12)
    assert cost.decode_s(3, np.array([900, 1200]))[0] == cost.decode_one_s(3, 900)  # array == scalar, bit for bit
    # mixed: 3 decodes + prompts of 10 and 20 -> N = 5, T = 33 -> 0.5 + 0.625 + 0.33 = 1.455 ms
    assert cost.mixed_s([10, 20], 3, 900) * 1000 == pytest.approx(base.mixed_s([10, 20], 3, 900) * 1000 + 1.455)
    # chunked: 2 decodes + a chunk of 64 after 128 -> N = 3, T = 66 -> 0.5 + 0.375 + 0.66 = 1.535 ms
    assert cost.chunked_s([(64, 128)], 2, 500) * 1000 == pytest.approx(base.chunked_s([(64, 128)], 2, 500) * 1000
                                                                       + 1.535)
    assert cost.overhead_ms(3, 3) == pytest.approx(0.905) and base.overhead_ms(3, 3) == 0.0


def _one_request(output_tokens: int, prompt_tokens: int = 100) -> dict:
    return {"name": "one", "workload": {"arrival": {"kind": "poisson", "rate_per_s": 0.001},
                                        "prompt_tokens": {"kind": "fixed", "value": prompt_tokens},
                                        "output_tokens": {"kind": "fixed", "value": output_tokens}, "requests": 1},
            "batching": {"max_batch_size": 8}}


@pytest.mark.parametrize("loop", [{"fast": True}, {"fast": False}, {"timeseries_interval_s": 0.05}])
def test_one_request_pays_x_ms_per_iteration(loop) -> None:
    """One request alone: a prefill iteration, then output - 1 decodes; o0 = X adds X ms to each."""
    x, out = 0.75, 10
    scenario = scenario_from_dict(_one_request(out))
    plain = simulate(scenario, TINY, seed=0, **loop).runs[0].records[0]
    slow = simulate(scenario, with_overhead(TINY, x), seed=0, **loop).runs[0].records[0]
    assert slow.arrival_s == plain.arrival_s
    assert slow.first_token_s - plain.first_token_s == pytest.approx(x / 1000, rel=1e-9)
    assert slow.finish_s - plain.finish_s == pytest.approx(out * x / 1000, rel=1e-9)
    # and the hand timeline itself: prefill(100, 0), then decode(1, S) at contexts 101 .. 109, which the measured
    # profile prices at the keys real_engine gathers: whole 16-token blocks, 112 (engine_rules.decode_block_tokens)
    decodes = sum(TINY.decode_ms(1, -(-(100 + j) // 16) * 16) for j in range(1, out))
    assert slow.first_token_s - slow.arrival_s == pytest.approx((TINY.prefill_ms(100, 0) + x) / 1000, rel=1e-9)
    assert slow.finish_s - slow.first_token_s == pytest.approx((decodes + (out - 1) * x) / 1000, rel=1e-9)


def _light() -> dict:
    return {"name": "light", "workload": {"arrival": {"kind": "poisson", "rate_per_s": 6.0},
                                          "prompt_tokens": {"kind": "lognormal", "median": 192, "sigma": 0.6,
                                                            "max": 700},
                                          "output_tokens": {"kind": "lognormal", "median": 48, "sigma": 0.6,
                                                            "max": 200}, "requests": 150},
            "batching": {"max_batch_size": 16}}


def test_zero_overhead_is_bit_identical_to_none_and_all_loops_agree_with_one() -> None:
    scenario = scenario_from_dict(_light())
    none = simulate(scenario, TINY, seed=2).runs[0].records
    zero = simulate(scenario, with_overhead(TINY, 0.0), seed=2).runs[0].records
    assert zero == none  # x + 0.0 == x: a zero entry changes no float
    some = with_overhead(TINY, 0.3, 0.02, 0.001)
    fast = simulate(scenario, some, seed=2).runs[0].records
    reference = simulate(scenario, some, seed=2, fast=False).runs[0].records
    stepped = simulate(scenario, some, seed=2, timeseries_interval_s=0.5).runs[0].records
    assert fast == reference == stepped
    assert fast != none
    # more work per iteration never finishes a request earlier (same request list, same admissions order)
    assert all(f.finish_s >= n.finish_s for f, n in zip(fast, none, strict=True))


def test_path_step_adds_the_overhead_per_round_and_per_tiered_iteration() -> None:
    prefills = [PrefillChunk(9, 0, 40, 0, True)]
    decodes = [Decode(0, 0, 300, 50), Decode(1, 0, 200, 50)]
    spec = StrategySpec(speculative=SpeculativeSpec(k=4))
    steps = [PathStep(RunCosts.from_profile(p, spec, ["code"], TINY.kv_capacity_bytes),
                      np.random.default_rng(5)) for p in (TINY, with_overhead(TINY, 0.4, 0.05))]
    a, b = (s.step(prefills, decodes, 540) for s in steps)
    assert (a.emitted == b.emitted).all()  # the same draws: the overhead changes no randomness
    # one speculative round = one engine step: N = 2 decodes + 1 prefill -> 0.4 + 3 x 0.05 = 0.55 ms
    assert (b.seconds - a.seconds) * 1000 == pytest.approx(0.55, rel=1e-9)
    tiered = StrategySpec(tiered=TieredSpec())
    steps = [PathStep(RunCosts.from_profile(p, tiered, ["code"], TINY.kv_capacity_bytes),
                      np.random.default_rng(5)) for p in (TINY, with_overhead(TINY, 0.0, 0.0, 0.01))]
    a, b = (s.step(prefills, decodes, 540) for s in steps)
    # T = 2 decode tokens + 40 prompt tokens -> 0.42 ms
    assert (b.seconds - a.seconds) * 1000 == pytest.approx(0.42, rel=1e-9)


def test_provenance_lists_the_overhead_only_when_present() -> None:
    scenario = scenario_from_dict(_light())
    assert "step_overhead" not in strategies(scenario, TINY)
    report = strategies(scenario, with_overhead(TINY, 0.3, 0.02))
    fields = [(n["field"], n["value"], n["source"]) for n in report["step_overhead"]["numbers_from"]]
    assert fields == [("costs.step_overhead.o0", 0.3, "fitted"), ("costs.step_overhead.o_seq", 0.02, "fitted"),
                      ("costs.step_overhead.o_tok", 0.0, "fitted")]
    assert one_line(report) == "none (baseline); step overhead o0 0.3 ms, o_seq 0.02 ms/sequence, o_tok 0 ms/token " \
                               "(fitted)"


def test_saturation_estimate_counts_the_overhead_once_per_iteration() -> None:
    from tripath.simulator.capacity import saturation

    plain = saturation(TINY, 200, 50, 1, 8, TINY.kv_capacity_bytes)
    over = saturation(with_overhead(TINY, 0.5, 0.1, 0.01), 200, 50, 1, 8, TINY.kv_capacity_bytes)
    b = plain.batch
    assert over.batch == b == 8
    # 49 decode iterations at batch 8 (0.5 + 0.8 + 0.08 ms each) + 8 prefills joining them (0.1 + 2.0 ms each)
    extra = 49 * (0.5 + 0.1 * b + 0.01 * b) + b * (0.1 + 0.01 * 200)
    cycle = 1000.0 * b / plain.requests_per_s_per_replica
    assert 1000.0 * b / over.requests_per_s_per_replica == pytest.approx(cycle + extra, rel=1e-12)
    alone = saturation(with_overhead(TINY, 0.5, 0.1, 0.01), 200, 1, 1, 8, TINY.kv_capacity_bytes)
    plain_alone = saturation(TINY, 200, 1, 1, 8, TINY.kv_capacity_bytes)  # O = 1: prefill-only iterations
    assert 1000.0 * 8 / alone.requests_per_s_per_replica == pytest.approx(
        1000.0 * 8 / plain_alone.requests_per_s_per_replica + 8 * (0.5 + 0.1 + 2.0), rel=1e-12)
