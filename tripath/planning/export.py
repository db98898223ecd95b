"""A recommendation kept as files, and its serving settings as vLLM and SGLang command lines (suggestions).

The rule: a command carries exactly what was simulated, nothing else. ``Simulated.of`` builds the candidate's
scenario the way the simulator does (its ``[strategy.*]`` tables applied to the scenario dict, every default
resolved, tripath/planning/scenario_dict.py ``build``); ``vllm_suggestion`` and ``sglang_suggestion`` turn
each simulated setting into a flag only where the engine has a feature that does the same thing, with the
simulated value. Where it has none (the simulated whole-prompt prefill, paging of live KV, sequence
parallelism, an int8 or int4 KV cache, a draft model no checkpoint exists for, ...), the output says "no
served feature matches" and why, instead of a flag. Each flag and environment variable keeps where its value
comes from (the candidate, the scenario, the profile) and whether its name was checked against the engine's
documentation or source (docs/planning.md lists what was read). A command is a starting point to measure,
not a tested configuration: the engines' schedulers, kernels and memory accounting are not the simulator's.

``write_export`` writes a folder: scenario.toml (the scenario as recommended: the request rate and any
request-count override applied, so ``tripath recommend DIR/scenario.toml`` reruns it), recommendation.json
(what ``tripath recommend --json`` prints), vllm.txt and sglang.txt (the suggestions), each file atomically.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from tripath.core.atomic import writing_dir
from tripath.planning.candidates import Candidate, by_names
from tripath.planning.scenario_dict import build, with_fields
from tripath.profile.profile import Profile, resolve_profile
from tripath.simulator.scenario.scenario import Scenario
from tripath.simulator.scenario.strategy import GIB, HOST_SSD, SpeculativeSpec, TieredSpec

# Hugging Face repositories of the models the shipped profiles name (the same repositories as
# tripath/calibrate/published/speculative.py ARCHS cites for their shapes). A target not here is printed as the
# profile names it; a DRAFT not here gets no speculative flag (a draft is served only from a real checkpoint)
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
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
}
# checkpoints that store their weights at the profile's precision (model, weights): the engine reads the
# quantization from the checkpoint's config, so no --quantization flag goes with them
QUANTIZED_REPOS = {
    ("qwen3-235b-a22b", "fp8"): "Qwen/Qwen3-235B-A22B-FP8",
    ("deepseek-v3", "fp8"): "deepseek-ai/DeepSeek-V3",
    ("gpt-oss-120b", "fp4"): "openai/gpt-oss-120b",
}
# how tripath/calibrate/published/speculative.py names a draft shape no released checkpoint has
HYPOTHETICAL = "hypothetical-"
NO_MATCH = "no served feature matches"
# the compression modes an engine's KV cache dtype stores exactly: tripath's fp8 is E4M3, one byte per element
# with per-tensor scales (tripath/calibrate/published/compression.py), vLLM's "fp8" (its E4M3) and SGLang's
# "fp8_e4m3"; int8 and int4 (8 or 4 bits + a scale and zero per group) are no engine's KV cache format
KV_CACHE_DTYPES = {"fp8": {"vllm": "fp8", "sglang": "fp8_e4m3"}}  # mode -> engine -> its --kv-cache-dtype
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)  # vllm/config/cache.py BlockSize
LMCACHE_CONNECTOR = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
WINDOWED = ("static", "dynamic", "adaptive")  # batch formation no iteration-level engine has


@dataclasses.dataclass(frozen=True)
class Setting:
    """One flag (``--name value``) or environment variable (``NAME=value``), where its value comes from, and
    whether its name was checked in the engine's (or LMCache's) documentation or source."""

    name: str
    value: str | None  # None: a bare flag (--enable-prefix-caching); with ``env``, never
    source: str
    verified: bool = True
    env: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "source": self.source, "verified": self.verified,
                "env": self.env}


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """A serving command for one replica of ``candidate``: the launcher, the model, flags and environment.
    Subclasses name the engine (``ENGINE``, ``KEY``) and how it is launched (``LAUNCH``: the words before the
    model)."""

    ENGINE: ClassVar[str] = ""
    KEY: ClassVar[str] = ""
    LAUNCH: ClassVar[tuple[str, ...]] = ()

    candidate: str
    model: str
    model_source: str
    replicas: int | None
    settings: tuple[Setting, ...]
    notes: tuple[str, ...] = dataclasses.field(default_factory=tuple)
    gpus_per_replica: int | None = None  # GPUs one command serves on (the profile's key.gpus: tp x attention_dp)

    def command(self) -> str:
        """The shell command: environment assignments, the launcher and the model, then the flags, one per line."""
        env = [f"{s.name}={shlex.quote(s.value or '')}" for s in self.settings if s.env]
        head = " ".join([*env, *self.LAUNCH, shlex.quote(self.model)])
        flags = [f"{s.name}" + ("" if s.value is None else f" {shlex.quote(s.value)}")
                 for s in self.settings if not s.env]
        return " \\\n    ".join([head, *flags])

    def text(self) -> str:
        """The header, one comment line per setting (where it comes from), the notes, then the command."""
        lines = [f"# {self.ENGINE} SUGGESTION, not a tested configuration: the recommended candidate's SIMULATED "
                 f"settings as {self.ENGINE} flags; what {self.ENGINE} cannot do as simulated is a note, not a flag.",
                 f"# Measure it on your deployment; {self.ENGINE}'s scheduler and memory accounting are not the "
                 "simulator's.",
                 f"# candidate: {self.candidate}" + self._deployment()]
        lines.append(f"#   MODEL {self.model}: {self.model_source}")
        for s in self.settings:
            check = "" if s.verified else f" [name NOT verified in {self.ENGINE}'s docs]"
            shown = s.name if s.value is None else f"{s.name}{'=' if s.env else ' '}{s.value}"
            lines.append(f"#   {shown}: {s.source}{check}")
        lines += [f"# note: {n}" for n in self.notes]
        return "\n".join([*lines, self.command()]) + "\n"

    def _deployment(self) -> str:
        """The header's deployment: how many replicas of this command (the plan's count) on how many GPUs each."""
        each = "" if self.gpus_per_replica is None else f", each on {self.gpus_per_replica} GPU(s)"
        if self.replicas is None:
            return "" if not each else f"; one replica of this command runs on {self.gpus_per_replica} GPU(s)"
        total = "" if self.gpus_per_replica is None else f" = {self.replicas * self.gpus_per_replica} GPU(s)"
        return (f"; run {self.replicas} replica(s) of this command behind a load balancer (the plan's replica "
                f"count){each}{total}")

    def to_dict(self) -> dict[str, Any]:
        return {"label": "suggestion", "engine": self.KEY, "candidate": self.candidate, "model": self.model,
                "model_source": self.model_source, "replicas": self.replicas,
                "gpus_per_replica": self.gpus_per_replica,
                "settings": [s.to_dict() for s in self.settings], "notes": list(self.notes),
                "command": self.command()}


class VllmSuggestion(Suggestion):
    """``vllm serve MODEL`` with flags and environment."""

    ENGINE = "vLLM"
    KEY = "vllm"
    LAUNCH = ("vllm", "serve")


class SglangSuggestion(Suggestion):
    """``python -m sglang.launch_server --model-path MODEL`` with flags."""

    ENGINE = "SGLang"
    KEY = "sglang"
    LAUNCH = ("python", "-m", "sglang.launch_server", "--model-path")


S = TypeVar("S", bound=Suggestion)


@dataclasses.dataclass(frozen=True)
class Draft:
    """The profile's draft model as an engine would load it: its Hugging Face repository (None: there is none to
    serve) and the TP it was priced at (None: the profile does not say)."""

    name: str
    repo: str | None
    tp: int | None

    @property
    def mtp(self) -> bool:
        """The target's own multi-token-prediction layer (tripath/calibrate/aic/builder.py names it "MODEL MTP"):
        served from the target's checkpoint, no draft repository."""
        return self.name.endswith(" MTP")

    def why_none(self) -> str:
        """Why no speculative flag can name this draft (for a draft with no repository)."""
        kind = ("is a hypothetical stand-in (tripath/calibrate/published/speculative.py: a shape no released "
                "checkpoint has), so no repository holds it" if self.name.startswith(HYPOTHETICAL) else
                "names no checkpoint whose Hugging Face repository tripath knows (export.py HF_REPOS)")
        return (f"{NO_MATCH} the simulated draft: the profile's speculative.draft_model {self.name!r} {kind}; the "
                "simulated costs and acceptance are that draft's, and another draft costs and accepts differently, "
                "so no speculative flag is exported (calibrate a profile with the draft you will serve)")


@dataclasses.dataclass(frozen=True)
class Simulated:
    """What one candidate's simulation ran with: its scenario built as the simulator builds it and the profile.
    ``given``: the [batching] keys the scenario sets itself (the rest are the simulator's defaults)."""

    scenario: Scenario
    profile: Profile
    given: frozenset[str]

    @classmethod
    def of(cls, profile: Profile, data: dict[str, Any], candidate: Candidate) -> Simulated:
        """The candidate's scenario (``Candidate.apply``, then the scenario reader) on ``profile``."""
        return cls(build(candidate.apply(data), None), profile, frozenset(data.get("batching") or ()))

    @property
    def tp(self) -> int:
        """The tensor-parallel degree (of each attention data-parallel rank)."""
        return int(self.profile.key.tp)

    @property
    def dp(self) -> int:
        """Attention data-parallel ranks in one replica (profile key.attention_dp; 1: none)."""
        return int(self.profile.key.attention_dp)

    @property
    def gpus(self) -> int:
        """GPUs of one replica: tp per attention data-parallel rank (profile key.gpus)."""
        return int(self.profile.key.gpus)

    def rank_note(self, engine: str, flag: str) -> str:
        """What a batching source adds under attention data parallelism ("" without): the simulated value is each
        rank's (the simulation ran ``dp`` ranks, each with its own batch); vLLM applies ``flag`` per DP rank (each
        rank is an engine core with its own scheduler), SGLang divides it by --dp-size (server_args.py under
        enable_dp_attention), so SGLang's flag carries the ranks' sum."""
        if self.dp == 1:
            return ""
        if engine == "vLLM":
            return (f", each attention data-parallel rank's (the simulation ran {self.dp} ranks with a batch each; "
                    f"vLLM runs each DP rank as its own engine core whose scheduler applies {flag})")
        return (f", the sum over the {self.dp} attention data-parallel ranks (SGLang divides {flag} by --dp-size "
                "under DP attention, so each rank's scheduler gets the simulated per-rank value)")

    def batching_source(self, key: str) -> str:
        return f"scenario batching.{key}" if key in self.given else f"the simulator's default batching.{key}"

    def speculative_k(self, spec: SpeculativeSpec) -> tuple[int, str]:
        """K as the simulator resolves it (tripath/simulator/paths/speculative.py: the candidate's, else the
        profile's) and where it comes from; with adaptive K it is the most the controller proposes."""
        if spec.k is not None:
            return spec.k, "candidate speculative.k"
        section = self.profile.speculative
        if section is None:  # check_against_profile refuses a speculative run without the section
            raise ValueError(f"profile {self.profile.key_str()} has no speculative section")
        return int(section.k), "profile speculative.k"

    def draft(self) -> Draft:
        """The profile's draft, "name (tpN)" as the profiles write it."""
        section = self.profile.speculative
        base, tp = _name_and_tp("" if section is None else section.draft_model)
        return Draft(base, HF_REPOS.get(base), tp)

    def tiers_gib(self, spec: TieredSpec) -> tuple[float, str, float, str]:
        """(host GiB, its source, SSD GiB, its source) of one replica as the simulator sizes them
        (tripath/simulator/paths/tiered.py TierPhysics): no SSD tier without the profile's host_ssd link. Under
        attention data parallelism, of one rank (the profile's sizes are one rank's)."""
        hw = self.profile.hardware
        host, host_from = ((hw.host_memory_bytes / GIB, "profile hardware.host_memory_bytes")
                           if spec.host_capacity_gib is None else (spec.host_capacity_gib, "candidate tiered"
                                                                                        ".host_capacity_gib"))
        if HOST_SSD not in self.profile.paging:
            return host, host_from, 0.0, f"no SSD tier: the profile has no paging.{HOST_SSD} link"
        ssd, ssd_from = ((hw.ssd_bytes / GIB, "profile hardware.ssd_bytes") if spec.ssd_capacity_gib is None
                         else (spec.ssd_capacity_gib, "candidate tiered.ssd_capacity_gib"))
        return host, host_from, ssd, ssd_from


def _name_and_tp(name: str) -> tuple[str, int | None]:
    """A profile's model name without its "(tpN)" (or other parenthesised) suffix, and N where it says one."""
    match = re.match(r"^(.*?)\s*(?:\((?:tp(\d+)|.*)\))?\s*$", name)
    assert match is not None  # every part of the pattern is optional
    return match.group(1), None if match.group(2) is None else int(match.group(2))


def _hf(name: str) -> tuple[str, str]:
    """(the name the engine loads, why): the Hugging Face repository where one is known, else the profile's name."""
    base = _name_and_tp(name)[0]
    repo = HF_REPOS.get(base)
    if repo is None:
        return base, "no Hugging Face repository known for it: replace with your checkpoint's path"
    return repo, f"the Hugging Face repository of {base!r}"


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(", ", ": "))


def _gib(value: float) -> str:
    """GiB to the MiB (3 decimals), trailing zeros dropped: 64, 894.07."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


# --- what no engine does as simulated: the same notes for both -----------------------------------------------
def _batching_notes(sim: Simulated, engine: str, seqs_flag: str) -> list[str]:
    """The simulated batch formation and preemption where ``engine`` has no setting that does the same
    (``seqs_flag``: its flag for the most sequences in a batch)."""
    b, notes = sim.scenario.batching, []
    if b.policy in WINDOWED:
        notes.append(f"{NO_MATCH} batching.policy {b.policy!r}: the simulation formed batches outside the engine "
                     f"(a Triton-style {'AIMD-steered ' if b.policy == 'adaptive' else ''}batcher with a "
                     f"{b.max_wait_ms:g} ms window, no token budget); {engine} admits requests at every iteration. "
                     f"{seqs_flag} carries batching.max_batch_size (the simulated maximum), and no token budget "
                     "is exported (none was simulated)")
    if b.preemption == "none":
        notes.append(f"{NO_MATCH} batching.preemption 'none': each simulated request reserved its prompt and its "
                     f"whole output's KV at admission and was never preempted; {engine} allocates KV as tokens are "
                     "written and preempts (recomputes) a request when the cache is full, so it can admit more "
                     "requests than the simulation did")
    elif b.preemption == "swap":
        notes.append(f"{NO_MATCH} batching.preemption 'swap' (a preempted request's KV copied to host memory): "
                     f"{engine} preempts by recomputing (vLLM V1 has no swap space)")
    else:
        notes.append(f"batching.preemption 'recompute' is {engine}'s own default (no flag)")
    return notes


def _path_notes(sim: Simulated, engine: str) -> list[str]:
    """The simulated paths ``engine`` has no feature for: sequence parallelism, live-KV paging, int KV caches."""
    strategy, notes = sim.scenario.strategy, []
    sp = strategy.sequence_parallel
    if sp is not None:
        notes.append(
            f"{NO_MATCH} sequence_parallel degree {sp.degree}: the simulated replica spans tp {sim.tp} x "
            f"{sp.degree} = {sim.tp * sp.degree} GPUs, splitting each prompt's prefill (ring attention) and its KV "
            f"over {sp.degree} ranks. vLLM's --decode-context-parallel-size shards the KV inside the "
            "tensor-parallel group (adds no GPUs) and its --prefill-context-parallel-size is documented for vLLM "
            "Ascend; SGLang's context parallelism is for DeepSeek's sparse attention: none is this split, so no "
            f"context-parallel flag is exported and {engine} would serve this replica on tp {sim.tp} only")
    tiered = strategy.tiered
    if tiered is not None:
        host, _, ssd, _ = sim.tiers_gib(tiered)
        tiers = f"host memory ({host:,.0f} GiB)" + ("" if ssd <= 0 else f" and SSD ({ssd:,.0f} GiB)")
        if strategy.prefix_cache is None:
            notes.append(
                f"{NO_MATCH} tiered: the simulation paged LIVE KV to {tiers} and back every decode step "
                f"({tiered.chunk_tokens}-token pages), so sequences whose KV does not fit the GPU keep decoding. "
                f"{engine} keeps live KV on the GPU and preempts when it is full; its CPU offload (vLLM's "
                "--kv-offloading-backend or LMCache, SGLang's --enable-hierarchical-cache) keeps KV for REUSE by "
                "later requests, which this candidate did not simulate: no offload flag is exported. Its numbers "
                "hold only where the peak live KV fits the GPU (then nothing was paged)")
        else:
            notes.append(
                f"{NO_MATCH} the live-KV part of tiered: besides keeping evicted prefix blocks in {tiers} (exported "
                f"as {engine}'s offload), the simulation also paged running sequences' KV beyond the GPU every "
                f"decode step ({tiered.chunk_tokens}-token pages); {engine} preempts instead, so the numbers hold "
                "where the peak live KV fits the GPU")
    comp = strategy.compression
    if comp is not None and comp.mode not in KV_CACHE_DTYPES:
        notes.append(f"{NO_MATCH} compression.mode {comp.mode!r}: neither vLLM (--kv-cache-dtype auto, bfloat16, "
                     "fp8, fp8_e4m3, fp8_e5m2) nor SGLang (auto, bf16, fp8_e5m2, fp8_e4m3, fp4_e2m1) stores an "
                     f"{comp.mode} KV cache; an fp8 cache has other bytes per token and another accuracy cost, so "
                     "no --kv-cache-dtype is exported and the served cache keeps the model's dtype")
    return notes


def _routing_note(sim: Simulated, replicas: int | None) -> list[str]:
    spec = sim.scenario.strategy.prefix_cache
    if spec is None or spec.routing != "affinity" or (replicas or 1) <= 1:
        return []
    return ["prefix_cache.routing 'affinity': the simulated replicas take a request where its prefix is cached; "
            "that is the router's job in front of the replicas (a KV-aware router such as llm-d's, Dynamo's or "
            "SGLang's router), not a serve flag"]


def _speculative_notes(sim: Simulated, spec: SpeculativeSpec, k: int, engine: str) -> list[str]:
    draft = sim.draft()
    notes = []
    if spec.adaptive:
        own = (" (its --speculative-adaptive steers by its own rule, not the simulated controller)"
               if engine == "SGLang" else "")
        notes.append(f"{NO_MATCH} adaptive K: the simulator chose K per sequence from its acceptance, at most {k}, "
                     f"and fell back to plain decoding where speculation did not pay; {engine}'s number of "
                     f"speculative tokens is fixed{own}, so the simulated maximum {k} is exported")
    if spec.proposer == "draft" and draft.tp is not None and draft.tp != sim.tp:
        notes.append(f"the profile priced the draft at tp {draft.tp} and the target at tp {sim.tp}")
    return notes


def _assemble(kind: type[S], sim: Simulated, candidate: str, replicas: int | None, settings: list[Setting],
              notes: list[str], speculative: Callable[[Simulated, SpeculativeSpec, list[str]], list[Setting]]) -> S:
    """What both engines add the same way after their batching and prefix settings: the KV cache dtype where it
    is the simulated format, the speculative flags (``speculative``: the engine's), the paths no engine serves
    as simulated, the routing note, and the model."""
    strategy = sim.scenario.strategy
    comp = strategy.compression
    if comp is not None and comp.mode in KV_CACHE_DTYPES:
        settings.append(Setting("--kv-cache-dtype", KV_CACHE_DTYPES[comp.mode][kind.KEY],
                                f"candidate compression.mode {comp.mode!r}: E4M3, one byte per element with "
                                "per-tensor scales, as simulated"))
    if strategy.speculative is not None:
        settings += speculative(sim, strategy.speculative, notes)
    notes += _path_notes(sim, kind.ENGINE) + _routing_note(sim, replicas) + _dp_notes(sim, kind.ENGINE)
    model, why = _checkpoint(kind.KEY, sim, settings, notes)
    return kind(candidate, model, why, replicas, tuple(settings), tuple(notes), sim.gpus)


def _checkpoint(engine: str, sim: Simulated, settings: list[Setting], notes: list[str]) -> tuple[str, str]:
    """(the model the engine loads, why) for the profile's weight precision, adding the settings that serve the
    simulated weights and expert layout: a checkpoint stored at that precision (``QUANTIZED_REPOS``) as it is;
    fp8 from a 16-bit checkpoint by the engine's online fp8 quantization (E4M3 weights and activations, what the
    estimator's fp8 GEMM tables time); experts sharded by expert parallelism over the TP group where the profile
    was built so (``key.expert_parallel``)."""
    key, name = sim.profile.key, sim.profile.model.name
    base = _name_and_tp(name)[0]
    repo = QUANTIZED_REPOS.get((base, key.dtype))
    if repo is not None:
        model, why = repo, f"profile model.name {name!r} with {key.dtype} weights: the checkpoint stores them so"
    else:
        model, why = _hf(name)
        why = f"profile model.name {name!r}: {why}"
        if key.dtype == "fp8":
            settings.append(Setting("--quantization", "fp8", "profile key.dtype 'fp8': fp8 (E4M3) weights and "
                                    "activations, as the profile's fp8 GEMM tables were timed; the engine quantizes "
                                    "the 16-bit checkpoint when it loads it"))
        elif key.dtype not in ("fp16", "bf16", "fp32"):
            notes.append(f"{NO_MATCH} the profile's {key.dtype} weights: no checkpoint stored at that precision is "
                         f"known for {base!r} (export.py QUANTIZED_REPOS) and no engine quantizes to it online")
    if key.expert_parallel:
        flag, value = ("--enable-expert-parallel", None) if engine == "vllm" else ("--ep-size", str(sim.gpus))
        group = (f"the {sim.tp} GPUs of the TP group" if sim.dp == 1 else
                 f"all {sim.gpus} GPUs of the replica (tp {sim.tp} x attention_dp {sim.dp}"
                 + ("; vLLM's EP size is DP x TP)" if engine == "vllm" else ")"))
        settings.append(Setting(flag, value, f"profile key.expert_parallel: the experts sharded by expert "
                                f"parallelism over {group}, as the profile's MoE layers were timed (the attention "
                                f"stays {'tensor-parallel' if sim.dp == 1 else 'data-parallel over the ranks'})"))
    return model, why


def _dp_notes(sim: Simulated, engine: str) -> list[str]:
    """What attention data parallelism means for the served replica (none without it)."""
    if sim.dp == 1:
        return []
    limits = ("--max-num-seqs and --max-num-batched-tokens are each rank's, as simulated" if engine == "vLLM" else
              "--max-running-requests and --chunked-prefill-size are the ranks' sum, which SGLang divides by "
              "--dp-size")
    return [f"attention data parallelism (profile key.attention_dp {sim.dp}): one replica is this one {engine} "
            f"server on {sim.gpus} GPUs, {sim.dp} ranks of tp {sim.tp}, each running attention for its own batch "
            f"over its own KV pool, the MoE layers over all {sim.gpus} GPUs in lockstep (a rank with nothing to run "
            f"joins with an empty pass); {limits}. The server spreads requests over its ranks itself ({engine}'s "
            "own balancing, not the simulator's router)"]


# --- vLLM ---------------------------------------------------------------------------------------------------
def vllm_suggestion(profile: Profile, data: dict[str, Any], candidate: Candidate,
                    replicas: int | None = None) -> VllmSuggestion:
    """The vLLM (V1) flags for one replica of ``candidate`` on ``profile`` with the scenario's batching: exactly
    the simulated settings vLLM has, each with its simulated value; the rest as notes (module docstring)."""
    sim = Simulated.of(profile, data, candidate)
    b = sim.scenario.batching
    settings = [Setting("--tensor-parallel-size", str(sim.tp), "profile key.tp" + (
        "" if sim.dp == 1 else ": the tensor-parallel degree of each attention data-parallel rank"))]
    if sim.dp > 1:
        settings.append(Setting("--data-parallel-size", str(sim.dp),
                                f"profile key.attention_dp: {sim.dp} attention data-parallel ranks of tp {sim.tp} "
                                f"GPU(s) each, one replica on {sim.gpus} GPUs; the MoE layers span all {sim.gpus} "
                                "(vLLM: a DP x TP tensor-parallel group, or expert parallel with "
                                "--enable-expert-parallel)"))
    settings.append(Setting("--max-num-seqs", str(b.max_batch_size),
                            sim.batching_source("max_batch_size") + sim.rank_note("vLLM", "--max-num-seqs")))
    notes = _batching_notes(sim, "vLLM", "--max-num-seqs")
    if b.policy in ("continuous", "chunked"):
        settings.append(Setting("--max-num-batched-tokens", str(b.max_batched_tokens),
                                sim.batching_source("max_batched_tokens") + ": the simulated per-iteration token "
                                "budget" + sim.rank_note("vLLM", "--max-num-batched-tokens")))
    if b.policy == "chunked":
        settings.append(Setting("--enable-chunked-prefill", None,
                                "scenario batching.policy 'chunked': every decode takes one token of the budget, "
                                "then prompts take chunks of the rest (Sarathi-Serve; vLLM V1's scheduler)"))
    elif b.policy == "continuous":
        notes.append(f"{NO_MATCH} batching.policy 'continuous': the simulation prefilled each admitted prompt "
                     f"whole within the {b.max_batched_tokens}-token budget (the first always admitted, strict "
                     "FCFS). vLLM V1 chunks long prompts; its --no-enable-chunked-prefill needs "
                     "--max-num-batched-tokens >= --max-model-len and lets later requests pass one that does not "
                     "fit, so it is not the simulated rule either. Served, prefill is chunked: rerun the scenario "
                     "with batching.policy = \"chunked\" for numbers that match")
    settings += _vllm_prefix(sim, notes)
    return _assemble(VllmSuggestion, sim, candidate.name, replicas, settings, notes, _vllm_speculative)


def _vllm_prefix(sim: Simulated, notes: list[str]) -> list[Setting]:
    """Prefix caching on or off as simulated (vLLM V1 turns it on by default), its block size, and the offload
    of evicted prefix blocks when the candidate tiers them."""
    spec = sim.scenario.strategy.prefix_cache
    if spec is None:
        return [Setting("--no-enable-prefix-caching", None,
                        "the candidate has no prefix_cache: the simulation reused no prefixes, and vLLM V1 caches "
                        "them by default")]
    out = [Setting("--enable-prefix-caching", None, "candidate prefix_cache: automatic prefix caching")]
    if spec.block_tokens in VLLM_BLOCK_SIZES:
        out.append(Setting("--block-size", str(spec.block_tokens),
                           "candidate prefix_cache.block_tokens: the simulated cache block (hits are whole blocks)"))
    else:
        notes.append(f"{NO_MATCH} prefix_cache.block_tokens {spec.block_tokens}: vLLM's --block-size takes "
                     f"{', '.join(map(str, VLLM_BLOCK_SIZES))}, so its cache keeps its default block (16 tokens) "
                     f"and can reuse shared prefixes shorter than the simulated {spec.block_tokens}-token blocks")
    tiered = sim.scenario.strategy.tiered
    if tiered is not None:
        out += _lmcache(sim, tiered, spec.block_tokens)
    return out


def _lmcache(sim: Simulated, tiered: TieredSpec, block_tokens: int) -> list[Setting]:
    """prefix_cache + tiered: evicted prefix blocks kept in host memory (and SSD), loaded back on a hit, as
    LMCache's vLLM connector does. LMCache sizes are GiB per tensor-parallel rank (each rank's worker runs its
    own engine and holds its 1/tp share of the KV: LMCache/LMCache#2901), so one replica's tier / tp."""
    host, host_from, ssd, ssd_from = sim.tiers_gib(tiered)
    per_rank = f" / tp {sim.tp} (LMCache sizes its caches in GiB per tensor-parallel rank)" + (
        "" if sim.dp == 1 else f"; the tier is one attention data-parallel rank's, and each of the {sim.dp} vLLM "
                               "DP ranks' workers run their own LMCache")
    out = [Setting("--kv-transfer-config", json.dumps(LMCACHE_CONNECTOR, separators=(",", ":")),
                   "candidate prefix_cache+tiered: evicted prefix blocks kept below the GPU and loaded back on a "
                   "hit, through LMCache's vLLM connector"),
           Setting("LMCACHE_CHUNK_SIZE", str(block_tokens),
                   "candidate prefix_cache.block_tokens: the simulated block, LMCache's unit of reuse", env=True),
           Setting("LMCACHE_LOCAL_CPU", "True", "candidate tiered: the host-memory tier", env=True),
           Setting("LMCACHE_MAX_LOCAL_CPU_SIZE", _gib(host / sim.tp), f"{host_from} ({_gib(host)} GiB){per_rank}",
                   env=True)]
    if ssd > 0:
        out += [Setting("LMCACHE_LOCAL_DISK", "file:///PATH/ON/YOUR/SSD/",
                        f"candidate tiered: the SSD tier ({ssd_from}); the path is yours to fill in", env=True),
                Setting("LMCACHE_MAX_LOCAL_DISK_SIZE", _gib(ssd / sim.tp), f"{ssd_from} ({_gib(ssd)} GiB){per_rank}",
                        env=True)]
    return out


def _vllm_speculative(sim: Simulated, spec: SpeculativeSpec, notes: list[str]) -> list[Setting]:
    k, k_from = sim.speculative_k(spec)
    notes += _speculative_notes(sim, spec, k, "vLLM")
    if spec.proposer == "prompt_lookup":
        notes.append("the n-gram window (prompt_lookup_min/max) is vLLM's default: the simulation priced prompt "
                     "lookup by the profile's measured acceptance, not by a window")
        return [Setting("--speculative-config", _json({"method": "ngram", "num_speculative_tokens": k}),
                        f"method ngram: the candidate's prompt-lookup proposer; num_speculative_tokens from "
                        f"{k_from}")]
    draft = sim.draft()
    if draft.mtp:
        return [Setting("--speculative-config", _json({"method": "deepseek_mtp", "num_speculative_tokens": k}),
                        f"method deepseek_mtp: profile speculative.draft_model {draft.name!r}, the checkpoint's own "
                        f"multi-token-prediction layer; num_speculative_tokens from {k_from}")]
    if draft.repo is None:
        notes.append(draft.why_none())
        return []
    config: dict[str, Any] = {"method": "draft_model", "model": draft.repo, "num_speculative_tokens": k}
    if draft.tp is not None and draft.tp != sim.tp:
        config["draft_tensor_parallel_size"] = draft.tp
    return [Setting("--speculative-config", _json(config),
                    f"model: profile speculative.draft_model {draft.name!r}, the Hugging Face repository "
                    f"{draft.repo}; num_speculative_tokens from {k_from}")]


# --- SGLang -------------------------------------------------------------------------------------------------
def sglang_suggestion(profile: Profile, data: dict[str, Any], candidate: Candidate,
                      replicas: int | None = None) -> SglangSuggestion:
    """The SGLang flags for one replica of ``candidate`` on ``profile``: the same rule as ``vllm_suggestion``."""
    sim = Simulated.of(profile, data, candidate)
    b, strategy = sim.scenario.batching, sim.scenario.strategy
    if sim.dp == 1:
        settings = [Setting("--tp-size", str(sim.tp), "profile key.tp")]
    else:
        settings = [Setting("--tp-size", str(sim.gpus),
                            f"profile key.tp {sim.tp} x key.attention_dp {sim.dp}: with DP attention SGLang's "
                            f"--tp-size is every GPU of the replica, each attention rank taking tp-size / dp-size = "
                            f"{sim.tp}"),
                    Setting("--dp-size", str(sim.dp), f"profile key.attention_dp: {sim.dp} attention data-parallel "
                            "ranks"),
                    Setting("--enable-dp-attention", None,
                            f"profile key.attention_dp {sim.dp}: data parallelism for the attention (each rank its "
                            f"own batch and KV pool), the MoE layers over all {sim.gpus} GPUs")]
    settings.append(Setting("--max-running-requests", str(b.max_batch_size * sim.dp),
                            sim.batching_source("max_batch_size") + _times_dp(sim)
                            + sim.rank_note("SGLang", "--max-running-requests")))
    notes = _batching_notes(sim, "SGLang", "--max-running-requests")
    if b.policy == "chunked":
        settings += [Setting("--chunked-prefill-size", str(b.max_batched_tokens * sim.dp),
                             sim.batching_source("max_batched_tokens") + _times_dp(sim) + ": the simulated "
                             "per-iteration token budget" + sim.rank_note("SGLang", "--chunked-prefill-size")),
                     Setting("--enable-mixed-chunk", None,
                             "scenario batching.policy 'chunked': decodes share the iteration and its budget with "
                             "the prompt chunks, as simulated (SGLang subtracts the running decodes from the "
                             "chunk budget)")]
    elif b.policy == "continuous":
        notes.append(f"{NO_MATCH} batching.policy 'continuous': the simulation prefilled each admitted prompt "
                     f"whole within the {b.max_batched_tokens}-token budget, decodes running in the same "
                     "iteration. SGLang chunks prompts by default (--chunked-prefill-size); with chunking off (-1) "
                     "it prefills whole prompts in prefill-only batches while decodes wait, which is not the "
                     "simulated iteration either: rerun with batching.policy = \"chunked\" for numbers that match")
    spec = strategy.prefix_cache
    if spec is None:
        settings.append(Setting("--disable-radix-cache", None,
                                "the candidate has no prefix_cache: the simulation reused no prefixes, and SGLang's "
                                "radix cache reuses them by default"))
    else:
        settings.append(Setting("--page-size", str(spec.block_tokens),
                                "candidate prefix_cache.block_tokens: the simulated cache block (hits are whole "
                                "blocks); SGLang's radix cache is on by default"))
        if strategy.tiered is not None:
            settings += _hicache(sim, strategy.tiered, notes)
    return _assemble(SglangSuggestion, sim, candidate.name, replicas, settings, notes, _sglang_speculative)


def _times_dp(sim: Simulated) -> str:
    return "" if sim.dp == 1 else f" x key.attention_dp {sim.dp}"


def _hicache(sim: Simulated, tiered: TieredSpec, notes: list[str]) -> list[Setting]:
    """prefix_cache + tiered: SGLang's hierarchical cache keeps radix-cache blocks evicted from the GPU in a host
    pool and loads them back on a hit. --hicache-size is whole GiB per tensor-parallel rank (each rank's
    scheduler keeps its own pool of its KV share): one replica's host tier / tp, rounded down."""
    host, host_from, ssd, _ = sim.tiers_gib(tiered)
    per_rank = math.floor(host / sim.tp)
    rounded = "" if per_rank == host / sim.tp else f", rounded down from {_gib(host / sim.tp)} (SGLang takes whole GiB)"
    if ssd > 0:
        notes.append(f"{NO_MATCH} the simulated SSD tier ({ssd:,.0f} GiB): SGLang's hierarchical cache reaches "
                     "storage through --hicache-storage-backend, whose capacity no flag sets; not exported")
    return [Setting("--enable-hierarchical-cache", None,
                    "candidate prefix_cache+tiered: evicted prefix blocks kept in host memory, loaded back on a hit"),
            Setting("--hicache-size", str(per_rank),
                    f"{host_from} ({_gib(host)} GiB) / tp {sim.tp}: GiB per tensor-parallel rank{rounded}" + (
                        "" if sim.dp == 1 else f"; the tier is one attention data-parallel rank's, of tp {sim.tp} "
                                               "GPUs (tp-size / dp-size)"))]


def _sglang_speculative(sim: Simulated, spec: SpeculativeSpec, notes: list[str]) -> list[Setting]:
    k, k_from = sim.speculative_k(spec)
    notes += _speculative_notes(sim, spec, k, "SGLang")
    if spec.proposer == "prompt_lookup":
        notes.append(f"{NO_MATCH} proposer 'prompt_lookup': SGLang's NGRAM speculation matches a trie built from "
                     "all requests' tokens and proposes a tree of drafts, not a chain looked up in the request's "
                     "own context as simulated; not exported")
        return []
    draft = sim.draft()
    where = f"{k_from}: K draft tokens per round, one per draft step"
    if draft.mtp:
        head = [Setting("--speculative-algorithm", "EAGLE", f"profile speculative.draft_model {draft.name!r}: the "
                        "checkpoint's own multi-token-prediction layer, which SGLang runs as its EAGLE draft")]
    elif draft.repo is None:
        notes.append(draft.why_none())
        return []
    else:
        head = [Setting("--speculative-algorithm", "STANDALONE", "candidate speculative (proposer 'draft'): a "
                        "separate small draft model"),
                Setting("--speculative-draft-model-path", draft.repo,
                        f"profile speculative.draft_model {draft.name!r}, the Hugging Face repository {draft.repo}")]
    return [*head,
            Setting("--speculative-num-steps", str(k), where),
            Setting("--speculative-eagle-topk", "1", "one draft token per step: the simulated chain (no tree)"),
            Setting("--speculative-num-draft-tokens", str(k + 1),
                    f"{k_from} + 1: the K drafts and the verified token, SGLang's count for a chain (top-k 1)")]


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
                 suggestion: VllmSuggestion | None, replace: bool = False,
                 sglang: SglangSuggestion | None = None) -> list[Path]:
    """scenario.toml, recommendation.json and (when a candidate was chosen) vllm.txt and sglang.txt in
    ``directory``, written as one folder (core.atomic.writing_dir: a non-empty folder is refused unless
    ``replace``)."""
    files = [("scenario.toml", scenario_toml(scenario)),
             ("recommendation.json", json.dumps(recommendation, indent=2, sort_keys=True, allow_nan=False) + "\n")]
    if suggestion is not None:
        files.append(("vllm.txt", suggestion.text()))
    if sglang is not None:
        files.append(("sglang.txt", sglang.text()))
    with writing_dir(directory, replace, "--export") as tmp:
        for name, text in files:
            (tmp / name).write_text(text, encoding="utf-8")
    return [Path(directory) / name for name, _ in files]


def _chosen(recommendation: dict[str, Any], profile: Profile, data: dict[str, Any]
            ) -> tuple[Profile, dict[str, Any], Candidate, int | None, bool] | None:
    """(profile, scenario, candidate, replicas, whether it meets the SLA) of a recommendation's dict
    (``Recommendation.to_dict``): its recommended candidate on the plan's replicas, else the closest on the
    replicas searched, else None. A summary that names its layout (``{"layout": {"profile": NAME}}``: the GPU type
    and TP it was simulated on) is exported on that profile, else on ``profile``; one that names the max batch size
    it simulated, with that size in the scenario."""
    best, closest = recommendation.get("recommended"), recommendation.get("closest")
    chosen = best or closest
    if chosen is None:
        return None
    layout = chosen.get("layout")
    if isinstance(layout, dict) and layout.get("profile") and layout.get("profile_key") != profile.key_str():
        profile = resolve_profile(str(layout["profile"]))
    if chosen.get("max_batch_size") is not None:
        data = with_fields(data, {"batching.max_batch_size": int(chosen["max_batch_size"])})
    candidate = by_names(profile, [chosen["candidate"]])[0]
    replicas = chosen["replicas"] if best is not None else chosen.get("searched_replicas")
    return profile, data, candidate, None if replicas is None else int(replicas), best is not None


def _labelled(out: S, meets: bool) -> S:
    return out if meets else dataclasses.replace(out, candidate=f"{out.candidate} (the closest; it MISSES the SLA)")


def recommended_suggestion(recommendation: dict[str, Any], profile: Profile, data: dict[str, Any]
                           ) -> VllmSuggestion | None:
    """The vLLM suggestion for a recommendation's dict (``Recommendation.to_dict``): its recommended candidate on
    the plan's replicas, else the closest on the replicas searched (labelled as missing the SLA), else None."""
    chosen = _chosen(recommendation, profile, data)
    if chosen is None:
        return None
    on, simulated, candidate, replicas, meets = chosen
    return _labelled(vllm_suggestion(on, simulated, candidate, replicas), meets)


def recommended_sglang(recommendation: dict[str, Any], profile: Profile, data: dict[str, Any]
                       ) -> SglangSuggestion | None:
    """The SGLang suggestion for the same candidate and replicas as ``recommended_suggestion``."""
    chosen = _chosen(recommendation, profile, data)
    if chosen is None:
        return None
    on, simulated, candidate, replicas, meets = chosen
    return _labelled(sglang_suggestion(on, simulated, candidate, replicas), meets)
