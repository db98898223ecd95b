"""The scenario's closed-loop arrival kind: validation, how the runner reports it, determinism, and the
planning and engine entry points that need arrival times before the run refusing it with one InputError."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from tests.helpers import SEED, apply_patch
from tripath.core.errors import InputError
from tripath.planning.recommend import scenario_qps
from tripath.planning.scenario_dict import with_rate
from tripath.simulator.report import format_summary
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import load_scenario, scenario_from_dict
from tripath.simulator.scenario.workload import generate_arrays, generate_requests, mean_lengths
from tripath.simulator.summary import summary


def closed(**arrival: Any) -> dict[str, Any]:
    return {
        "name": "closed",
        "workload": {"requests": 120, "arrival": {"kind": "closed", "users": 6, **arrival},
                     "prompt_tokens": {"kind": "uniform", "low": 100, "high": 1500},
                     "output_tokens": {"kind": "uniform", "low": 5, "high": 120}},
        "cluster": {"gpus": 2},
    }


@pytest.mark.parametrize(("arrival", "workload", "field"), [
    ({"users": 0}, {}, "workload.arrival.users"),
    ({"think_s": -0.5}, {}, "workload.arrival.think_s"),
    ({"rate_per_s": 2.0}, {}, "workload.arrival.rate_per_s"),
    ({"load_fraction": 0.5}, {}, "workload.arrival.load_fraction"),
    ({"users": None}, {}, "workload.arrival.users"),  # missing
    ({"users": 2.5}, {}, "workload.arrival.users"),  # not an int
    ({}, {"requests": None, "duration_s": 60.0}, "workload.requests"),
])
def test_bad_closed_loop_input_names_the_field(arrival: dict, workload: dict, field: str) -> None:
    data = closed(**arrival)
    apply_patch(data["workload"]["arrival"], arrival)
    apply_patch(data["workload"], workload)
    with pytest.raises(InputError, match=f"inline.toml: {field}:"):
        scenario_from_dict(data, "inline.toml")


@pytest.mark.parametrize("field", ["users", "think_s"])
def test_closed_loop_fields_on_an_open_loop_kind_are_errors(field: str) -> None:
    data = closed()
    data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 1.0, field: 1}
    with pytest.raises(InputError, match=f"workload.arrival.{field}: only valid for kind = closed"):
        scenario_from_dict(data, "inline.toml")


def test_the_runner_reports_the_closed_loop_instead_of_a_rate() -> None:
    result = simulate(scenario_from_dict(closed(think_s=0.5), "inline.toml"), SEED, seed=2)
    assert result.rate_per_s is None and result.saturation is None
    assert result.rate_source.startswith("closed loop, 6 users (think time 0.5 s)")
    text = format_summary(summary(result))
    assert "arrivals closed loop, 6 users" in text
    records = result.runs[0].records
    assert [r.arrival_s for r in records[:6]] == [0.0] * 6 and min(r.arrival_s for r in records[6:]) > 0.5


def test_same_seed_same_records_and_the_lengths_are_the_open_loops_draws() -> None:
    scenario = scenario_from_dict(closed(), "inline.toml")
    first, again = (simulate(scenario, SEED, seed=3).runs[0].records for _ in range(2))
    assert first == again
    other = simulate(scenario, SEED, seed=4).runs[0].records
    assert [r.prompt_tokens for r in other] != [r.prompt_tokens for r in first]
    # the i-th request gets the i-th draw: the same lengths as a Poisson workload on the same seed
    open_loop = copy.deepcopy(closed())
    open_loop["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 1.0}
    drawn = simulate(scenario_from_dict(open_loop, "inline.toml"), SEED, seed=3).runs[0].records
    assert [(r.prompt_tokens, r.output_tokens) for r in drawn] == [(r.prompt_tokens, r.output_tokens)
                                                                    for r in first]


def test_without_the_loop_a_closed_workload_has_no_arrival_times_to_hand_out() -> None:
    workload = scenario_from_dict(closed(), "inline.toml").workload
    with pytest.raises(InputError, match="workload.arrival.kind: 'closed'"):
        generate_requests(workload, np.random.default_rng(0), None)
    arrivals, prompts, _, _, _ = generate_arrays(workload, np.random.default_rng(0), None, closed_loop=True)
    assert arrivals.tolist() == [0.0] * 120 and prompts.shape == (120,)
    assert mean_lengths(workload) == (800.0, 62.5)


def test_planning_at_a_rate_refuses_a_closed_loop() -> None:
    with pytest.raises(InputError, match="workload.arrival.kind: 'closed'.*no request rate"):
        with_rate(closed(), 2.0)
    with pytest.raises(InputError, match="workload.arrival.kind"):
        scenario_qps(closed())


def test_the_shipped_closed_loop_scenario_runs() -> None:
    scenario = load_scenario("closed-loop")
    assert scenario.workload.arrival.users == 32
    run = simulate(scenario, SEED, seed=0).runs[0]
    assert len(run.records) == 400 and all(r.completed for r in run.records)
