"""A speculative round priced by the profile's round_costs: c(B, S) and v(K, B, S) at the iteration's batch and
context, in PathStep, the capacity estimate and a whole simulation on a published profile."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import SEED, shipped_scenario_dict
from tripath.profile.profile import Coefficient, Profile, resolve_profile
from tripath.profile.speculative import RoundCosts, StepCurve, TaskAcceptance
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.capacity import path_saturation
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.strategy import SpeculativeSpec, StrategySpec
from tripath.simulator.step_model import Decode
from tripath.simulator.summary import summary

ATTN = Coefficient(0.0001, "ms/token", "fitted", "test")
# a target whose pass costs 10 ms up to 8 tokens, then 1 ms per token (compute-bound); a 1 ms draft
ROUNDS = RoundCosts(StepCurve("t", 1, ((1, 10.0), (8, 10.0), (108, 110.0)), ATTN, "published", "test"),
                    StepCurve("d", 1, ((1, 1.0), (100, 1.0)), ATTN, "derived", "test"), "test")


def _with_rounds(profile: Profile) -> Profile:
    return dataclasses.replace(profile, speculative=dataclasses.replace(profile.speculative, round_costs=ROUNDS))


def _step(profile: Profile, k: int) -> PathStep:
    strategy = StrategySpec(speculative=SpeculativeSpec(k=k))
    return PathStep(RunCosts.from_profile(profile, strategy, ["code"], profile.kv_capacity_bytes),
                    np.random.default_rng(0))


def test_round_is_k_c_plus_v_at_the_batch_and_context_times_its_decode_step() -> None:
    profile = _with_rounds(SEED)
    decodes = [Decode(i, 0, 1000, 100) for i in range(4)]  # B = 4, S = 4000, all propose K = 3
    seconds = _step(profile, 3).step([], decodes, 4000).seconds
    # plain: target(4) + 0.4 = 10.4 ms; verify: target(16) + 0.4 = 18.4; draft: 1.4 -> (3 x 1.4 + 18.4) / 10.4
    factor = (3 * 1.4 + 18.4) / 10.4
    decode_ms = float(IterationCost.from_profile(SEED).decode_ms(4, 4000))
    assert seconds == pytest.approx(factor * decode_ms / 1000, rel=1e-9)
    one = [Decode(0, 0, 1000, 100)]  # batch 1: the verify of 4 tokens is one step on this curve, + 3 drafts
    assert _step(profile, 3).step([], one, 1000).seconds == pytest.approx(
        (3 * 1.1 + 10.1) / 10.1 * float(IterationCost.from_profile(SEED).decode_ms(1, 1000)) / 1000, rel=1e-9)


def test_capacity_estimate_uses_the_same_factor_at_its_batch() -> None:
    data = shipped_scenario_dict("quickstart")
    data["workload"]["tasks"] = {"code": 1.0}
    data["strategy"] = {"speculative": {"k": 3}}
    scenario = scenario_from_dict(data)
    profile = _with_rounds(SEED)
    costs = RunCosts.from_profile(profile, scenario.strategy, ["code"], profile.kv_capacity_bytes)
    sat = path_saturation(scenario, costs, 500.0, 200.0, 1, 64)
    context = sat.batch * (500.0 + 201.0 / 2.0)
    assert sat.detail["round_factor"] == pytest.approx(ROUNDS.round_factor(3, sat.batch, context), rel=1e-12)


def test_speculation_pays_at_batch_one_and_not_at_a_large_batch() -> None:
    e = (1 - 0.8 ** 5) / 0.2  # a = 0.8, K = 4
    assert e / ROUNDS.round_factor(4, 1, 2049) > 1.0
    assert e / ROUNDS.round_factor(4, 64, 64 * 2049) < 1.0


def test_a_simulation_on_a_published_profile_with_the_section_runs_speculation() -> None:
    base = resolve_profile("published-llama2-7b-a100")
    spec = dataclasses.replace(SEED.speculative, draft_model="d (tp1)", k=4, round_costs=ROUNDS)
    entry = TaskAcceptance(0.8, 4, None, "published", "test")
    profile = dataclasses.replace(base, speculative=spec, acceptance={"dialogue": entry})
    data = shipped_scenario_dict("quickstart")
    data["profile"] = "published-llama2-7b-a100"
    data["workload"]["requests"] = 20
    data["workload"]["tasks"] = {"dialogue": 1.0}
    data["strategy"] = {"speculative": {"k": 4}}
    run = simulate(scenario_from_dict(data), profile, seed=0, replications=1)
    records = run.runs[0].records
    done = [r for r in records if r.completed]
    assert len(done) == 20
    rounds, accepted = sum(r.draft_rounds for r in done), sum(r.accepted_tokens for r in done)
    assert rounds > 0 and 1.5 < (rounds + accepted) / rounds < 5.0  # tokens per round near E(0.8, 4) = 3.36
    assert summary(run)["strategies"]["speculative"]["parameters"]["round_cost_form"].startswith("c(B, S)")
