"""Scenario loading: every shipped file loads; each malformed input names the file and the field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.core.errors import InputError
from tripath.simulator.scenario.scenario import (
    ArrivalSpec,
    BatchingSpec,
    LengthSpec,
    Scenario,
    WorkloadSpec,
    load_scenario,
    scenario_from_dict,
)

SHIPPED = sorted(SCENARIOS_DIR.glob("*.toml"))
SOURCE = "inline.toml"

BASE = {
    "name": "t",
    "workload": {
        "requests": 10,
        "arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "prompt_tokens": {"kind": "fixed", "value": 100},
        "output_tokens": {"kind": "fixed", "value": 10},
    },
}


def _with(path: tuple[str, ...], value: object) -> dict:
    """BASE with one nested key set (value None deletes it)."""
    data = copy.deepcopy(BASE)
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return data


def _error(data: dict) -> InputError:
    with pytest.raises(InputError) as info:
        scenario_from_dict(data, SOURCE)
    assert str(info.value).startswith(f"{SOURCE}: ")
    return info.value


def test_all_shipped_scenarios_load() -> None:
    names = {p.stem for p in SHIPPED}
    assert {"quickstart", "dialogue-medium", "math-medium", "summarization-very-long",
            "fixed-length-multi-gpu", "very-long-single-gpu", "azure-conv-replay",
            "mooncake-long-context"} <= names
    for path in SHIPPED:
        scenario = load_scenario(path)
        assert isinstance(scenario, Scenario)
        assert scenario.name == path.stem
        assert scenario.source_path == str(path)
        assert scenario.description
        assert abs(sum(w for _, w in scenario.workload.tasks) - 1.0) < 1e-12


def test_quickstart_fields() -> None:
    s = load_scenario("quickstart")  # a bare name looks in data/scenarios/
    assert s.profile == "seed-llama2-70b-a100"
    assert s.workload.arrival == ArrivalSpec(kind="poisson", load_fraction=0.6)
    assert s.workload.prompt_tokens == LengthSpec(kind="empirical", trace="azure-conv-2023", column="prompt")
    assert s.cluster.gpus == 1
    assert s.batching == BatchingSpec(policy="continuous", max_batch_size=64, max_batched_tokens=8192)
    assert s.sla.tpot_p99_ms == 100.0


def test_defaults_and_task_normalisation() -> None:
    data = _with(("workload", "tasks"), {"dialogue": 3, "math": 1})
    s = scenario_from_dict(data, SOURCE)
    assert s.workload.tasks == (("dialogue", 0.75), ("math", 0.25))
    assert s.cluster.gpus == 1 and s.cluster.device_memory_gib is None
    assert s.batching == BatchingSpec()
    assert s.sla.ttft_p99_ms is None and s.profile is None
    assert s.workload.arrival.rate_per_s == 2.0 and isinstance(s.workload.arrival.rate_per_s, float)


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        (("workload", "arrival", "rate_per_s"), -1, "workload.arrival.rate_per_s", "must be > 0, got -1"),
        (("workload", "arrival", "rate_per_s"), 0, "workload.arrival.rate_per_s", "must be > 0"),
        (("workload", "arrival", "rate_per_s"), "fast", "workload.arrival.rate_per_s", "must be a number"),
        (("workload", "arrival", "load_fraction"), 0.5, "workload.arrival.rate_per_s", "exactly one"),
        (("workload", "arrival", "rate_per_s"), None, "workload.arrival.rate_per_s", "exactly one"),
        (("workload", "arrival", "kind"), "weibull", "workload.arrival.kind", "poisson, gamma, constant, trace"),
        (("workload", "arrival", "cv"), 2.0, "workload.arrival.cv", "only valid for kind = gamma"),
        (("workload", "arrival", "rate"), 1.0, "workload.arrival.rate", "did you mean 'rate_per_s'"),
        (("workload", "requets"), 5, "workload.requets", "did you mean 'requests'"),
        (("workload", "requests"), 2.5, "workload.requests", "must be int"),
        (("workload", "requests"), True, "workload.requests", "must be int"),
        (("workload", "requests"), None, "workload.requests", "give requests or duration_s"),
        (("workload", "duration_s"), 60, "workload.requests", "not both"),
        (("workload", "tasks"), {"math": 0}, "workload.tasks.math", "weight must be > 0"),
        (("workload", "tasks"), {"math": -1}, "workload.tasks.math", "weight must be > 0"),
        (("workload", "prompt_tokens", "kind"), "zipf", "workload.prompt_tokens.kind", "fixed, uniform"),
        (("workload", "prompt_tokens", "value"), 0, "workload.prompt_tokens.value", "must be >= 1"),
        (("workload", "prompt_tokens", "sigma"), 1.0, "workload.prompt_tokens.sigma", "only valid"),
        (("workload", "output_tokens"), {"kind": "trace"}, "workload.output_tokens.kind", "kind = 'trace'"),
        (("workload", "arrival"), None, "workload.arrival", "missing section"),
        (("cluster", "gpus"), 0, "cluster.gpus", "must be >= 1"),
        (("cluster", "gpu"), 2, "cluster.gpu", "did you mean 'gpus'"),
        (("batching", "policy"), "fifo", "batching.policy", "supported: static, dynamic, continuous"),
        (("batching", "max_batch_size"), 0, "batching.max_batch_size", "must be >= 1"),
        (("sla", "tpot_p99_ms"), -5, "sla.tpot_p99_ms", "must be > 0"),
        (("sla", "p99"), 5, "sla.p99", "unknown field"),
        (("nmae",), "x", "nmae", "did you mean 'name'"),
    ],
)
def test_malformed_scenarios_name_file_and_field(path: tuple, value: object, field: str, words: str) -> None:
    err = _error(_with(path, value))
    assert err.source == SOURCE
    assert err.field == field
    assert words in err.problem


@pytest.mark.parametrize(
    ("fraction", "ok"), [(0.0, False), (-0.1, False), (1e-6, True), (1.0, True), (2.0, True), (2.01, False)]
)
def test_load_fraction_range(fraction: float, ok: bool) -> None:
    data = _with(("workload", "arrival"), {"kind": "poisson", "load_fraction": fraction})
    if ok:
        assert scenario_from_dict(data, SOURCE).workload.arrival.load_fraction == fraction
    else:
        err = _error(data)
        assert err.field == "workload.arrival.load_fraction" and "(0, 2]" in err.problem


def test_gamma_needs_cv_and_trace_needs_a_file(tmp_path: Path) -> None:
    err = _error(_with(("workload", "arrival"), {"kind": "gamma", "rate_per_s": 1.0}))
    assert err.field == "workload.arrival.cv" and "required" in err.problem
    err = _error(_with(("workload", "arrival"), {"kind": "trace", "trace": "no-such-trace.csv"}))
    assert err.field == "workload.arrival.trace" and "not found" in err.problem
    err = _error(_with(("workload", "prompt_tokens"), {"kind": "empirical", "trace": "nope.jsonl",
                                                       "column": "prompt"}))
    assert err.field == "workload.prompt_tokens.trace" and "azure-conv-2023" in err.problem


def test_trace_path_relative_to_the_scenario_file(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,5,6\n")
    (tmp_path / "s.toml").write_text(
        'name = "s"\n[workload]\n[workload.arrival]\nkind = "trace"\ntrace = "t.csv"\n'
        '[workload.prompt_tokens]\nkind = "trace"\n[workload.output_tokens]\nkind = "trace"\n'
    )
    s = load_scenario(tmp_path / "s.toml")
    assert s.workload.arrival.trace == str(tmp_path / "t.csv")
    assert s.workload.requests is None and s.workload.duration_s is None  # a replay of every row


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="scenario file not found .*quickstart"):
        load_scenario(tmp_path / "missing.toml")
    with pytest.raises(InputError, match="no-such-scenario.toml: scenario file not found"):
        load_scenario("no-such-scenario")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(InputError, match=r"bad\.toml: invalid TOML"):
        load_scenario(bad)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text("workload = 3\n")
    with pytest.raises(InputError, match=r"wrong\.toml: workload: must be a table"):
        load_scenario(wrong)


def test_dataclasses_validate_without_the_reader() -> None:
    with pytest.raises(ValueError, match="high: must be >= low"):
        LengthSpec(kind="uniform", low=10, high=5)
    with pytest.raises(ValueError, match="max: must be >= min"):
        LengthSpec(kind="fixed", value=5, min=10, max=3)
    arrival = ArrivalSpec(kind="trace", trace="azure-conv-2023")
    with pytest.raises(ValueError, match="time_scale: must be > 0"):
        ArrivalSpec(kind="trace", trace="azure-conv-2023", time_scale=0.0)
    spec = WorkloadSpec(arrival, LengthSpec(kind="trace"), LengthSpec(kind="trace"))
    assert spec.tasks == (("default", 1.0),)


def test_readme_example_is_a_valid_scenario() -> None:
    import re
    import tomllib

    text = (SCENARIOS_DIR / "README.md").read_text()
    block = re.search(r"```toml\n(.*?)```", text, re.S)
    assert block is not None
    s = scenario_from_dict(tomllib.loads(block.group(1)), "README.md")
    assert s.workload.arrival.cv == 2.0 and s.workload.tasks == (("dialogue", 0.75), ("code", 0.25))
