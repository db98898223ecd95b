"""The serving suggestions carry exactly what was simulated (vLLM and SGLang), scenario.toml round trips, and the
export folder.

The central test parses each exported command back into flags and environment variables and checks every one
against the scenario the simulator builds for the candidate (``scenario_from_dict`` on ``Candidate.apply``) and
the simulator's own record of the resolved path parameters (tripath/simulator/paths/provenance.py
``strategies``), never against the exporter's own reading: a flag with no simulated setting, or with another value,
fails it.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import tomllib
from collections.abc import Callable
from typing import Any

import pytest

from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.planning.candidates import Candidate, by_names
from tripath.planning.export.files import recommended_sglang, recommended_suggestion, scenario_toml, write_export
from tripath.planning.export.settings import HF_REPOS, NO_MATCH, Suggestion
from tripath.planning.export.sglang import sglang_suggestion
from tripath.planning.export.vllm import vllm_suggestion
from tripath.planning.scenario_dict import load_scenario_dict, with_fields
from tripath.profile.profile import Profile, resolve_profile
from tripath.simulator.paths.provenance import strategies
from tripath.simulator.scenario.scenario import Scenario, scenario_from_dict

PROFILE = "published-llama3-70b-tp4-a100"
AIC = "aic-llama3.1-70b-tp4-h100"  # an aic profile: its draft "llama-3.1-8b (tp4)" is a real checkpoint
HYPOTHETICAL_DRAFT = "published-llama3-8b-a100"  # its draft is a stand-in no repository holds
# the Hugging Face repositories of the aic profile's models, read off huggingface.co (not off export/settings.py)
# (the draft's repository whatever TP the profile priced it at: "llama-3.1-8b (tp4)", "qwen3-0.6b (tp8)")
AIC_MODEL, AIC_DRAFT = "meta-llama/Llama-3.1-70B", {"llama-3.1-8b": "meta-llama/Llama-3.1-8B",
                                                     "qwen3-0.6b": "Qwen/Qwen3-0.6B"}
HEAD = ("vllm serve meta-llama/Meta-Llama-3-70B \\\n    --tensor-parallel-size 4 \\\n    --max-num-seqs 64 \\\n"
        "    --max-num-batched-tokens 8192")
KINDS = ("baseline", "speculative", "tiered", "sequence_parallel", "compression:fp8", "compression:int8",
         "compression:int4", "prefix_cache", "prefix_cache+tiered", "speculative+tiered")
ENGINES: dict[str, Callable[..., Suggestion]] = {"vllm": vllm_suggestion, "sglang": sglang_suggestion}
# Hugging Face repositories whose checkpoints store quantized weights (read off their model cards and
# config.json's quantization_config): the engine reads the format from them, so no --quantization goes with them
STORED_QUANTIZED = {"Qwen/Qwen3-235B-A22B-FP8", "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-120b"}


@pytest.fixture(scope="module")
def setup() -> tuple[Profile, dict[str, Any]]:
    """The default scenario with whole-prompt prefill (the by-hand commands below; chunked has its own test)."""
    data, _ = load_scenario_dict("default")
    return resolve_profile(PROFILE), with_fields(data, {"batching.policy": "continuous"})


@pytest.fixture(scope="module")
def aic() -> Profile:
    return resolve_profile(AIC)


def _one(profile: Profile, name: str) -> Candidate:
    return by_names(profile, [name])[0]


def parsed(suggestion: Suggestion) -> tuple[str, dict[str, str], dict[str, str | None]]:
    """(model, environment, flags) read back from the command line as a shell would split it."""
    words = shlex.split(suggestion.command().replace("\\\n", " "))
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    launch = len(suggestion.LAUNCH)
    assert tuple(words[:launch]) == suggestion.LAUNCH
    model, rest = words[launch], words[launch + 1:]
    flags: dict[str, str | None] = {}
    while rest:
        name = rest.pop(0)
        assert name.startswith("--") and name not in flags, name
        flags[name] = rest.pop(0) if rest and not rest[0].startswith("--") else None
    return model, env, flags


# --- the oracle: what the simulator ran ---------------------------------------------------------------------
class Ran:
    """The simulated scenario of one candidate and the simulator's record of its resolved path parameters."""

    def __init__(self, profile: Profile, data: dict[str, Any], candidate: Candidate) -> None:
        self.profile = profile
        self.scenario: Scenario = scenario_from_dict(candidate.apply(data), None)
        record = strategies(self.scenario, profile)
        self.on = set(record["on"])
        self.params = {name: record[name]["parameters"] for name in record["on"]}

    @property
    def tp(self) -> int:
        return int(self.profile.key.tp)

    def p(self, path: str, key: str) -> Any:
        return self.params[path][key]

    def draft_repo(self) -> str | None:
        return AIC_DRAFT.get(self.p("speculative", "draft_model").split(" (")[0])

    @property
    def mtp(self) -> bool:
        """Speculation by the target's own multi-token-prediction layer (the builder's "MODEL MTP (tpN)")."""
        return "speculative" in self.on and " MTP (" in self.p("speculative", "draft_model")

    def online_fp8(self, model: str) -> bool:
        """fp8 weights timed, served from a 16-bit checkpoint: the engine must quantize it when it loads."""
        return self.profile.key.dtype == "fp8" and model not in STORED_QUANTIZED

    @property
    def expert_parallel(self) -> bool:
        return bool(self.profile.key.expert_parallel)

    @property
    def dp(self) -> int:
        """Attention data-parallel ranks of the simulated replica (1: none), each of ``tp`` GPUs."""
        return int(self.profile.key.attention_dp)

    @property
    def gpus(self) -> int:
        """GPUs of one simulated replica: tp per rank x the ranks."""
        return self.tp * self.dp


def _check_vllm(ran: Ran, model: str, env: dict[str, str], flags: dict[str, str | None]) -> None:
    b, tiers = ran.scenario.batching, {"prefix_cache", "tiered"} <= ran.on
    checks: dict[str, Callable[[str | None], bool]] = {
        "--tensor-parallel-size": lambda v: v == str(ran.tp),  # each DP rank's TP
        "--data-parallel-size": lambda v: ran.dp > 1 and v == str(ran.dp),
        "--quantization": lambda v: ran.online_fp8(model) and v == "fp8",
        "--enable-expert-parallel": lambda v: ran.expert_parallel and v is None,  # vLLM's EP size is DP x TP
        # per DP rank: vLLM runs each DP rank as an engine core with its own scheduler, as the simulated ranks
        "--max-num-seqs": lambda v: v == str(b.max_batch_size),
        "--max-num-batched-tokens": lambda v: b.policy in ("continuous", "chunked") and v == str(b.max_batched_tokens),
        "--enable-chunked-prefill": lambda v: b.policy == "chunked" and v is None,
        "--no-enable-prefix-caching": lambda v: "prefix_cache" not in ran.on and v is None,
        "--enable-prefix-caching": lambda v: "prefix_cache" in ran.on and v is None,
        "--block-size": lambda v: "prefix_cache" in ran.on and v == str(ran.p("prefix_cache", "block_tokens")),
        "--kv-cache-dtype": lambda v: "compression" in ran.on and ran.p("compression", "mode") == "fp8" and v == "fp8",
        "--speculative-config": lambda v: _speculative_config(ran, json.loads(v or "")),
        "--kv-transfer-config": lambda v: tiers and json.loads(v or "")["kv_connector"] == "LMCacheConnectorV1",
    }
    for name, value in flags.items():
        assert name in checks, f"{name} exported, but it is no simulated setting"
        assert checks[name](value), f"{name} {value}: not the simulated value"
    env_checks: dict[str, Callable[[str], bool]] = {
        "LMCACHE_CHUNK_SIZE": lambda v: tiers and v == str(ran.p("prefix_cache", "block_tokens")),
        "LMCACHE_LOCAL_CPU": lambda v: tiers and v == "True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": lambda v: tiers and _close(v, ran.p("tiered", "host_capacity_gib") / ran.tp),
        "LMCACHE_LOCAL_DISK": lambda v: tiers and ran.p("tiered", "ssd_capacity_gib") > 0 and v.startswith("file://"),
        "LMCACHE_MAX_LOCAL_DISK_SIZE": lambda v: tiers and _close(v, ran.p("tiered", "ssd_capacity_gib") / ran.tp),
    }
    for name, value in env.items():
        assert name in env_checks, f"{name} exported, but it is no simulated setting"
        assert env_checks[name](value), f"{name}={value}: not the simulated value"


def _speculative_config(ran: Ran, config: dict[str, Any]) -> bool:
    if "speculative" not in ran.on or config["num_speculative_tokens"] != ran.p("speculative", "k"):
        return False
    if ran.p("speculative", "proposer") == "prompt_lookup":
        return config == {"method": "ngram", "num_speculative_tokens": ran.p("speculative", "k")}
    if ran.mtp:  # vllm/config/speculative.py MTPModelTypes: "deepseek_mtp", "mtp"
        return config == {"method": "deepseek_mtp", "num_speculative_tokens": ran.p("speculative", "k")}
    return config == {"method": "draft_model", "model": ran.draft_repo(),
                      "num_speculative_tokens": ran.p("speculative", "k")}


def _close(value: str, gib: float) -> bool:
    return abs(float(value) - gib) < 1e-3


def _check_sglang(ran: Ran, model: str, env: dict[str, str], flags: dict[str, str | None]) -> None:
    b, tiers = ran.scenario.batching, {"prefix_cache", "tiered"} <= ran.on
    drafted = "speculative" in ran.on and ran.p("speculative", "proposer") == "draft" and (
        ran.draft_repo() is not None or ran.mtp)
    k = ran.p("speculative", "k") if drafted else None
    checks: dict[str, Callable[[str | None], bool]] = {
        # with DP attention SGLang's --tp-size is every GPU of the replica (attention TP = tp-size / dp-size)
        "--tp-size": lambda v: v == str(ran.gpus),
        "--dp-size": lambda v: ran.dp > 1 and v == str(ran.dp),
        "--enable-dp-attention": lambda v: ran.dp > 1 and v is None,
        "--quantization": lambda v: ran.online_fp8(model) and v == "fp8",
        "--ep-size": lambda v: ran.expert_parallel and v == str(ran.gpus),
        # SGLang divides these two by dp_size under DP attention (server_args.py, the model runner): the ranks' sum
        "--max-running-requests": lambda v: v == str(b.max_batch_size * ran.dp),
        "--chunked-prefill-size": lambda v: b.policy == "chunked" and v == str(b.max_batched_tokens * ran.dp),
        "--enable-mixed-chunk": lambda v: b.policy == "chunked" and v is None,
        "--disable-radix-cache": lambda v: "prefix_cache" not in ran.on and v is None,
        "--page-size": lambda v: "prefix_cache" in ran.on and v == str(ran.p("prefix_cache", "block_tokens")),
        "--kv-cache-dtype": lambda v: "compression" in ran.on and ran.p("compression", "mode") == "fp8"
        and v == "fp8_e4m3",
        "--speculative-algorithm": lambda v: drafted and v == ("EAGLE" if ran.mtp else "STANDALONE"),
        "--speculative-draft-model-path": lambda v: drafted and not ran.mtp and v == ran.draft_repo(),
        "--speculative-num-steps": lambda v: drafted and v == str(k),
        "--speculative-eagle-topk": lambda v: drafted and v == "1",
        "--speculative-num-draft-tokens": lambda v: drafted and v == str((k or 0) + 1),
        "--enable-hierarchical-cache": lambda v: tiers and v is None,
        "--hicache-size": lambda v: tiers and int(v or "") == int(ran.p("tiered", "host_capacity_gib") // ran.tp),
    }
    assert env == {}
    for name, value in flags.items():
        assert name in checks, f"{name} exported, but it is no simulated setting"
        assert checks[name](value), f"{name} {value}: not the simulated value"


# what each engine must carry when it was simulated (the other half: nothing simulated is silently dropped)
def _required(ran: Ran, engine: str, model: str) -> set[str]:
    b, vllm = ran.scenario.batching, engine == "vllm"
    need = {"--tensor-parallel-size", "--max-num-seqs"} if vllm else {"--tp-size", "--max-running-requests"}
    if ran.online_fp8(model):
        need.add("--quantization")
    if ran.expert_parallel:
        need.add("--enable-expert-parallel" if vllm else "--ep-size")
    if ran.dp > 1:
        need |= {"--data-parallel-size"} if vllm else {"--dp-size", "--enable-dp-attention"}
    if b.policy == "chunked":
        need |= {"--max-num-batched-tokens", "--enable-chunked-prefill"} if vllm else {"--chunked-prefill-size",
                                                                                       "--enable-mixed-chunk"}
    if "prefix_cache" not in ran.on:
        need.add("--no-enable-prefix-caching" if vllm else "--disable-radix-cache")
    elif {"prefix_cache", "tiered"} <= ran.on:
        need.add("--kv-transfer-config" if vllm else "--enable-hierarchical-cache")
    if "compression" in ran.on and ran.p("compression", "mode") == "fp8":
        need.add("--kv-cache-dtype")
    if "speculative" in ran.on and ran.draft_repo() is not None:
        need.add("--speculative-config" if vllm else "--speculative-draft-model-path")
    if ran.mtp:
        need.add("--speculative-config" if vllm else "--speculative-algorithm")
    return need


def _unmatched(ran: Ran) -> list[str]:
    """The simulated settings no engine serves as simulated: each must be a "no served feature matches" note."""
    out = []
    if ran.scenario.batching.policy == "continuous":
        out.append("batching.policy 'continuous'")
    if "sequence_parallel" in ran.on:
        out.append("sequence_parallel")
    if "tiered" in ran.on:
        out.append("tiered" if "prefix_cache" not in ran.on else "the live-KV part of tiered")
    if "compression" in ran.on and ran.p("compression", "mode") != "fp8":
        out.append(f"compression.mode {ran.p('compression', 'mode')!r}")
    return out


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("policy", ["continuous", "chunked"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_exported_flag_is_a_simulated_setting_with_its_value(setup, aic, engine, policy, kind):
    _, data = setup
    data = with_fields(data, {"batching.policy": policy})
    candidate = _one(aic, kind)
    ran = Ran(aic, data, candidate)
    suggestion = ENGINES[engine](aic, data, candidate, 3)
    model, env, flags = parsed(suggestion)
    assert model == AIC_MODEL
    _check_all(ran, engine, suggestion)


def _check_all(ran: Ran, engine: str, suggestion: Suggestion) -> None:
    model, env, flags = parsed(suggestion)
    (_check_vllm if engine == "vllm" else _check_sglang)(ran, model, env, flags)
    assert _required(ran, engine, model) <= set(flags), "a simulated setting the engine has is missing"
    # the parsed command is the settings' own list: each with where its value comes from
    assert {s.name for s in suggestion.settings} == set(flags) | set(env)
    assert all(s.source and s.verified for s in suggestion.settings)
    assert suggestion.gpus_per_replica == ran.gpus  # the GPUs one command serves on: tp x attention_dp
    for what in _unmatched(ran):
        assert any(n.startswith(f"{NO_MATCH} {what}") for n in suggestion.notes), what


# (profile, the repository it must be served from): fp8 weights from a 16-bit checkpoint, and MoE layouts
WEIGHT_LAYOUTS = (("aic-llama3.1-70b-tp4-h100-fp8", "meta-llama/Llama-3.1-70B"),
                  ("aic-mixtral-8x7b-tp4-h100-ep", "mistralai/Mixtral-8x7B-v0.1"),
                  ("aic-qwen3-235b-a22b-tp8-h200-fp8-ep", "Qwen/Qwen3-235B-A22B-FP8"),
                  ("aic-deepseek-v3-tp8-h200-fp8", "deepseek-ai/DeepSeek-V3"),
                  ("aic-gpt-oss-120b-tp8-h100-fp4-ep", "openai/gpt-oss-120b"))


# speculative only where the profile prices it (Mixtral and gpt-oss-120b have no draft: docs/aic_profiles.md)
SPECULATIVE_LAYOUTS = ("aic-llama3.1-70b-tp4-h100-fp8", "aic-qwen3-235b-a22b-tp8-h200-fp8-ep",
                       "aic-deepseek-v3-tp8-h200-fp8")


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("name,repo,kind", [(n, r, k) for n, r in WEIGHT_LAYOUTS for k in ("baseline", "speculative")
                                            if k == "baseline" or n in SPECULATIVE_LAYOUTS])
def test_weights_and_expert_layout_are_exported_as_simulated(setup, engine, name, repo, kind):
    _, data = setup
    profile = resolve_profile(name)
    assert (profile.speculative is not None) == (name in SPECULATIVE_LAYOUTS)
    candidate = _one(profile, kind)
    data = with_fields(data, {"batching.policy": "chunked"})
    suggestion = ENGINES[engine](profile, data, candidate, 2)
    model, _, flags = parsed(suggestion)
    assert model == repo
    _check_all(Ran(profile, data, candidate), engine, suggestion)
    assert ("--quantization" in flags) == (profile.key.dtype == "fp8" and repo not in STORED_QUANTIZED)


def dp_profile(name: str, tp: int, dp: int) -> Profile:
    """A shipped MoE profile re-keyed as attention data parallel, ``dp`` ranks of ``tp`` GPUs (until DP profiles
    ship): the export reads the layout off the key, so the costs need not be a DP rank's. A separate draft is
    renamed to the rank's TP, as a DP profile would price it."""
    base = resolve_profile(name)
    out = dataclasses.replace(base, key=dataclasses.replace(base.key, tp=tp, attention_dp=dp))
    spec = out.speculative
    if spec is not None and " MTP" not in spec.draft_model:
        draft = f"{spec.draft_model.split(' (')[0]} (tp{tp})"
        out = dataclasses.replace(out, speculative=dataclasses.replace(spec, draft_model=draft))
    return out


# (shipped profile, tp, attention_dp, the repository): experts by EP over DP x TP, and by TP (deepseek: MLA, MTP)
DP_LAYOUTS = (("aic-qwen3-235b-a22b-tp8-h200-fp8-ep", 1, 8, "Qwen/Qwen3-235B-A22B-FP8"),
              ("aic-deepseek-v3-tp8-h200-fp8", 2, 4, "deepseek-ai/DeepSeek-V3"))


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("policy", ["continuous", "chunked"])
@pytest.mark.parametrize("kind", ["baseline", "speculative", "prefix_cache+tiered"])
@pytest.mark.parametrize("name,tp,dp,repo", DP_LAYOUTS, ids=lambda x: str(x))
def test_attention_data_parallel_is_exported_as_simulated(setup, engine, policy, kind, name, tp, dp, repo):
    _, data = setup
    profile = dp_profile(name, tp, dp)
    assert profile.key.gpus == tp * dp and profile.key.attention_dp == dp
    data = with_fields(data, {"batching.policy": policy})
    candidate = _one(profile, kind)
    suggestion = ENGINES[engine](profile, data, candidate, 3)
    assert parsed(suggestion)[0] == repo
    _check_all(Ran(profile, data, candidate), engine, suggestion)
    assert any(n.startswith(f"attention data parallelism (profile key.attention_dp {dp})") for n in suggestion.notes)
    assert "run 3 replica(s) of this command" in suggestion.text()
    assert f"each on {tp * dp} GPU(s) = {3 * tp * dp} GPU(s)" in suggestion.text()


def test_attention_data_parallel_commands_by_hand(setup):
    _, data = setup
    profile = dp_profile("aic-qwen3-235b-a22b-tp8-h200-fp8-ep", 1, 8)
    chunked = with_fields(data, {"batching.policy": "chunked"})
    # default.toml batching: max_batch_size 64, max_batched_tokens 8192, each DP rank's
    s = vllm_suggestion(profile, chunked, _one(profile, "baseline"), 3)
    assert s.command() == ("vllm serve Qwen/Qwen3-235B-A22B-FP8 \\\n    --tensor-parallel-size 1 \\\n"
                           "    --data-parallel-size 8 \\\n    --max-num-seqs 64 \\\n"
                           "    --max-num-batched-tokens 8192 \\\n    --enable-chunked-prefill \\\n"
                           "    --no-enable-prefix-caching \\\n    --enable-expert-parallel")
    sources = {x.name: x.source for x in s.settings}
    assert sources["--data-parallel-size"].startswith("profile key.attention_dp")
    assert sources["--tensor-parallel-size"].startswith("profile key.tp")
    assert "each attention data-parallel rank's" in sources["--max-num-seqs"]
    g = sglang_suggestion(profile, chunked, _one(profile, "baseline"), 3)
    # SGLang: --tp-size is all 8 GPUs, and it divides --max-running-requests / --chunked-prefill-size by --dp-size
    assert g.command() == ("python -m sglang.launch_server --model-path Qwen/Qwen3-235B-A22B-FP8 \\\n"
                           "    --tp-size 8 \\\n    --dp-size 8 \\\n    --enable-dp-attention \\\n"
                           "    --max-running-requests 512 \\\n    --chunked-prefill-size 65536 \\\n"
                           "    --enable-mixed-chunk \\\n    --disable-radix-cache \\\n    --ep-size 8")
    sources = {x.name: x.source for x in g.settings}
    assert sources["--tp-size"].startswith("profile key.tp 1 x key.attention_dp 8")
    assert sources["--dp-size"].startswith("profile key.attention_dp")
    assert sources["--enable-dp-attention"].startswith("profile key.attention_dp")
    for made in (s, g):
        assert "run 3 replica(s) of this command behind a load balancer (the plan's replica count), each on 8 " \
               "GPU(s) = 24 GPU(s)" in made.text()
        assert made.to_dict()["gpus_per_replica"] == 8


def test_a_profile_without_attention_data_parallelism_exports_no_dp_flag(setup, aic):
    _, data = setup
    for profile in (aic, resolve_profile("aic-qwen3-235b-a22b-tp8-h200-fp8-ep")):  # dense, and MoE without DP
        for make in ENGINES.values():
            s = make(profile, data, _one(profile, "baseline"), 2)
            flags = parsed(s)[2]
            assert not {"--data-parallel-size", "--dp-size", "--enable-dp-attention"} & set(flags)
            assert not any("attention data" in n for n in s.notes)
            assert not any("data-parallel" in x.source for x in s.settings)
            assert s.gpus_per_replica == profile.key.tp


def test_baseline_commands_by_hand(setup):
    profile, data = setup
    s = vllm_suggestion(profile, data, _one(profile, "baseline"), 7)
    # profile key.tp = 4; default.toml batching: max_batch_size 64, max_batched_tokens 8192; no prefix cache
    assert s.command() == HEAD + " \\\n    --no-enable-prefix-caching"
    sources = {x.name: x.source for x in s.settings}
    assert sources["--tensor-parallel-size"] == "profile key.tp"
    assert sources["--max-num-seqs"] == "scenario batching.max_batch_size"
    assert sources["--max-num-batched-tokens"].startswith("scenario batching.max_batched_tokens")
    text = s.text()
    assert text.startswith("# vLLM SUGGESTION") and "run 7 replica(s)" in text
    assert text.endswith(HEAD + " \\\n    --no-enable-prefix-caching\n")
    assert "# candidate: baseline" in text  # the app's test reads this line
    g = sglang_suggestion(profile, data, _one(profile, "baseline"), 7)
    assert g.command() == ("python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-70B \\\n"
                           "    --tp-size 4 \\\n    --max-running-requests 64 \\\n    --disable-radix-cache")
    assert g.text().startswith("# SGLang SUGGESTION")
    assert s.to_dict()["engine"] == "vllm" and g.to_dict()["engine"] == "sglang"


def test_chunked_policy_by_hand(setup):
    profile, data = setup
    chunked = with_fields(data, {"batching.policy": "chunked"})
    s = vllm_suggestion(profile, chunked, _one(profile, "baseline"))
    assert s.command() == HEAD + " \\\n    --enable-chunked-prefill \\\n    --no-enable-prefix-caching"
    assert not any("'continuous'" in n for n in s.notes)
    g = sglang_suggestion(profile, chunked, _one(profile, "baseline"))
    assert parsed(g)[2] == {"--tp-size": "4", "--max-running-requests": "64", "--chunked-prefill-size": "8192",
                            "--enable-mixed-chunk": None, "--disable-radix-cache": None}


def test_speculative_names_the_real_draft_and_the_simulated_k(aic, setup):
    _, data = setup
    s = vllm_suggestion(aic, data, _one(aic, "speculative"))
    # the aic profile's speculative.draft_model is "llama-3.1-8b (tp4)", its k is 4
    assert json.loads(parsed(s)[2]["--speculative-config"]) == {
        "method": "draft_model", "model": "meta-llama/Llama-3.1-8B", "num_speculative_tokens": 4}
    spec = next(x for x in s.settings if x.name == "--speculative-config")
    assert "profile speculative.draft_model 'llama-3.1-8b'" in spec.source and "profile speculative.k" in spec.source
    own = Candidate("speculative", {"speculative": {"k": 2}})
    assert json.loads(parsed(vllm_suggestion(aic, data, own))[2]["--speculative-config"])[
        "num_speculative_tokens"] == 2
    flags = parsed(sglang_suggestion(aic, data, own))[2]
    assert (flags["--speculative-num-steps"], flags["--speculative-num-draft-tokens"]) == ("2", "3")


def test_a_hypothetical_draft_gets_no_speculative_flag(setup):
    _, data = setup
    profile = resolve_profile(HYPOTHETICAL_DRAFT)
    draft = profile.speculative.draft_model
    assert draft.startswith("hypothetical-") and draft.split(" (")[0] not in HF_REPOS
    for engine, make in ENGINES.items():
        s = make(profile, data, _one(profile, "speculative"))
        assert not any(name.startswith("--speculative") for name in parsed(s)[2]), engine
        assert any(n.startswith(f"{NO_MATCH} the simulated draft") and "hypothetical stand-in" in n
                   for n in s.notes), engine


def test_adaptive_k_exports_the_simulated_maximum(aic, setup):
    _, data = setup
    adaptive = Candidate("speculative", {"speculative": {"k": 5, "adaptive": True}})
    s = vllm_suggestion(aic, data, adaptive)
    assert json.loads(parsed(s)[2]["--speculative-config"])["num_speculative_tokens"] == 5
    assert any(n.startswith(f"{NO_MATCH} adaptive K") and "at most 5" in n for n in s.notes)


def test_prompt_lookup_is_ngram_in_vllm_and_unmatched_in_sglang(aic, setup):
    _, data = setup
    lookup = Candidate("speculative", {"speculative": {"proposer": "prompt_lookup", "k": 3}})
    assert json.loads(parsed(vllm_suggestion(aic, data, lookup))[2]["--speculative-config"]) == {
        "method": "ngram", "num_speculative_tokens": 3}
    g = sglang_suggestion(aic, data, lookup)
    assert not any(name.startswith("--speculative") for name in parsed(g)[2])
    assert any(n.startswith(f"{NO_MATCH} proposer 'prompt_lookup'") for n in g.notes)


def test_prefix_block_size_is_exported_only_where_vllm_takes_it(aic, setup):
    _, data = setup
    default = vllm_suggestion(aic, data, _one(aic, "prefix_cache"))  # 512-token blocks: above vLLM's 256
    assert "--block-size" not in parsed(default)[2]
    assert any(n.startswith(f"{NO_MATCH} prefix_cache.block_tokens 512") for n in default.notes)
    small = Candidate("prefix_cache", {"prefix_cache": {"block_tokens": 16}})
    assert parsed(vllm_suggestion(aic, data, small))[2]["--block-size"] == "16"
    assert parsed(sglang_suggestion(aic, data, small))[2]["--page-size"] == "16"


def test_affinity_routing_is_the_routers_job(setup):
    profile, data = setup
    s = vllm_suggestion(profile, data, _one(profile, "prefix_cache"), 3)
    assert any("router" in note for note in s.notes)
    alone = vllm_suggestion(profile, data, _one(profile, "prefix_cache"), 1)
    assert not any("router" in note for note in alone.notes)  # one replica: nothing to route


def test_plain_tiered_exports_no_offload(aic, setup):
    _, data = setup
    for make in ENGINES.values():
        s = make(aic, data, _one(aic, "tiered"))
        model, env, flags = parsed(s)
        assert env == {} and not ({"--kv-transfer-config", "--enable-hierarchical-cache", "--kv-offloading-backend",
                                   "--kv-offloading-size", "--cpu-offload-gb"} & set(flags))
        assert any(n.startswith(f"{NO_MATCH} tiered") and "LIVE KV" in n for n in s.notes)


def test_prefix_cache_tiered_sizes_per_rank_by_hand(aic, setup):
    _, data = setup
    # the aic profile: host memory 256 GiB, tp 4 -> 64 GiB per rank; a 48 GiB host tier -> 12 GiB per rank
    small = Candidate("prefix_cache+tiered", {"prefix_cache": {}, "tiered": {"host_capacity_gib": 48.0,
                                                                             "ssd_capacity_gib": 0.0}})
    _, env, flags = parsed(vllm_suggestion(aic, data, small))
    assert env == {"LMCACHE_CHUNK_SIZE": "512", "LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": "12"}
    assert parsed(sglang_suggestion(aic, data, small))[2]["--hicache-size"] == "12"
    _, env, _ = parsed(vllm_suggestion(aic, data, _one(aic, "prefix_cache+tiered")))
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "64" and "LMCACHE_MAX_LOCAL_DISK_SIZE" in env


def test_windowed_policies_and_preemption_are_notes(setup):
    profile, data = setup
    dynamic = with_fields(data, {"batching.policy": "dynamic", "batching.max_wait_ms": 5.0,
                                 "batching.preemption": "swap"})
    for engine, make in ENGINES.items():
        s = make(profile, dynamic, _one(profile, "baseline"))
        flags = parsed(s)[2]
        assert not {"--max-num-batched-tokens", "--enable-chunked-prefill", "--chunked-prefill-size"} & set(flags)
        assert any(n.startswith(f"{NO_MATCH} batching.policy 'dynamic'") for n in s.notes), engine
        assert any(n.startswith(f"{NO_MATCH} batching.preemption 'swap'") for n in s.notes), engine
    recompute = with_fields(data, {"batching.preemption": "recompute"})
    notes = vllm_suggestion(profile, recompute, _one(profile, "baseline")).notes
    assert not any("preemption" in n and n.startswith(NO_MATCH) for n in notes)


def test_absent_batching_takes_the_simulators_defaults(setup):
    profile, data = setup
    bare = {k: v for k, v in data.items() if k != "batching"}
    for engine, flag in (("vllm", "--max-num-seqs"), ("sglang", "--max-running-requests")):
        by = {x.name: x for x in ENGINES[engine](profile, bare, _one(profile, "baseline")).settings}
        assert by[flag].value == "256" and "default" in by[flag].source


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
    s, g = recommended_suggestion(rec, profile, data), recommended_sglang(rec, profile, data)
    assert s is not None and s.replicas == 8 and "MISSES the SLA" in s.candidate
    assert g is not None and g.replicas == 8 and "MISSES the SLA" in g.candidate
    none = {"recommended": None, "closest": None}
    assert recommended_suggestion(none, profile, data) is None and recommended_sglang(none, profile, data) is None
    written = write_export(tmp_path / "out", data, {"meets_sla": False}, s, sglang=g)
    assert [p.name for p in written] == ["scenario.toml", "recommendation.json", "vllm.txt", "sglang.txt"]
    assert tomllib.loads((tmp_path / "out" / "scenario.toml").read_text()) == data
    assert json.loads((tmp_path / "out" / "recommendation.json").read_text()) == {"meets_sla": False}
    assert (tmp_path / "out" / "vllm.txt").read_text() == s.text()
    assert (tmp_path / "out" / "sglang.txt").read_text() == g.text()
    best = {"recommended": {"candidate": "baseline", "replicas": 2}, "closest": None}
    met = recommended_sglang(best, profile, data)
    assert met is not None and met.candidate == "baseline" and met.replicas == 2
    only = write_export(tmp_path / "old", data, {}, recommended_suggestion(best, profile, data))  # the old call
    assert [p.name for p in only] == ["scenario.toml", "recommendation.json", "vllm.txt"]


def test_a_summary_with_its_layout_is_exported_on_that_profile(setup):
    profile, data = setup  # PROFILE is a Llama-3-70B profile; the layout names the aic Llama-3.1-70B one
    rec = {"recommended": {"candidate": "baseline", "replicas": 2, "layout": {"profile": AIC, "tp": 4}},
           "closest": None}
    for make in (recommended_suggestion, recommended_sglang):
        s = make(rec, profile, data)
        assert s is not None and s.model == AIC_MODEL
