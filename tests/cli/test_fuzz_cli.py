"""Property-based fuzzing of `tripath simulate`'s inputs: scenario TOML, profile JSON, CSV and JSONL traces and
flags. Every case ends in exit 0 or exit 2 with one stderr line naming a file or field; never a traceback.
Derandomized, so CI sees the same cases every run; simulations are a few requests on cpu-tiny."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli.inprocess import assert_clean_exit, run_cli
from tripath.core.data_dirs import PROFILES_DIR

FUZZ = settings(max_examples=220, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
WORK = Path(tempfile.mkdtemp(prefix="tripath-fuzz-"))

SCALARS = st.one_of(
    st.integers(min_value=-3, max_value=12), st.integers(), st.sampled_from([0, 1, 2**63, -(2**63), 10**30]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.text(max_size=6),
    st.sampled_from(["fixed", "uniform", "lognormal", "poisson", "gamma", "constant", "trace", "empirical",
                     "continuous", "static", "prompt", "output", "mooncake-synthetic"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
KEYS = {
    "workload": ["requests", "duration_s"],
    "workload.arrival": ["kind", "rate_per_s", "load_fraction", "cv", "trace", "time_scale"],
    "workload.prompt_tokens": ["kind", "value", "low", "high", "median", "sigma", "min", "max", "trace", "column"],
    "workload.output_tokens": ["kind", "value", "low", "high", "median", "sigma", "min", "max"],
    "cluster": ["gpus", "device_memory_gib"],
    "batching": ["policy", "max_batch_size", "max_batched_tokens", "max_wait_ms", "preemption"],
    "sla": ["ttft_p99_ms", "tpot_p99_ms", "bogus"],
}
BASE = {"workload": {"requests": 3}, "workload.arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "workload.prompt_tokens": {"kind": "fixed", "value": 8},
        "workload.output_tokens": {"kind": "fixed", "value": 3}}


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"  # type: ignore[union-attr]


def _toml(tables: dict[str, dict[str, object]]) -> str:
    lines = ['name = "fuzz"', 'profile = "cpu-tiny"']
    for table, keys in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, dict[str, object]]:
    tables = {name: dict(keys) for name, keys in BASE.items()}
    for _ in range(draw(st.integers(1, 4))):
        table = draw(st.sampled_from(sorted(KEYS)))
        key = draw(st.sampled_from(KEYS[table]))
        if draw(st.booleans()) and key in tables.get(table, {}):
            del tables[table][key]
        else:
            tables.setdefault(table, {})[key] = draw(VALUES)
    return tables


def _case(name: str, text: str | bytes) -> Path:
    path = WORK / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    return path


def _simulate(*argv: str) -> tuple[int, str]:
    code, _, err = run_cli(["simulate", *argv, "--replications", "1", "--json"])
    return code, err


@FUZZ
@given(scenarios())
def test_fuzzed_scenario_tables(tables):
    path = _case("s.toml", _toml(tables))
    code, err = _simulate(str(path))
    assert_clean_exit(code, err, "s.toml", "workload", "--")


@FUZZ
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200)),
       st.integers(0, len(_toml(BASE))))
def test_fuzzed_scenario_bytes(noise, cut):
    text = _toml(BASE)
    body = text[:cut].encode() + (noise if isinstance(noise, bytes) else noise.encode("utf-8", "surrogatepass"))
    code, err = _simulate(str(_case("b.toml", body)))
    assert_clean_exit(code, err, "b.toml", "workload", "--")


PROFILE = json.loads((PROFILES_DIR / "cpu-tiny.json").read_text(encoding="utf-8"))


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value[:3]):
            found += _paths(child, (*prefix, i))
    return found


PROFILE_PATHS = [p for p in _paths(PROFILE) if p]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PROFILE_PATHS), st.one_of(st.none(), VALUES)), min_size=1, max_size=3))
def test_fuzzed_profile_json(edits):
    profile = json.loads(json.dumps(PROFILE))
    for path, value in edits:
        parent = profile
        try:
            for key in path[:-1]:
                parent = parent[key]
            if value is None and isinstance(parent, dict):
                parent.pop(path[-1], None)  # a missing key
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    text = json.dumps(profile, allow_nan=True)
    code, err = _simulate(str(_case("s.toml", _toml(BASE))), "--profile", str(_case("p.json", text)))
    assert_clean_exit(code, err, "p.json", "s.toml")


TRACE_SCENARIO = """name = "fuzz-trace"
profile = "cpu-tiny"
[workload]
requests = 3
[workload.arrival]
kind = "trace"
trace = "{trace}"
[workload.prompt_tokens]
kind = "trace"
[workload.output_tokens]
kind = "trace"
"""
COUNTS = st.one_of(st.integers(0, 40), st.integers(), st.text(max_size=5), st.floats(), st.none())


@FUZZ
@given(st.lists(st.tuples(st.one_of(st.just("2023-11-16 18:15:46.6805900"), st.text(max_size=30)),
                          COUNTS, COUNTS), max_size=4), st.booleans())
def test_fuzzed_csv_traces(rows, header):
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens" if header else "t,a,b"]
    lines += [",".join("" if v is None else str(v) for v in row) for row in rows]
    trace = _case("t.csv", "\n".join(lines) + "\n")
    code, err = _simulate(str(_case("t.toml", TRACE_SCENARIO.format(trace=trace))))
    assert_clean_exit(code, err, "t.csv", "t.toml")


@FUZZ
@given(st.lists(st.one_of(
    st.fixed_dictionaries({"timestamp": COUNTS, "input_length": COUNTS, "output_length": COUNTS},
                          optional={"hash_ids": st.one_of(VALUES, st.lists(st.integers(), max_size=3))}),
    VALUES), max_size=4))
def test_fuzzed_jsonl_traces(rows):
    trace = _case("t.jsonl", "\n".join(json.dumps(row) for row in rows) + "\n")
    code, err = _simulate(str(_case("t.toml", TRACE_SCENARIO.format(trace=trace))))
    assert_clean_exit(code, err, "t.jsonl", "t.toml")


FLAG_VALUES = st.one_of(st.sampled_from(["0", "1", "2", "-1", "1e-300", "1e300", "nan", "inf", "x", "",
                                         "99999999999999999999", "0.5"]), st.text(max_size=5))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["--seed", "--replications", "--timeseries-interval", "--profile",
                                           "--json", "--reference", "--bogus", "--out"]), FLAG_VALUES), max_size=3))
def test_fuzzed_flags(flags):
    argv = ["simulate", str(_case("f.toml", _toml(BASE)))]
    for flag, value in flags:
        if flag == "--out":
            value = str(WORK / "out")
            argv.append("--replace")
        if flag == "--timeseries-interval" and value == "1e-300":
            value = "0.01"  # the refused vanishing interval is its own test (test_hardening.py); here: fast cases
        argv += [flag] if flag in ("--json", "--reference") else [flag, value]
    code, _, err = run_cli(argv)
    assert_clean_exit(code, err, "--", "f.toml", "profile", "argument", "unrecognized")
