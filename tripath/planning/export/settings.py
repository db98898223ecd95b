"""What both engines' serving suggestions share: the settings, the simulated candidate, and the notes.

The rule: a command carries exactly what was simulated, nothing else. ``Simulated.of`` builds the candidate's
scenario the way the simulator does (its ``[strategy.*]`` tables applied to the scenario dict, every default
resolved, tripath/planning/scenario_dict.py ``build``); ``vllm_suggestion`` (vllm.py) and ``sglang_suggestion``
(sglang.py) turn each simulated setting into a flag only where the engine has a feature that does the same
thing, with the simulated value. Where it has none (the simulated whole-prompt prefill, paging of live KV,
sequence parallelism, an int8 or int4 KV cache, a draft model no checkpoint exists for, ...), the output says
"no served feature matches" and why, instead of a flag. Each flag and environment variable keeps where its value
comes from (the candidate, the scenario, the profile) and whether its name was checked against the engine's
documentation or source (docs/planning.md lists what was read). A command is a starting point to measure,
not a tested configuration: the engines' schedulers, kernels and memory accounting are not the simulator's.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Any, ClassVar, TypeVar

from tripath.planning.candidates import Candidate
from tripath.planning.scenario_dict import build
from tripath.profile.profile import Profile
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
                "names no checkpoint whose Hugging Face repository tripath knows (export/settings.py HF_REPOS)")
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
        base, tp = name_and_tp("" if section is None else section.draft_model)
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


def name_and_tp(name: str) -> tuple[str, int | None]:
    """A profile's model name without its "(tpN)" (or other parenthesised) suffix, and N where it says one."""
    match = re.match(r"^(.*?)\s*(?:\((?:tp(\d+)|.*)\))?\s*$", name)
    assert match is not None  # every part of the pattern is optional
    return match.group(1), None if match.group(2) is None else int(match.group(2))


def gib(value: float) -> str:
    """GiB to the MiB (3 decimals), trailing zeros dropped: 64, 894.07."""
    return f"{value:.3f}".rstrip("0").rstrip(".")
