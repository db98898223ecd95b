"""The draft's prompt pass is charged where real_engine's DraftModelProposer runs it: in the sequence's
first speculative round (after the target's prefill emitted the first token), at c x the target's prefill
(measured profiles); vLLM-style profiles (seed, published) keep it in the prefill iteration, x (1 + c)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import SEED
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.speculative import SpeculativeParams, SpeculativePhysics
from tripath.simulator.paths.step import PathStep
from tripath.simulator.scenario.strategy import SpeculativeSpec, StrategySpec
from tripath.simulator.step_model import Decode, DecodeBatch, PrefillChunk

# SEED: c = 0.265262, v = 1; a vLLM-style engine (source "seed")
MEASURED = dataclasses.replace(SEED, source="measured")  # the same numbers, as if calibrated on real_engine


def _step(k: int = 3, proposer: str = "draft", profile=MEASURED) -> PathStep:
    return PathStep(RunCosts.from_profile(profile, StrategySpec(speculative=SpeculativeSpec(k=k, proposer=proposer)),
                                          ["code"], profile.kv_capacity_bytes), np.random.default_rng(0))


def test_prefill_iteration_costs_the_target_alone():
    cost = IterationCost.from_profile(SEED)
    result = _step().step([PrefillChunk(0, 0, 2000, 0, True)], [], 0)
    # no decodes: the fixed cost prefill(0, 0) plus the chunk's work = prefill(2000, 0), no (1 + c)
    assert result.seconds == pytest.approx(float(cost.prefill_ms(2000, 0)) / 1000, rel=1e-12)


def test_vllm_style_profiles_prefill_the_draft_beside_the_target():
    cost = IterationCost.from_profile(SEED)
    step = _step(profile=SEED)
    fixed, c = float(cost.prefill_ms(0, 0)), 0.265262
    result = step.step([PrefillChunk(0, 0, 2000, 0, True)], [], 0)
    assert result.seconds == pytest.approx((fixed + (1 + c) * (float(cost.prefill_ms(2000, 0)) - fixed)) / 1000,
                                           rel=1e-9)
    decodes = [Decode(0, 0, 2001, 100)]
    assert step.step([], decodes, 2001).seconds == step.step([], decodes, 2001).seconds  # no catch-up round


def test_first_round_adds_c_times_the_prefill_of_prompt_plus_first_token():
    cost = IterationCost.from_profile(SEED)
    step = _step()
    decodes = [Decode(0, 0, 2001, 100)]  # a 2000-token prompt and its first token
    first = step.step([], decodes, 2001).seconds
    second = step.step([], decodes, 2001).seconds  # same context: the draft has seen all of it
    c = 0.265262
    work = float(cost.prefill_ms(2001, 0)) - float(cost.prefill_ms(0, 0))
    assert first - second == pytest.approx(c * work / 1000, rel=1e-9)
    d = float(cost.decode_ms(1, 2016))  # measured: real_engine reads the 2001 tokens in whole 16-token blocks
    assert second == pytest.approx((3 * c + 1.0) * d / 1000, rel=1e-9)


def test_the_draft_keeps_context_plus_min_k_minus_1_accepted_tokens():
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(k=4), MEASURED, ["code"]),
                                 np.random.default_rng(0))
    ks = np.array([4, 4, 0])
    batch = DecodeBatch.of([Decode(0, 0, 101, 50), Decode(1, 0, 201, 50), Decode(2, 0, 301, 50)])
    assert physics.catch_up(batch, ks) == [(101, 0), (201, 0)]  # K = 0: the draft does not run
    physics.commit(batch, ks, np.array([1, 4, 0]))
    # next round: 1 accepted -> context + 2, the draft has context + 1: gap 1; a full accept (4) -> context + 5,
    # the draft has context + 3: gap 2. Both are the decode-like pass K c prices; no catch-up.
    nxt = DecodeBatch.of([Decode(0, 0, 103, 48), Decode(1, 0, 206, 45), Decode(2, 0, 302, 49)])
    every = np.array([4, 4, 4])
    assert physics.catch_up(nxt, every) == [(302, 0)]  # its first round with K > 0
    physics.commit(nxt, every, np.array([0, 0, 0]))  # the draft has 103, 206, 302 tokens
    # after plain rounds (K = 0) the gap grows: 6 tokens later the draft feeds them as a prefill chunk
    later = DecodeBatch.of([Decode(0, 0, 109, 42), Decode(1, 0, 207, 44)])
    assert physics.catch_up(later, np.array([2, 2])) == [(6, 103)]


def test_finished_sequences_are_forgotten():
    physics = SpeculativePhysics(SpeculativeParams.from_profile(SpeculativeSpec(k=4), MEASURED, ["code"]),
                                 np.random.default_rng(0))
    batch = DecodeBatch.of([Decode(7, 0, 50, 3)])
    physics.commit(batch, np.array([2]), np.array([2]))  # 3 tokens emitted: done
    assert physics._draft_seen == {}


def test_prompt_lookup_has_no_draft_prefill():
    lookup = dataclasses.replace(SEED.acceptance["code"], mean=0.5, note="test entry")
    profile = dataclasses.replace(MEASURED, acceptance={**SEED.acceptance, "prompt_lookup:code": lookup})
    step = _step(proposer="prompt_lookup", profile=profile)
    decodes = [Decode(0, 0, 2001, 100)]
    assert step.step([], decodes, 2001).seconds == step.step([], decodes, 2001).seconds


def _one_request(profile, prompt: int = 2000, output: int = 3):
    """One request of ``prompt`` tokens and ``output`` outputs, K = 4, every draft accepted (a = 1)."""
    from tripath.simulator.runner import simulate
    from tripath.simulator.scenario.scenario import scenario_from_dict

    certain = dataclasses.replace(profile.acceptance["code"], mean=1.0, per_position=None, note="test: a = 1")
    profile = dataclasses.replace(profile, acceptance={"code": certain})
    data = {"name": "one", "profile": "x", "workload": {
        "requests": 1, "arrival": {"kind": "poisson", "rate_per_s": 1.0}, "tasks": {"code": 1.0},
        "prompt_tokens": {"kind": "fixed", "value": prompt}, "output_tokens": {"kind": "fixed", "value": output}},
        "cluster": {"gpus": 1}, "batching": {"policy": "continuous", "max_batch_size": 4, "max_batched_tokens": 4096},
        "strategy": {"speculative": {"k": 4}}}
    return simulate(scenario_from_dict(data), profile, seed=0).runs[0].records[0]


def _with_ratio(profile, r: float):
    from tripath.profile.cost_model import Coefficient

    speculative = dataclasses.replace(profile.speculative,
                                      draft_prefill_ratio=Coefficient(r, "target prompt passes", "measured", "test"))
    return dataclasses.replace(profile, speculative=speculative)


@pytest.mark.parametrize("r", [None, 0.12])
def test_one_request_measured_profile_ttft_and_first_round_by_hand(r):
    """real_engine's schedule: TTFT = the target's prefill alone; the one round (3 outputs: K = min(4, 2 - 1)
    = 1, both tokens accepted) = (1 c + v(1)) decode steps + r x the target's work on prompt + first token."""
    profile = MEASURED if r is None else _with_ratio(MEASURED, r)
    cost = IterationCost.from_profile(SEED)
    c = 0.265262
    ratio = c if r is None else r  # absent: priced at c, as before
    record = _one_request(profile)
    ttft = float(cost.prefill_ms(2000, 0)) / 1000
    assert record.first_token_s - record.arrival_s == pytest.approx(ttft, rel=1e-9)
    # measured: a decode step reads the 2001-token context in whole 16-token blocks (engine_rules.decode_block_tokens)
    round_ms = (c + SEED.verify_cost_ratio(1)) * float(cost.decode_ms(1, 2016))
    catch_up_ms = ratio * (float(cost.prefill_ms(2001, 0)) - float(cost.prefill_ms(0, 0)))
    assert record.finish_s - record.first_token_s == pytest.approx((round_ms + catch_up_ms) / 1000, rel=1e-9)
    assert record.draft_rounds == 1 and record.accepted_tokens == 1


def test_one_request_vllm_style_ttft_includes_the_draft_prompt_pass_at_r():
    """Seed / published profiles: the draft prefills beside the target, TTFT = fixed + (1 + r) x work."""
    r = 0.12
    cost = IterationCost.from_profile(SEED)
    fixed, work = float(cost.prefill_ms(0, 0)), float(cost.prefill_ms(2000, 0)) - float(cost.prefill_ms(0, 0))
    record = _one_request(_with_ratio(SEED, r))
    assert record.first_token_s - record.arrival_s == pytest.approx((fixed + (1 + r) * work) / 1000, rel=1e-9)
