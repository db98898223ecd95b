"""A recommendation kept as files, and its serving settings as a vLLM command line (a suggestion).

``vllm_suggestion`` turns one candidate (its ``[strategy.*]`` tables), the scenario's batching and the profile
into ``vllm serve`` flags; every flag and environment variable carries where its value comes from (the
candidate's settings, the scenario, or the profile) and each line says whether its flag name was checked
against vLLM's documentation (docs/planning.md lists the pages). Where vLLM has no equivalent of a simulated
setting (an int4 KV cache), the output says so instead of a flag. It is a starting point to measure, not a
tested configuration: vLLM's scheduler, kernels and memory accounting are not the simulator's.

``write_export`` writes a folder: scenario.toml (the scenario as recommended: the request rate and any
request-count override applied, so ``tripath recommend DIR/scenario.toml`` reruns it), recommendation.json
(what ``tripath recommend --json`` prints) and vllm.txt (the suggestion), each file atomically.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path
from typing import Any

from tripath.core.atomic import writing_dir
from tripath.planning.candidates import Candidate, by_names
from tripath.profile.profile import Profile
from tripath.simulator.scenario.scenario import BatchingSpec
from tripath.simulator.scenario.strategy import GIB, HOST_SSD, PrefixCacheSpec, SpeculativeSpec, TieredSpec

# Hugging Face repositories of the models the shipped profiles name (the same repositories as
# tripath/calibrate/published/speculative.py ARCHS cites for their shapes); a name not here is printed as it is
HF_REPOS = {
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-2-70b": "meta-llama/Llama-2-70b-hf",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "llama-68m": "JackFram/llama-68m",
    "llama-160m": "JackFram/llama-160m",
    # the aic profiles' models (tripath/calibrate/aic/catalog.py; their config.json under data/model_configs/)
    "codellama-34b": "codellama/CodeLlama-34b-hf",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
}
# vLLM's --kv-cache-dtype per compression mode: None where vLLM has no KV cache format of that kind
KV_CACHE_DTYPES: dict[str, tuple[str | None, str]] = {
    "fp8": ("fp8", "the same format (1 byte per element)"),
    "int8": ("fp8", "vLLM has no int8 KV cache; fp8 stores the same 1 byte per element, but its accuracy and "
                    "kernels are fp8's, not the simulated int8's"),
    "int4": (None, "vLLM has no int4 KV cache dtype (--kv-cache-dtype takes auto, fp8, fp8_e4m3, fp8_e5m2): "
                   "no flag; without it vLLM keeps the model's dtype"),
}
LMCACHE_CONNECTOR = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
HEADER = ("# vLLM SUGGESTION, not a tested configuration: the recommended candidate's settings as vLLM flags.\n"
          "# Measure it on your deployment; vLLM's scheduler and memory accounting are not the simulator's.")


@dataclasses.dataclass(frozen=True)
class Setting:
    """One flag (``--name value``) or environment variable (``NAME=value``), where its value comes from, and
    whether its name was checked in vLLM's (or LMCache's) documentation."""

    name: str
    value: str | None  # None: a bare flag (--enable-prefix-caching); with ``env``, never
    source: str
    verified: bool = True
    env: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "source": self.source, "verified": self.verified,
                "env": self.env}


@dataclasses.dataclass(frozen=True)
class VllmSuggestion:
    """``vllm serve MODEL`` with flags and environment, for one replica of ``candidate``."""

    candidate: str
    model: str
    model_source: str
    replicas: int | None
    settings: tuple[Setting, ...]
    notes: tuple[str, ...] = dataclasses.field(default_factory=tuple)

    def command(self) -> str:
        """The shell command: environment assignments, ``vllm serve MODEL``, then the flags, one per line."""
        env = [f"{s.name}={shlex.quote(s.value or '')}" for s in self.settings if s.env]
        head = " ".join([*env, "vllm", "serve", shlex.quote(self.model)])
        flags = [f"{s.name}" + ("" if s.value is None else f" {shlex.quote(s.value)}")
                 for s in self.settings if not s.env]
        return " \\\n    ".join([head, *flags])

    def text(self) -> str:
        """The header, one comment line per setting (where it comes from), the notes, then the command."""
        lines = [HEADER, f"# candidate: {self.candidate}" + (
            "" if self.replicas is None else f"; run {self.replicas} replica(s) of this command behind a load "
                                             f"balancer (the plan's replica count)")]
        lines.append(f"#   MODEL {self.model}: {self.model_source}")
        for s in self.settings:
            check = "" if s.verified else " [flag name NOT verified in vLLM's docs]"
            shown = s.name if s.value is None else f"{s.name}{'=' if s.env else ' '}{s.value}"
            lines.append(f"#   {shown}: {s.source}{check}")
        lines += [f"# note: {n}" for n in self.notes]
        return "\n".join([*lines, self.command()]) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"label": "suggestion", "candidate": self.candidate, "model": self.model,
                "model_source": self.model_source, "replicas": self.replicas,
                "settings": [s.to_dict() for s in self.settings], "notes": list(self.notes),
                "command": self.command()}


def _hf(name: str) -> tuple[str, str]:
    """(the name vLLM loads, why): the Hugging Face repository where one is known, else the profile's name."""
    base = re.sub(r"\s*\(.*\)\s*$", "", name)
    repo = HF_REPOS.get(base)
    if repo is None:
        return base, "no Hugging Face repository known for it: replace with your checkpoint's path"
    return repo, f"the Hugging Face repository of {base!r}"


def vllm_suggestion(profile: Profile, data: dict[str, Any], candidate: Candidate,
                    replicas: int | None = None) -> VllmSuggestion:
    """The vLLM flags for one replica of ``candidate`` on ``profile`` with the scenario's batching."""
    model, why = _hf(profile.model.name)
    batching = data.get("batching") or {}
    default = BatchingSpec()
    settings = [Setting("--tensor-parallel-size", str(int(profile.key.tp)), "profile key.tp")]

    def from_batching(flag: str, key: str) -> None:
        value = batching.get(key)
        where = f"scenario batching.{key}" if value is not None else f"the simulator's default batching.{key}"
        settings.append(Setting(flag, str(int(getattr(default, key) if value is None else value)), where))

    from_batching("--max-num-seqs", "max_batch_size")
    from_batching("--max-num-batched-tokens", "max_batched_tokens")
    notes: list[str] = []
    strategy = candidate.strategy
    if "speculative" in strategy:
        settings.append(_speculative(profile, strategy["speculative"], notes))
    if "compression" in strategy:
        mode = str(strategy["compression"].get("mode"))
        dtype, remark = KV_CACHE_DTYPES.get(mode, (None, f"no vLLM KV cache dtype known for mode {mode!r}: no flag"))
        if dtype is not None:
            settings.append(Setting("--kv-cache-dtype", dtype, f"candidate compression.mode {mode!r}: {remark}"))
        else:
            notes.append(f"compression.mode {mode!r}: {remark}")
    if "sequence_parallel" in strategy:
        degree = int(strategy["sequence_parallel"].get("degree", 2))
        settings.append(Setting(
            "--prefill-context-parallel-size", str(degree),
            f"candidate sequence_parallel.degree: the simulated replica spans tp x {degree} GPUs and splits each "
            f"prompt's prefill and KV over {degree} ranks; the flag is documented for vLLM Ascend (world size tp x "
            f"prefill CP), its support on GPUs is not verified", verified=False))
        notes.append("--decode-context-parallel-size is vLLM's decode-side context parallelism, but it shards the "
                     "KV inside the tensor-parallel group (tp % dcp == 0) and adds no GPUs, so it is not the "
                     "simulated split: not emitted")
    if "tiered" in strategy:
        settings += _tiered(profile, strategy["tiered"], notes)
    if "prefix_cache" in strategy:
        table = strategy["prefix_cache"]
        block = int(table.get("block_tokens", PrefixCacheSpec.block_tokens))
        settings.append(Setting("--enable-prefix-caching", None,
                                f"candidate prefix_cache: automatic prefix caching; the simulation cached "
                                f"{block}-token blocks; vLLM hashes its own --block-size blocks (16 tokens by "
                                f"default), so it can also reuse shorter shared prefixes"))
        if table.get("routing", PrefixCacheSpec.routing) == "affinity" and (replicas or 1) > 1:
            notes.append("prefix_cache.routing 'affinity': the simulated replicas take a request where its prefix "
                         "is cached; that is the router's job in front of the vllm serve replicas (a KV-aware router "
                         "such as llm-d's or Dynamo's), not a vllm serve flag")
    else:
        notes.append("vLLM turns automatic prefix caching on by default; the simulation of this candidate reused "
                     "no prefixes, so its numbers hold with --no-enable-prefix-caching and caching can only help")
    notes.append("--cpu-offload-gb offloads model WEIGHTS to host memory (not the KV cache); no candidate "
                 "simulates that, so it is not emitted")
    return VllmSuggestion(candidate.name, model, f"profile model.name {profile.model.name!r}: {why}", replicas,
                          tuple(settings), tuple(notes))


def _speculative(profile: Profile, table: dict[str, Any], notes: list[str]) -> Setting:
    spec = SpeculativeSpec(**{k: v for k, v in table.items() if k != "acceptance"})
    section = profile.speculative
    k = spec.k if spec.k is not None else (None if section is None else section.k)
    k_source = "candidate speculative.k" if spec.k is not None else "profile speculative.k"
    if spec.proposer == "prompt_lookup":
        config: dict[str, Any] = {"method": "ngram", "num_speculative_tokens": k}
        where = f"num_speculative_tokens from {k_source}; method ngram: the candidate's prompt-lookup proposer"
    else:
        draft = "DRAFT_MODEL" if section is None else section.draft_model
        draft_model, why = _hf(draft)
        config = {"model": draft_model, "num_speculative_tokens": k, "method": "draft_model"}
        where = (f"model: profile speculative.draft_model {draft!r} ({why}); num_speculative_tokens from "
                 f"{k_source}")
    if spec.adaptive:
        notes.append("the candidate adapts K (adaptive = true); vLLM's --speculative-config takes a fixed "
                     "num_speculative_tokens: the profile's K is given")
    return Setting("--speculative-config", json.dumps(config, separators=(", ", ": ")), where)


def _tiered(profile: Profile, table: dict[str, Any], notes: list[str]) -> list[Setting]:
    spec = TieredSpec(**table)
    if spec.host_capacity_gib is not None:
        host_gib, where = spec.host_capacity_gib, "candidate tiered.host_capacity_gib"
    else:
        host_gib, where = profile.hardware.host_memory_bytes / GIB, "profile hardware.host_memory_bytes"
    out = [Setting("--kv-transfer-config", json.dumps(LMCACHE_CONNECTOR, separators=(",", ":")),
                   "candidate tiered: a host tier under the device KV cache, through LMCache's vLLM connector"),
           Setting("LMCACHE_LOCAL_CPU", "True", "candidate tiered: LMCache's host-memory backend", env=True),
           Setting("LMCACHE_MAX_LOCAL_CPU_SIZE", f"{host_gib:g}",
                   f"{where} in GiB (LMCache reads GB; per process or per replica not verified)", env=True),
           Setting("LMCACHE_CHUNK_SIZE", str(spec.chunk_tokens), "candidate tiered.chunk_tokens (the page)", env=True)]
    if HOST_SSD in profile.paging and (spec.ssd_capacity_gib is None or spec.ssd_capacity_gib > 0):
        ssd = (profile.hardware.ssd_bytes / GIB) if spec.ssd_capacity_gib is None else spec.ssd_capacity_gib
        notes.append(f"the simulated tiers include an SSD tier of {ssd:,.0f} GiB (profile paging.host_ssd); "
                     f"LMCache's local-disk backend variables are not verified here, so none is set")
    return out


# --- scenario.toml ---------------------------------------------------------------------------------
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: {value} has no place in a scenario")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v, where) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v, where)}" for k, v in value.items()) + "}"
    raise ValueError(f"{where}: cannot write a {type(value).__name__} to TOML")


def scenario_toml(data: dict[str, Any]) -> str:
    """The scenario dict as TOML text that ``tomllib`` reads back to the same dict (tables as [a.b] headers)."""
    lines: list[str] = []

    def table(node: dict[str, Any], path: list[str]) -> None:
        scalars = [(k, v) for k, v in node.items() if not isinstance(v, dict)]
        tables = [(k, v) for k, v in node.items() if isinstance(v, dict)]
        if path and (scalars or not tables):
            lines.extend(["", "[" + ".".join(_key(p) for p in path) + "]"])
        lines.extend(f"{_key(k)} = {_value(v, '.'.join([*path, k]))}" for k, v in scalars)
        for k, v in tables:
            table(v, [*path, k])

    table(data, [])
    return "\n".join(lines).lstrip("\n") + "\n"


def write_export(directory: str | Path, scenario: dict[str, Any], recommendation: dict[str, Any],
                 suggestion: VllmSuggestion | None, replace: bool = False) -> list[Path]:
    """scenario.toml, recommendation.json and (when a candidate was chosen) vllm.txt in ``directory``, written
    as one folder (core.atomic.writing_dir: a non-empty folder is refused unless ``replace``)."""
    files = [("scenario.toml", scenario_toml(scenario)),
             ("recommendation.json", json.dumps(recommendation, indent=2, sort_keys=True, allow_nan=False) + "\n")]
    if suggestion is not None:
        files.append(("vllm.txt", suggestion.text()))
    with writing_dir(directory, replace, "--export") as tmp:
        for name, text in files:
            (tmp / name).write_text(text, encoding="utf-8")
    return [Path(directory) / name for name, _ in files]


def recommended_suggestion(recommendation: dict[str, Any], profile: Profile, data: dict[str, Any]
                           ) -> VllmSuggestion | None:
    """The suggestion for a recommendation's dict (``Recommendation.to_dict``): its recommended candidate on the
    plan's replicas, else the closest on the replicas searched (labelled as missing the SLA), else None."""
    best, closest = recommendation.get("recommended"), recommendation.get("closest")
    chosen = best or closest
    if chosen is None:
        return None
    candidate = by_names(profile, [chosen["candidate"]])[0]
    replicas = chosen["replicas"] if best is not None else chosen.get("searched_replicas")
    out = vllm_suggestion(profile, data, candidate, None if replicas is None else int(replicas))
    return out if best is not None else dataclasses.replace(out, candidate=f"{out.candidate} (the closest; it "
                                                                           f"MISSES the SLA)")
