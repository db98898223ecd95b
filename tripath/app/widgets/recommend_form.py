"""The recommendation page's inputs and the scenario they make: model+GPU profile, workload, SLA, rate, price.

``scenario`` turns the choices into a TOML-shaped scenario dict over data/scenarios/default.toml (the
scenario `tripath recommend` runs by default), so an unchanged form is exactly that scenario at its rate.
An SLA term set to "none" is deleted from ``[sla]`` (not judged at all). The scenario download is
planning/export/files.py's ``scenario_toml`` of that dict, as `tripath recommend --export` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tripath.planning.scenario_dict import with_fields, with_rate

# the shipped traces a workload can take its prompt and output lengths from (data/traces/README.md)
TRACES = {
    "mooncake-conversation": "Mooncake conversation trace (FAST'25): 22.7% of prompts >= 16K tokens",
    "mooncake-synthetic": "Mooncake synthetic trace (FAST'25): 39.7% of prompts >= 16K tokens",
    "azure-conv-2023": "Azure LLM 2023 conversation trace (Splitwise): prompts up to 14K tokens",
    "azure-code-2023": "Azure LLM 2023 code trace (Splitwise): prompts up to 7.4K tokens",
}
# the shipped traces a workload can replay whole: their own arrival pattern (paced to the rate), lengths and,
# for Mooncake, block ids (hash_ids), so prefix caching has reuse to find
REPLAY = "replay:"
REPLAYS = {
    REPLAY + "mooncake-conversation": "Mooncake conversation trace replayed: its arrivals (paced to the rate), "
                                      "lengths and prefix reuse (hash_ids)",
    REPLAY + "azure-conv-2023": "Azure LLM 2023 conversation trace replayed: its arrivals (paced to the rate) and "
                                "lengths (no prefix data)",
}
DISTRIBUTION = "distribution"
WORKLOAD_LABELS = {**TRACES, **REPLAYS, DISTRIBUTION: "a length distribution: uniform prompts, lognormal outputs"}
PROFILE_PREFIXES = ("aic-", "published-", "projected-")  # measured kernel tables first, then the older GPU sources


@dataclass(frozen=True)
class Lengths:
    """A length distribution: prompts uniform in [prompt_low, prompt_high], outputs lognormal (median, sigma)."""

    prompt_low: int = 1_000
    prompt_high: int = 32_000
    output_median: float = 300.0
    output_sigma: float = 0.8


@dataclass(frozen=True)
class Choices:
    """What the user picked; None for an SLA term means the term is removed."""

    profile: str
    workload: str
    qps: float
    ttft_s: float | None
    tpot_ms: float | None
    requests: int
    lengths: Lengths = Lengths()


def profile_label(name: str, key: Any, source: str) -> str:
    """e.g. ``llama-3-70b on a100-80gb, TP4 (published numbers)``; weights other than 16-bit, attention data
    parallelism and expert parallelism named: ``qwen3-235b-a22b on h200, TP1, attention data parallel 8, fp8
    weights, expert parallel (...)``."""
    dp = int(getattr(key, "attention_dp", 1) or 1)
    extra = ("" if dp == 1 else f", attention data parallel {dp}") + (
        "" if key.dtype in ("fp16", "bf16", "fp32") else f", {key.dtype} weights") + (
        ", expert parallel" if key.expert_parallel else "")
    return f"{key.model} on {key.hardware}, TP{key.tp}{extra} ({source} numbers) [{name}]"


def ordered_profiles(names: list[str]) -> list[str]:
    """The GPU profiles first, by source (measured kernel tables, then Vidur's, then projections; each as listed),
    then the others."""
    gpu = [n for prefix in PROFILE_PREFIXES for n in names if n.startswith(prefix)]
    return gpu + [n for n in names if n not in gpu]


def defaults(base: dict[str, Any]) -> dict[str, Any]:
    """The form's starting values read from the base scenario (data/scenarios/default.toml)."""
    sla = base.get("sla") or {}
    workload = base.get("workload") or {}
    arrival = workload.get("arrival") or {}
    trace = (workload.get("prompt_tokens") or {}).get("trace")
    if arrival.get("kind") == "trace" and REPLAY + str(arrival.get("trace")) in REPLAYS:
        trace = REPLAY + str(arrival["trace"])
    ttft, tpot = sla.get("ttft_p99_ms"), sla.get("tpot_p99_ms")
    return {"profile": base.get("profile"), "workload": trace if trace in TRACES or trace in REPLAYS else DISTRIBUTION,
            "qps": float((workload.get("arrival") or {}).get("rate_per_s", 0.5)),
            "ttft_s": None if ttft is None else ttft / 1000.0, "tpot_ms": tpot,
            "requests": int(workload.get("requests", 100))}


def _lengths(choices: Choices) -> tuple[dict[str, Any], dict[str, Any]]:
    if choices.workload in REPLAYS:
        return {"kind": "trace"}, {"kind": "trace"}
    if choices.workload in TRACES:
        return ({"kind": "empirical", "trace": choices.workload, "column": "prompt"},
                {"kind": "empirical", "trace": choices.workload, "column": "output"})
    if choices.workload != DISTRIBUTION:
        raise ValueError(f"unknown workload {choices.workload!r}; known: {', '.join(WORKLOAD_LABELS)}")
    spec = choices.lengths
    return ({"kind": "uniform", "low": int(spec.prompt_low), "high": int(spec.prompt_high)},
            {"kind": "lognormal", "median": float(spec.output_median), "sigma": float(spec.output_sigma)})


def scenario(base: dict[str, Any], choices: Choices) -> dict[str, Any]:
    """The base scenario with the user's profile, lengths, request count, SLA and fixed rate: Poisson arrivals,
    or a replayed trace's first ``requests`` rows paced to the rate."""
    prompt, output = _lengths(choices)
    if choices.workload in REPLAYS:
        base = with_fields(base, {"workload.arrival": {"kind": "trace", "trace": choices.workload[len(REPLAY):]},
                                  "workload.prefix": None})
    elif (base.get("workload") or {}).get("arrival", {}).get("kind") == "trace":
        base = with_fields(base, {"workload.arrival": {"kind": "poisson"}, "workload.prefix": None})
    changes: dict[str, Any] = {
        "profile": choices.profile,
        "workload.prompt_tokens": None, "workload.output_tokens": None,
        "sla.ttft_p99_ms": None if choices.ttft_s is None else choices.ttft_s * 1000.0,
        "sla.tpot_p99_ms": choices.tpot_ms,
        "workload.requests": int(choices.requests), "workload.duration_s": None,
    }
    data = with_fields(base, changes)
    data = with_fields(data, {"workload.prompt_tokens": prompt, "workload.output_tokens": output})
    return with_rate(data, choices.qps)


# --- TOML out -------------------------------------------------------------------------------------
