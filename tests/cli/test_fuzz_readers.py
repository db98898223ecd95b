"""Property-based fuzzing of two readers: a checkpoint's config.json (random JSON values in every key the loader
reads, the RoPE sections' keys too) and a vLLM metrics dump (random sample lines: names, labels, positions and
values). Either reader returns a valid result or raises InputError naming the file; never another exception.
Derandomized, so CI sees the same cases every run; no model is built (a few seconds in all)."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tripath.core.errors import InputError
from tripath.engine.model.checkpoint import load_config
from tripath.engine.model.config import PRESETS, ModelConfig
from tripath.profile.vllm_metrics import COUNTERS, acceptance, parse_counters

FUZZ = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
WORK = Path(tempfile.mkdtemp(prefix="tripath-fuzz-readers-"))

SCALARS = st.one_of(
    st.integers(min_value=-3, max_value=300), st.integers(),
    st.sampled_from([0, 1, 2, 7, 64, 2**24, 2**24 + 1, 2**53, 2**63, 10**30, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e-300, 1e300, 0.5, 1.0, 64.0]),
    st.booleans(), st.none(), st.text(max_size=6),
    st.sampled_from(["default", "linear", "llama3", "llama", "mistral", "silu", "gelu", "false"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)
ROPE_KEYS = ["rope_type", "type", "rope_theta", "factor"]
CONFIG_KEYS = ["model_type", "hidden_act", "attention_bias", "mlp_bias", "sliding_window", "rope_parameters",
               "rope_scaling", "rope_theta", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings",
               "tie_word_embeddings"]
BASE_CONFIG = PRESETS["tiny-gqa"].to_hf_dict()


@st.composite
def configs(draw: st.DrawFn) -> dict[str, object]:
    """The tiny-gqa config.json with one to four keys (or a RoPE section's keys) set to random JSON, or deleted."""
    config = json.loads(json.dumps(BASE_CONFIG))
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from([None, "rope_parameters", "rope_scaling"]))
        if section is None:
            key, target = draw(st.sampled_from(CONFIG_KEYS)), config
        else:
            if not isinstance(config.get(section), dict):
                config[section] = {}
            key, target = draw(st.sampled_from(ROPE_KEYS)), config[section]
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(VALUES)
    return config


def _json_text(value: object) -> str:
    """JSON with Python's NaN / Infinity literals (json.loads reads them) and integers of any size."""
    return json.dumps(value, allow_nan=True)


@FUZZ
@given(configs())
@example(BASE_CONFIG | {"rope_scaling": "linear"})  # a RoPE section that is not an object
@example(BASE_CONFIG | {"rope_theta": 10**400, "rope_parameters": None})  # past a float
def test_fuzzed_config_json_reads_or_is_refused_naming_the_file(config):
    try:
        parsed = ModelConfig.from_hf_dict(config)
    except InputError as err:
        assert err.field, err  # the key it read
    else:
        assert isinstance(parsed, ModelConfig)
    folder = WORK / "ckpt"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(_json_text(config), encoding="utf-8")
    try:
        loaded = load_config(folder)
    except InputError as err:
        assert err.source == str(folder / "config.json") and err.field, err
    else:
        assert loaded.num_heads % loaded.num_kv_heads == 0 and math.isfinite(loaded.rope_theta)


OURS = [f"{c}{suffix}" for c in COUNTERS for suffix in ("", "_total")]
NAMES = st.one_of(st.sampled_from(OURS), st.sampled_from(OURS), st.sampled_from(OURS),
                  st.sampled_from([f"{c}_created" for c in COUNTERS]), st.from_regex(r"[a-z_:]{1,12}", fullmatch=True),
                  st.text(max_size=8))
POSITIONS = st.sampled_from(["0", "1", "2", "3", "01", "-1", "x", "", "\u00b2", "\u0663", "1" * 30])
LABEL_VALUES = st.one_of(POSITIONS, POSITIONS, POSITIONS, st.text(max_size=4))  # mostly the telling ones
TELLING = st.sampled_from(["0", "1", "2", "3", "100", "200.0", "201", "399", "401", "1e400", "-1", "NaN", "+Inf",
                           "-Inf", "0.5", "1e15", str(2**52 + 1), str(2**53), str(2**53 + 2), "1_0", "0x10", "",
                           "1e-300", "1e300", "2000000000", "2000000001"])
NUMBERS = st.one_of(TELLING, TELLING, TELLING, st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.integers(min_value=0, max_value=10**20).map(str), st.text(max_size=5))


@st.composite
def sample_lines(draw: st.DrawFn) -> str:
    """One exposition line: NAME{LABELS} VALUE [TIMESTAMP] (mostly of the four counters, of model "m", with a
    position label), a comment, or noise."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.sampled_from(["# HELP x y", "# TYPE x counter", "", "   "]))
    if kind == 1:
        return draw(st.text(max_size=20))
    labels = {"model_name": "m"} if draw(st.integers(0, 5)) else {}
    labels |= draw(st.dictionaries(st.sampled_from(["position", "engine", "model_name"]), LABEL_VALUES, max_size=2))
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line = draw(NAMES) + (f"{{{inner}}}" if labels or draw(st.booleans()) else "") + " " + draw(NUMBERS)
    return line + (f" {draw(st.integers(-5, 10**13))}" if draw(st.booleans()) else "")


# a valid dump as (name, labels, value): each fuzzed case edits it (a value, a label, a series more or less, a
# random line) so that most cases reach the arithmetic past the line checks
VALID = [(f"{COUNTERS[0]}_total", {"model_name": "m"}, "200.0"), (f"{COUNTERS[1]}_total", {"model_name": "m"}, "400.0"),
         (f"{COUNTERS[2]}_total", {"model_name": "m"}, "250.0"),
         (f"{COUNTERS[3]}_total", {"model_name": "m", "position": "0"}, "150.0"),
         (f"{COUNTERS[3]}_total", {"model_name": "m", "position": "1"}, "100.0")]
EDITS = st.one_of(st.tuples(st.just("value"), st.integers(0, 5), NUMBERS),
                  st.tuples(st.just("position"), st.integers(0, 5), LABEL_VALUES),
                  st.tuples(st.just("position"), st.integers(0, 5), POSITIONS),
                  st.tuples(st.just("series"), st.integers(0, 5), NUMBERS),
                  st.tuples(st.just("drop"), st.integers(0, 5), st.none()),
                  st.tuples(st.just("line"), st.integers(0, 5), sample_lines()))


def _render(name: str, labels: dict[str, str], value: str) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "} " + value


@FUZZ
@given(st.lists(EDITS, max_size=4), st.booleans())
@example([("position", 4, "\u00b2")], True)  # str.isdigit takes it, int() does not
@example([("value", 0, "1e-300"), ("value", 1, "1e300")], False)  # draft tokens / rounds overflows a float
@example([("value", 0, "2000000000"), ("value", 1, "2000000001"), ("value", 2, "2000000001")], False)  # K not whole
@example([("value", 0, str(2**52 + 1)), ("series", 0, str(2**52 + 1))], True)  # the rounds' sum passes 2^53
def test_fuzzed_metrics_dump_reads_or_is_refused_naming_the_file(edits, keep_per_position):
    series: list[tuple[str, dict[str, str], str] | str] = list(VALID if keep_per_position else VALID[:3])
    for op, at, arg in edits:
        i = min(at, len(series) - 1)
        item = series[i] if series else ""
        if op == "line" or isinstance(item, str):
            series.insert(i, str(arg))
        elif op == "drop":
            del series[i]
        elif op == "value":
            series[i] = (item[0], item[1], str(arg))
        elif op == "position":  # on a per-position series where there is one (elsewhere the label means nothing)
            i = next((j for j, s in enumerate(series) if not isinstance(s, str) and "position" in s[1]), i)
            item = series[i]
            series[i] = (item[0], item[1] | {"position": str(arg)}, item[2])
        else:  # another engine's series of the same counter
            series.append((item[0], item[1] | {"engine": str(len(series))}, str(arg)))
    text = "\n".join(s if isinstance(s, str) else _render(*s) for s in series) + "\n"
    try:
        counters = parse_counters(text, "m.txt")
        entry = acceptance(counters, "t")
    except InputError as err:
        assert err.source == "m.txt" and err.field, err
    else:
        assert 0.0 <= entry.mean <= 1.0 and entry.k >= 1
        assert all(0.0 <= p <= 1.0 for p in entry.per_position or ())


@pytest.mark.parametrize("config", [BASE_CONFIG, PRESETS["llama3-8b"].to_hf_dict()])
def test_the_fuzz_starts_from_configs_that_read(config):
    """The fuzzed configs are edits of configs that read, so a refusal is the edit's doing."""
    assert ModelConfig.from_hf_dict(json.loads(_json_text(config))).to_hf_dict() == config
    assert acceptance(parse_counters("\n".join(_render(*s) for s in VALID), "m.txt"), "t").k == 2
