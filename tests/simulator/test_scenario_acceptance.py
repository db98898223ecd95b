"""A scenario's own acceptance table: parsed with named errors, it replaces the profile's entries for a run."""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers import SEED, shipped_scenario_dict
from tripath.core.errors import InputError
from tripath.simulator.paths.provenance import one_line
from tripath.simulator.paths.run_costs import RunCosts, with_scenario_acceptance
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.strategy import strategy_from_dict, strategy_to_dict
from tripath.simulator.summary import summary


def _data(speculative: dict, requests: int = 30) -> dict:
    data = shipped_scenario_dict("quickstart")
    data["profile"] = "seed-llama2-70b-a100"
    data["workload"]["requests"] = requests
    data["workload"]["tasks"] = {"dialogue": 0.5, "math": 0.5}
    data["strategy"] = {"speculative": speculative}
    return data


def test_the_table_parses_in_order_and_round_trips():
    spec = strategy_from_dict({"speculative": {"k": 4, "acceptance": {"dialogue": 0.71, "math": 1}}}).speculative
    assert spec.acceptance == (("dialogue", 0.71), ("math", 1.0))
    assert spec.acceptance_table == {"dialogue": 0.71, "math": 1.0}
    raw = strategy_to_dict(strategy_from_dict({"speculative": {"acceptance": {"code": 0.6}}}))
    assert raw == {"speculative": {"adaptive": False, "proposer": "draft", "acceptance": {"code": 0.6}}}
    assert "acceptance" not in strategy_to_dict(strategy_from_dict({"speculative": {}}))["speculative"]


@pytest.mark.parametrize(("table", "field", "problem"), [
    ({"dialogue": 1.2}, "strategy.speculative.acceptance.dialogue", r"must be a number in \[0.0, 1.0\], got 1.2"),
    ({"math": -0.1}, "strategy.speculative.acceptance.math", r"must be a number in \[0.0, 1.0\]"),
    ({"dialogue": "high"}, "strategy.speculative.acceptance.dialogue", "must be a number"),
    ({"dialogue": True}, "strategy.speculative.acceptance.dialogue", "must be a number"),
    ({"code": 0.6},
     "strategy.speculative.acceptance.code", "unknown task 'code'; the workload's tasks: dialogue, math"),
])
def test_a_bad_table_names_the_file_and_field(table, field, problem):
    with pytest.raises(InputError, match=f"^s.toml: {field}: {problem}"):
        scenario_from_dict(_data({"acceptance": table}), "s.toml")
    with pytest.raises(InputError, match="strategy.speculative.acceptance: must be dict"):
        scenario_from_dict(_data({"acceptance": 0.7}), "s.toml")


def test_without_the_table_the_profile_is_the_profile():
    scenario = scenario_from_dict(_data({"k": 5}))
    assert with_scenario_acceptance(SEED, scenario.strategy) is SEED


def test_the_table_replaces_only_its_tasks_and_needs_no_profile_entry():
    scenario = scenario_from_dict(_data({"acceptance": {"math": 0.9}}), "s.toml")
    bare = dataclasses.replace(SEED, acceptance={"dialogue": SEED.acceptance["dialogue"]})  # no math entry
    costs = RunCosts.for_scenario(scenario, bare)
    dialogue, math = costs.speculative.entries(3)
    assert dialogue == SEED.acceptance["dialogue"]
    assert (math.mean, math.source, math.per_position, math.k) == (0.9, "scenario", None, 5)
    assert "s.toml" in math.note
    lookup = scenario_from_dict(_data({"proposer": "prompt_lookup", "acceptance": {"dialogue": 0.4, "math": 0.5}}))
    assert sorted(with_scenario_acceptance(SEED, lookup.strategy).acceptance) == [
        "code", "dialogue", "math", "prompt_lookup:dialogue", "prompt_lookup:math", "summarization"]


def _tokens_per_round(a: float) -> tuple[float, dict]:
    result = simulate(scenario_from_dict(_data({"k": 5, "acceptance": {"dialogue": a, "math": a}}), "s.toml"), SEED)
    paths = summary(result)["per_request_paths"]
    rounds, accepted = paths["draft_rounds"]["mean"], paths["accepted_tokens"]["mean"]
    return (rounds + accepted) / rounds, summary(result)["strategies"]


def test_higher_scenario_acceptance_emits_more_tokens_per_round_and_says_where_from():
    low, report = _tokens_per_round(0.3)
    high, _ = _tokens_per_round(0.9)
    # E(5, 0.3) = 1.43 and E(5, 0.9) = 4.69 tokens per round; the last round of a request is cut at its length
    assert 1.3 < low < 1.5 < 4.0 < high < 4.7
    spec = report["speculative"]
    assert spec["parameters"]["acceptance_from_scenario"] == ["dialogue", "math"]
    acceptance = [n for n in spec["numbers_from"] if n["field"].startswith("acceptance.")]
    assert [(n["field"], n["value"], n["source"]) for n in acceptance] == [
        ("acceptance.dialogue", 0.3, "scenario"), ("acceptance.math", 0.3, "scenario")]
    assert "scenario" in report["sources"]
    assert "acceptance of dialogue, math from the scenario" in one_line(report)
