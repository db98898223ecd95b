"""Compression / SP alone run on the exact fast path through runner.simulate, equal to the loop's records."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tests.helpers import shipped_scenario_dict
from tripath.profile.profile import resolve_profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.summary import summary


def _scenario(profile: str, strategy: dict, gpus: int = 1, requests: int = 120, rate: float = 2.0):
    data = shipped_scenario_dict("quickstart")
    data["profile"] = profile
    data["workload"]["requests"] = requests
    data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": rate}
    data["cluster"] = {"gpus": gpus}
    data["strategy"] = strategy
    return scenario_from_dict(data)


CASES = [
    ("cpu-tiny", {"compression": {"mode": "int8"}}, 2),
    ("seed-llama2-70b-a100", {"sequence_parallel": {"degree": 2}}, 4),
    ("cpu-tiny", {"compression": {"mode": "mixed-int4"}, "sequence_parallel": {"degree": 2}}, 4),
]


@pytest.mark.parametrize(("name", "strategy", "gpus"), CASES)
def test_transform_only_paths_run_the_fast_path_with_the_loops_records(name, strategy, gpus):
    """The runner picks the fast replicas; the loop (forced by a time series, which changes no record)
    gives the same records bit for bit except merge_s, which is summed in another order (float rounding)."""
    profile = resolve_profile(name)
    scenario = _scenario(name, strategy, gpus)
    fast = simulate(scenario, profile, seed=3)
    loop = simulate(scenario, profile, seed=3, timeseries_interval_s=1.0)
    assert (fast.loop, loop.loop) == ("replica", "stepper")
    assert fast.replicas == loop.replicas == 2
    a, b = fast.runs[0], loop.runs[0]
    assert [dataclasses.replace(r, merge_s=0.0) for r in a.records] == \
        [dataclasses.replace(r, merge_s=0.0) for r in b.records]
    assert all(r.completed for r in a.records) and {r.replica for r in a.records} == {0, 1}
    for x, y in zip(a.records, b.records, strict=True):
        assert math.isclose(x.merge_s, y.merge_s, rel_tol=1e-12, abs_tol=1e-15)
    sp = "sequence_parallel" in strategy
    assert all((r.merge_s > 0) == sp for r in a.records)
    assert a.extrapolations == b.extrapolations
    assert (a.extrapolations.sp_prefill_queries > 0) == sp
    # the reference replica (one event per iteration) on the same transformed model: the same records
    reference = simulate(scenario, profile, seed=3, fast=False).runs[0].records
    assert [dataclasses.replace(r, merge_s=0.0) for r in reference] == \
        [dataclasses.replace(r, merge_s=0.0) for r in a.records]
    assert all(math.isclose(x.merge_s, y.merge_s, rel_tol=1e-12) for x, y in zip(reference, a.records, strict=True))


def test_sp_merge_booked_by_hand():
    """One request alone on an SP replica: merge = merge(prompt) + sum of merge(prompt + 1 + j), j < output - 1."""
    profile = resolve_profile("seed-llama2-70b-a100")
    scenario = _scenario("seed-llama2-70b-a100", {"sequence_parallel": {"degree": 2}}, gpus=2, requests=1)
    record = simulate(scenario, profile, seed=0).runs[0].records[0]
    merge = profile.sequence_parallel[2].merge
    prompt, output = record.prompt_tokens, record.output_tokens

    def m(c: float) -> float:
        if merge is not None:
            return float(merge.evaluate(context_tokens=c))
        rows = profile.sequence_parallel[2].rows
        return float(np.interp(c, [r.context_tokens for r in rows], [r.merge_ms for r in rows]))

    expected_ms = m(prompt) + sum(m(prompt + 1 + j) for j in range(output - 1))
    assert record.merge_s == pytest.approx(expected_ms / 1000.0, rel=1e-12)


def test_summary_says_which_loop_and_why():
    profile = resolve_profile("cpu-tiny")
    report = summary(simulate(_scenario("cpu-tiny", {"compression": {"mode": "int8"}}, requests=20), profile))
    assert report["loop"] == "replica" and "fast path" in report["loop_reason"]
    report = summary(simulate(_scenario("cpu-tiny", {"speculative": {"k": 3}}, requests=20), profile))
    assert report["loop"] == "stepper" and "speculation" in report["loop_reason"]
