"""The vLLM suggestion (hand-checked commands), scenario.toml round trips, and the export folder."""

from __future__ import annotations

import json
import tomllib

import pytest

from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.planning.candidates import Candidate, by_names
from tripath.planning.export import recommended_suggestion, scenario_toml, vllm_suggestion, write_export
from tripath.planning.scenario_dict import load_scenario_dict
from tripath.profile.profile import resolve_profile

PROFILE = "published-llama3-70b-tp4-a100"
HEAD = ("vllm serve meta-llama/Meta-Llama-3-70B \\\n    --tensor-parallel-size 4 \\\n    --max-num-seqs 64 \\\n"
        "    --max-num-batched-tokens 8192")


@pytest.fixture(scope="module")
def setup():
    data, _ = load_scenario_dict("default")
    return resolve_profile(PROFILE), data


def _one(profile, name):
    return by_names(profile, [name])[0]


def test_baseline_command_is_tp_and_the_scenarios_batching(setup):
    profile, data = setup
    s = vllm_suggestion(profile, data, _one(profile, "baseline"), 7)
    # profile key.tp = 4; default.toml batching: max_batch_size 64, max_batched_tokens 8192
    assert s.command() == HEAD
    sources = {x.name: x.source for x in s.settings}
    assert sources == {"--tensor-parallel-size": "profile key.tp",
                       "--max-num-seqs": "scenario batching.max_batch_size",
                       "--max-num-batched-tokens": "scenario batching.max_batched_tokens"}
    text = s.text()
    assert text.startswith("# vLLM SUGGESTION") and "run 7 replica(s)" in text and text.endswith(HEAD + "\n")


def test_speculative_config_names_the_profiles_draft_and_k(setup):
    profile, data = setup
    s = vllm_suggestion(profile, data, _one(profile, "speculative"))
    # the profile's speculative.draft_model is "llama-3-8b (tp4)", its k is 4
    assert s.command() == HEAD + (' \\\n    --speculative-config \'{"model": "meta-llama/Meta-Llama-3-8B", '
                                  '"num_speculative_tokens": 4, "method": "draft_model"}\'')
    spec = next(x for x in s.settings if x.name == "--speculative-config")
    assert "profile speculative.draft_model 'llama-3-8b (tp4)'" in spec.source
    assert "profile speculative.k" in spec.source
    own = vllm_suggestion(profile, data, Candidate("speculative", {"speculative": {"k": 2}}))
    spec = next(x for x in own.settings if x.name == "--speculative-config")
    assert json.loads(spec.value)["num_speculative_tokens"] == 2 and "candidate speculative.k" in spec.source


def test_prefix_caching_is_a_bare_flag_and_affinity_is_the_routers_job(setup):
    profile, data = setup
    s = vllm_suggestion(profile, data, _one(profile, "prefix_cache"), 3)
    assert s.command() == HEAD + " \\\n    --enable-prefix-caching"
    flag = next(x for x in s.settings if x.name == "--enable-prefix-caching")
    assert flag.value is None and "512-token blocks" in flag.source  # the candidate's default block_tokens
    assert any("router" in note for note in s.notes)
    alone = vllm_suggestion(profile, data, _one(profile, "prefix_cache"), 1)
    assert not any("router" in note for note in alone.notes)  # one replica: nothing to route
    base = vllm_suggestion(profile, data, _one(profile, "baseline"), 3)
    assert any("--no-enable-prefix-caching" in note for note in base.notes)


def test_tiered_and_sequence_parallel_give_lmcache_and_context_parallel(setup):
    profile, data = setup
    s = vllm_suggestion(profile, data, _one(profile, "sequence_parallel+tiered"), 3)
    # host tier: the profile's hardware.host_memory_bytes 137438953472 B = 128 GiB; page = tiered.chunk_tokens 256
    assert s.command() == (
        "LMCACHE_LOCAL_CPU=True LMCACHE_MAX_LOCAL_CPU_SIZE=128 LMCACHE_CHUNK_SIZE=256 " + HEAD
        + " \\\n    --prefill-context-parallel-size 2"
        + " \\\n    --kv-transfer-config '{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'")
    by = {x.name: x for x in s.settings}
    assert not by["--prefill-context-parallel-size"].verified and by["--kv-transfer-config"].verified
    assert "profile hardware.host_memory_bytes" in by["LMCACHE_MAX_LOCAL_CPU_SIZE"].source
    text = s.text()
    assert "NOT verified" in text and "--decode-context-parallel-size" in text and "SSD tier" in text
    small = vllm_suggestion(profile, data, Candidate("tiered", {"tiered": {"host_capacity_gib": 48.0}}))
    assert "LMCACHE_MAX_LOCAL_CPU_SIZE=48 " in small.command()


@pytest.mark.parametrize(("mode", "dtype"), [("fp8", "fp8"), ("int8", "fp8"), ("int4", None)])
def test_compression_maps_to_kv_cache_dtype_or_says_there_is_none(setup, mode, dtype):
    profile, data = setup
    s = vllm_suggestion(profile, data, _one(profile, f"compression:{mode}"))
    flags = {x.name: x.value for x in s.settings}
    assert flags.get("--kv-cache-dtype") == dtype
    if dtype is None:
        assert any("no int4 KV cache" in n for n in s.notes)


def test_absent_batching_takes_the_simulators_defaults(setup):
    profile, data = setup
    bare = {k: v for k, v in data.items() if k != "batching"}
    s = vllm_suggestion(profile, bare, _one(profile, "baseline"))
    by = {x.name: x for x in s.settings}
    assert by["--max-num-seqs"].value == "256" and "default" in by["--max-num-seqs"].source


@pytest.mark.parametrize("path", sorted(SCENARIOS_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_scenario_toml_reads_back_the_same_dict(path):
    data, _ = load_scenario_dict(path)
    assert tomllib.loads(scenario_toml(data)) == data


def test_scenario_toml_quotes_odd_keys_and_inline_values():
    data = {"a": 1, "t": {"x y": "q\"s", "l": [1.5, 2], "s": {"deep": True}}, "empty": {}}
    assert tomllib.loads(scenario_toml(data)) == data


def test_write_export_and_the_closest_when_none_meets(setup, tmp_path):
    profile, data = setup
    rec = {"recommended": None, "closest": {"candidate": "speculative", "replicas": None, "searched_replicas": 8}}
    s = recommended_suggestion(rec, profile, data)
    assert s is not None and s.replicas == 8 and "MISSES the SLA" in s.candidate
    assert recommended_suggestion({"recommended": None, "closest": None}, profile, data) is None
    written = write_export(tmp_path / "out", data, {"meets_sla": False}, s)
    assert [p.name for p in written] == ["scenario.toml", "recommendation.json", "vllm.txt"]
    assert tomllib.loads((tmp_path / "out" / "scenario.toml").read_text()) == data
    assert json.loads((tmp_path / "out" / "recommendation.json").read_text()) == {"meets_sla": False}
    assert (tmp_path / "out" / "vllm.txt").read_text() == s.text()
