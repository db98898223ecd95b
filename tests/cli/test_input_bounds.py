"""Values of the wrong type, out of their physical range, non-finite or past a float in a checkpoint's config.json
and safetensors index, a vLLM metrics dump and a profile, and a run whose results would not be finite: each is
exit 2 with one stderr line naming the file and the field (docs/cli_contract.md), never an internal error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli.inprocess import assert_clean_exit, run_cli
from tests.cli.test_hardening import TINY
from tripath.core.data_dirs import PROFILES_DIR

SCENARIO = TINY  # 4 requests on cpu-tiny
BIG = 10**400  # written as its 401 digits: past a float, within Python's int-to-text limit


def _refused(argv: list[str], source: Path, field: str | None, problem: str) -> None:
    """Exit 2, one stderr line: `tripath: error: SOURCE: FIELD: ...PROBLEM...`."""
    code, _, err = run_cli(argv)
    assert code == 2, err
    assert_clean_exit(code, err, str(source))
    where = f"{source}: {field}: " if field else f"{source}: "
    assert where in err and problem in err.split(where, 1)[1], err


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sharded checkpoint (config.json, an index, several shards), written once."""
    import torch

    from tripath.engine.model.checkpoint import save_checkpoint
    from tripath.engine.model.config import PRESETS
    from tripath.engine.model.model import LlamaModel

    folder = tmp_path_factory.mktemp("ckpt")
    config = PRESETS["tiny-mha"]
    save_checkpoint(LlamaModel(config, torch.Generator().manual_seed(0)), config, folder, max_shard_bytes=60_000)
    (folder / "s.toml").write_text(SCENARIO, encoding="utf-8")
    return folder


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for path in checkpoint.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


def _serve(folder: Path) -> list[str]:
    return ["serve", str(folder / "s.toml"), "--checkpoint", str(folder), "--requests", "1", "--device", "cpu",
            "--out", str(folder / "records.csv")]


# --- config.json ----------------------------------------------------------------------------------------------

# (key, value written in the file, field named, problem); a str value starting "RAW:" is written as JSON text
CONFIG_CASES = [
    ("rope_scaling", "linear", "rope_scaling", "must be an object or null"),
    ("rope_scaling", [2.0, 4.0], "rope_scaling", "must be an object or null"),
    ("rope_parameters", "default", "rope_parameters", "must be an object or null"),
    ("rope_parameters", {"rope_type": "default", "factor": "x"}, "rope_parameters.factor", "must be a number"),
    ("rope_parameters", {"rope_type": "default", "factor": 0.5}, "rope_parameters.factor", ">= 1"),
    ("rope_parameters", {"rope_type": "default", "rope_theta": "1e4"}, "rope_parameters.rope_theta",
     "must be a number"),
    ("rope_parameters", {"rope_type": "default", "rope_theta": "RAW:1e400"}, "rope_parameters.rope_theta",
     "finite number > 1"),
    ("rope_parameters", {"rope_type": "default", "rope_theta": 0.5}, "rope_parameters.rope_theta", "> 1"),
    ("rope_parameters", {"rope_type": "yarn", "factor": 4.0}, "rope_parameters.rope_type", "only 'default'"),
    ("rope_parameters", {"rope_type": ["default"]}, "rope_parameters.rope_type", "only 'default'"),
    ("rope_theta", f"RAW:{BIG}", "rope_theta", "an integer of 401 digits"),
    ("vocab_size", 10**30, "vocab_size", "integer in 1..16,777,216"),
    ("vocab_size", f"RAW:{BIG}", "vocab_size", "integer in 1..16,777,216"),
    ("hidden_size", "64", "hidden_size", "must be an integer"),
    ("num_hidden_layers", 2.0, "num_hidden_layers", "must be an integer"),
    ("num_hidden_layers", True, "num_hidden_layers", "must be an integer"),
    ("num_key_value_heads", 3, "num_key_value_heads", "must be a multiple"),
    ("num_key_value_heads", 0, "num_key_value_heads", "integer in 1.."),
    ("head_dim", 7, "head_dim", "must be even"),
    ("max_position_embeddings", 2**40, "max_position_embeddings", "integer in 1.."),
    ("rms_norm_eps", "RAW:NaN", "rms_norm_eps", "in (0, 1]"),
    ("rms_norm_eps", "1e-5", "rms_norm_eps", "must be a number"),
    ("tie_word_embeddings", "false", "tie_word_embeddings", "must be true or false"),
    ("attention_bias", "no", "attention_bias", "must be true or false"),
    ("model_type", {"llama": 1}, "model_type", "only LLaMA"),
    ("hidden_size", None, "hidden_size", "must be an integer"),
]


def _write_config(path: Path, raw: dict) -> None:
    """JSON with "RAW:TEXT" strings (at any depth) written as the literal TEXT."""
    marks: dict[str, str] = {}

    def mark(value: object) -> object:
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, str) and value.startswith("RAW:"):
            marks[f'"@{len(marks)}@"'] = value[4:]
            return f"@{len(marks) - 1}@"
        return value

    text = json.dumps(mark(raw))
    for placeholder, literal in marks.items():
        text = text.replace(placeholder, literal)
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(("key", "value", "field", "problem"), CONFIG_CASES,
                         ids=[f"{c[2]}:{c[3]}" for c in CONFIG_CASES])
def test_a_bad_config_json_field_is_named(checkpoint, tmp_path, key, value, field, problem):
    folder = _copy(checkpoint, tmp_path)
    config = folder / "config.json"
    raw = json.loads(config.read_text(encoding="utf-8"))
    # the file has both spellings of RoPE's theta, and the nested one wins: keep only the one under test
    raw.pop({"rope_parameters": "rope_theta", "rope_theta": "rope_parameters"}.get(key, ""), None)
    _write_config(config, raw | {key: value})
    _refused(_serve(folder), config, field, problem)


@pytest.mark.parametrize(("text", "problem"), [
    ('{"vocab_size": ' + "9" * 5000 + "}", "not valid JSON"),  # past Python's int-to-text digit limit
    ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
])
def test_an_unparsable_config_json_is_named(checkpoint, tmp_path, text, problem):
    folder = _copy(checkpoint, tmp_path)
    (folder / "config.json").write_text(text, encoding="utf-8")
    _refused(_serve(folder), folder / "config.json", None, problem)


def test_a_config_larger_than_its_weights_is_refused_before_allocating(checkpoint, tmp_path):
    folder = _copy(checkpoint, tmp_path)
    config = folder / "config.json"
    raw = json.loads(config.read_text(encoding="utf-8"))
    _write_config(config, raw | {"vocab_size": 1 << 24, "intermediate_size": 1 << 24})  # ~12 GB of fp32 weights
    code, _, err = run_cli(_serve(folder))
    assert code == 2 and "model.embed_tokens.weight: wrong shape [256, 64], expected [16777216, 64]" in err, err
    assert_clean_exit(code, err, "safetensors")


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("vocab_size", 10**30, "must be an integer in 1..16,777,216"),
    ("num_hidden_layers", BIG, "must be an integer in 1..16,777,216"),
    ("hidden_size", 4096.0, "must be an integer in 1..16,777,216"),
    ("tie_word_embeddings", "false", "must be true or false"),
])
def test_a_bad_config_json_for_profile_build_is_named(tmp_path, key, value, problem):
    """`tripath profile build --model DIR` reads the shapes of DIR/config.json (tripath/calibrate/aic/builder.py)."""
    from tripath.engine.model.config import PRESETS

    config = tmp_path / "config.json"
    config.write_text(json.dumps(PRESETS["llama3-8b"].to_hf_dict() | {key: value}), encoding="utf-8")
    _refused(["profile", "build", "--model", str(tmp_path), "--gpu", "h100-sxm", "--out", str(tmp_path / "p.json")],
             config, key, problem)


# --- model.safetensors.index.json ----------------------------------------------------------------------------

@pytest.mark.parametrize(("shard", "field", "problem"), [
    (5, "weight_map.model.norm.weight", "must be a shard file name, got 5"),
    (None, "weight_map.model.norm.weight", "must be a shard file name"),
    (["a.safetensors"], "weight_map.model.norm.weight", "must be a shard file name"),
    ("", "weight_map.model.norm.weight", "must be a shard file name"),
    ("../outside.safetensors", "weight_map.model.norm.weight", "not a file inside the checkpoint folder"),
    ("/etc/hostname", "weight_map.model.norm.weight", "not a file inside the checkpoint folder"),
    ("gone.safetensors", "weight_map.model.norm.weight", "shard 'gone.safetensors' is missing"),
])
def test_a_bad_weight_map_entry_is_named(checkpoint, tmp_path, shard, field, problem):
    folder = _copy(checkpoint, tmp_path)
    index = folder / "model.safetensors.index.json"
    raw = json.loads(index.read_text(encoding="utf-8"))
    raw["weight_map"]["model.norm.weight"] = shard
    index.write_text(json.dumps(raw), encoding="utf-8")
    _refused(_serve(folder), index, field, problem)


@pytest.mark.parametrize(("text", "field", "problem"), [
    ('{"weight_map": ["model-00001-of-00002.safetensors"]}', "weight_map", "must be an object"),
    ('{"metadata": {}}', "weight_map", "must be an object"),
    ("[]", None, "must be a JSON object"),
    ('{"weight_map": ', None, "not valid JSON"),
])
def test_a_bad_index_is_named(checkpoint, tmp_path, text, field, problem):
    folder = _copy(checkpoint, tmp_path)
    index = folder / "model.safetensors.index.json"
    index.write_text(text, encoding="utf-8")
    _refused(_serve(folder), index, field, problem)


# --- a vLLM metrics dump (`tripath profile acceptance`) ---------------------------------------------------------

M = 'model_name="m"'
DUMP = [f"vllm:spec_decode_num_drafts_total{{{M}}} 200.0",
        f"vllm:spec_decode_num_draft_tokens_total{{{M}}} 400.0",
        f"vllm:spec_decode_num_accepted_tokens_total{{{M}}} 250.0",
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{M},position="0"}} 150.0',
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{M},position="1"}} 100.0']
NO_POS = DUMP[:3]
HUGE = 2**52 + 1  # two series of it pass 2^53


@pytest.mark.parametrize(("lines", "line", "problem"), [
    ([*DUMP[:4], DUMP[4].replace('position="1"', 'position="x"')], 5, 'needs a position="N" label'),
    ([*DUMP[:4], DUMP[4].replace('position="1"', 'position="\u00b2"')], 5, 'needs a position="N" label'),
    ([*DUMP[:4], DUMP[4].replace('position="1"', f'position="{"1" * 5000}"')], 5, 'needs a position="N" label'),
    ([DUMP[0].replace("200.0", "1e400"), *DUMP[1:]], 1, "a count must be a whole number"),
    ([DUMP[0].replace("200.0", "NaN"), *DUMP[1:]], 1, "a count must be a whole number"),
    ([DUMP[0].replace("200.0", "-200"), *DUMP[1:]], 1, "a count must be a whole number"),
    ([DUMP[0].replace("200.0", "0.5"), *DUMP[1:]], 1, "a count must be a whole number"),
    ([DUMP[0].replace("200.0", "+Inf"), *DUMP[1:]], 1, "a count must be a whole number"),
    ([DUMP[0].replace("200.0", str(HUGE)), DUMP[0].replace(M, 'model_name="m",engine="1"').replace("200.0", str(HUGE)),
      *DUMP[1:]], 2, "the sum over its series passes 2^53"),
    ([NO_POS[0].replace("200.0", "2000000000"), NO_POS[1].replace("400.0", "2000000001"),
      NO_POS[2].replace("250.0", "2000000001")], 2, "is not a whole K"),
])
def test_a_bad_metrics_dump_names_the_line(tmp_path, lines, line, problem):
    dump = tmp_path / "metrics.txt"
    dump.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _refused(["profile", "acceptance", str(dump), "--task", "code", "--json"], dump, f"line {line}", problem)


# --- a profile's cost numbers ----------------------------------------------------------------------------------

def _coefficients(profile: dict, value: float, names: tuple[str, ...] = ("prefill", "decode")) -> None:
    for name in names:
        for coefficient in profile["costs"][name]["coefficients"].values():
            coefficient["value"] = value


@pytest.mark.parametrize(("edit", "field", "problem"), [
    (lambda p: p["sequence_parallel"]["2"]["rows"][0].update(merge_ms=1e300),
     "sequence_parallel.2.rows[0].merge_ms", "<= 3.6e+06, got 1e+300"),
    (lambda p: p["sequence_parallel"]["2"]["rows"][0].update(speedup=1e-300),
     "sequence_parallel.2.rows[0].speedup", ">= 0.001 and <= 1000"),
    (lambda p: p["costs"]["decode"]["coefficients"]["d0"].update(value=1e300),
     "costs.decode.coefficients.d0.value", "<= 3.6e+06"),
    (lambda p: p["costs"]["prefill"]["coefficients"]["c_attn"].update(value=BIG),
     "costs.prefill.coefficients.c_attn.value", "must be a finite number >= 0, got 1000000000000000000000"),
    (lambda p: _coefficients(p, 0.0), "costs.prefill", "a step must take time"),
    (lambda p: _coefficients(p, 0.0, ("decode",)), "costs.decode", "a step must take time"),
    (lambda p: p["hardware"]["links"].update(device_host={"value": 1e-300, "unit": "GB/s", "source": "measured"}),
     "hardware.links.device_host.value", ">= 1e-06, got 1e-300"),
    (lambda p: p["paging"]["device_host"]["cost"]["coefficients"]["bandwidth_gbps"].update(value=1e-300),
     "paging.device_host.cost.coefficients.bandwidth_gbps.value", ">= 1e-06, got 1e-300"),
    (lambda p: p["speculative"]["cost_ratio"].update(value=1e300), "speculative.cost_ratio.value", "<= 1000"),
    (lambda p: p["memory"].update(kv_capacity_bytes=10**30), "memory.kv_capacity_bytes", "<= 2^53"),
    (lambda p: p["model"].update(kv_bytes_per_token=BIG), "model.kv_bytes_per_token", "<= 2^53"),
])
def test_a_profile_cost_out_of_its_physical_range_is_named(tmp_path, edit, field, problem):
    profile = json.loads((PROFILES_DIR / "cpu-tiny.json").read_text(encoding="utf-8"))
    edit(profile)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile), encoding="utf-8")
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    for output in ([], ["--json"]):
        _refused(["simulate", str(scenario), "--profile", str(path), "--replications", "1", *output],
                 path, field, problem)


# --- a run whose results would not be finite -------------------------------------------------------------------

@pytest.mark.parametrize("output", [[], ["--json"]])
def test_a_non_finite_result_is_refused_naming_the_scenario(tmp_path, monkeypatch, output):
    """No input reaches an infinity past the bounds above, so the simulator's per-request times are made to: the
    last guard (tripath/simulator/summary.py check_finite) must refuse them, not print "inf s" nor fail in json."""
    from tripath.simulator.tally import RunTally

    real = RunTally.latencies
    monkeypatch.setattr(RunTally, "latencies", lambda self, metric: np.append(real(self, metric), np.inf))
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    _refused(["simulate", str(scenario), "--replications", "2", *output], scenario, "latency_ms.ttft[0][4]",
             "the simulated result is inf (not a finite number) on profile")
