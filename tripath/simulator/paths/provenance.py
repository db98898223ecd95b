"""Which optimization paths a simulation ran with, their parameters, and where their numbers come from.

The summary (tripath/simulator/summary.py) carries this so a reader can tell a projection on measured
acceptance from one on seed acceptance: for every path switched on, its parameters as resolved
(defaults filled in from the profile, each saying so) and the profile entries its physics read,
each with its source kind (measured / fitted / projected / published / seed, the profile's own
label). Nothing here is computed from the run; it is read from the scenario and the profile.
"""

from __future__ import annotations

from typing import Any

from tripath.profile.profile import Profile
from tripath.simulator.scenario.scenario import Scenario
from tripath.simulator.scenario.strategy import (
    DEVICE_HOST,
    GIB,
    HOST_SSD,
    PROMPT_LOOKUP_PREFIX,
    CompressionSpec,
    PrefixCacheSpec,
    SequenceParallelSpec,
    SpeculativeSpec,
    TieredSpec,
)


def _coefficient(field: str, coef: Any) -> dict[str, Any]:
    return {"field": field, "value": coef.value, "unit": coef.unit, "source": coef.source}


def _cost_model(field: str, model: Any) -> list[dict[str, Any]]:
    return [_coefficient(f"{field}.{name}", coef) for name, coef in model.coefficients.items()]


def _speculative(spec: SpeculativeSpec, profile: Profile, tasks: tuple[str, ...]) -> dict[str, Any]:
    section = profile.speculative
    k = section.k if spec.k is None else spec.k
    lookup = spec.proposer == "prompt_lookup"
    params = {"k": k, "k_from": "profile speculative.k" if spec.k is None else "scenario",
              "adaptive": spec.adaptive, "proposer": spec.proposer,
              "draft_model": None if lookup else section.draft_model}
    if spec.acceptance:  # the scenario's own table replaced the profile's entries (source "scenario" below)
        params["acceptance_from_scenario"] = [task for task, _ in spec.acceptance]
    if spec.adaptive:
        params["fallback_acceptance"] = spec.fallback_acceptance
        params["fallback_from"] = ("break-even speedup 1 (tripath/simulator/paths/speculative.py)"
                                   if spec.fallback_acceptance is None else "scenario")
    numbers = [_coefficient("speculative.cost_ratio", section.cost_ratio)]
    if section.verify_by_k:
        numbers += [_coefficient(f"speculative.verify_by_k.{kk}", c) for kk, c in section.verify_by_k.items()]
    else:
        numbers.append(_coefficient("speculative.verify_cost_ratio", section.verify_cost_ratio))
    if getattr(section, "draft_prefill_ratio", None) is not None and not lookup:  # the draft's prompt pass
        numbers.append(_coefficient("speculative.draft_prefill_ratio", section.draft_prefill_ratio))
    if getattr(section, "round_per_sequence", None) is not None and not lookup:  # rounds at batch > 1
        numbers.append(_coefficient("speculative.round_per_sequence", section.round_per_sequence))
    rounds = getattr(section, "round_costs", None)
    if rounds is not None:  # said only here, so summaries of profiles without it keep their bytes
        params["round_cost_form"] = ("c(B, S) and v(K, B, S) from speculative.round_costs (the draft's and "
                                     "target's iteration by batched tokens); without it: batch-1 ratios x the "
                                     "batch's decode step")
        # the curves' points and attention per cached token, each with its own label
        for role, curve in (("target", rounds.target), ("draft", rounds.draft)):
            if role == "draft" and lookup:
                continue
            numbers.append({"field": f"speculative.round_costs.{role}.points", "value": len(curve.points),
                            "unit": "points (tokens, ms)", "source": curve.source, "model": curve.model,
                            "tp": curve.tp})
            numbers.append(_coefficient(f"speculative.round_costs.{role}.attention_per_token",
                                        curve.attention_per_token))
    for task in tasks:
        key = PROMPT_LOOKUP_PREFIX + task if lookup else task
        entry = profile.acceptance_for(key, k)
        numbers.append({"field": f"acceptance.{key}", "value": entry.mean, "unit": "acceptance rate",
                        "source": entry.source, "k": entry.k})
        if getattr(entry, "between_prompt_sd", None):  # each request draws its own a (acceptance_spread.py)
            numbers.append({"field": f"acceptance.{key}.between_prompt_sd", "value": entry.between_prompt_sd,
                            "unit": "acceptance rate (sd between prompts)", "source": entry.source, "k": entry.k,
                            "n_prompts": entry.n_prompts})
    return {"parameters": params, "numbers_from": numbers}


def _tiered(spec: TieredSpec, profile: Profile) -> dict[str, Any]:
    host = spec.host_capacity_gib
    ssd = spec.ssd_capacity_gib
    has_ssd_link = HOST_SSD in profile.paging
    params = {
        "host_capacity_gib": profile.hardware.host_memory_bytes / GIB if host is None else host,
        "host_from": "profile hardware.host_memory_bytes" if host is None else "scenario",
        "ssd_capacity_gib": (profile.hardware.ssd_bytes / GIB if ssd is None else ssd) if has_ssd_link else 0.0,
        "ssd_from": ("scenario" if ssd is not None else "profile hardware.ssd_bytes") if has_ssd_link
        else f"no SSD tier: the profile has no paging.{HOST_SSD} link",
        "chunk_tokens": spec.chunk_tokens, "policy": spec.policy,
        "overlap": 0.0, "overlap_from": "assumption: no profile measures compute/paging overlap (every paging "
                                        "second stalls; tripath/simulator/paths/tiered.py)",
    }
    numbers = []
    for link in (DEVICE_HOST, HOST_SSD):
        if link in profile.paging:
            model = profile.paging[link].cost_for(spec.chunk_tokens)
            numbers += _cost_model(f"paging.{link}", model)
    return {"parameters": params, "numbers_from": numbers}


def _sequence_parallel(spec: SequenceParallelSpec, profile: Profile) -> dict[str, Any]:
    section = profile.sequence_parallel[spec.degree]
    contexts = [row.context_tokens for row in section.rows]
    params = {"degree": spec.degree, "gpus_per_replica": int(profile.key.tp) * spec.degree}
    numbers: list[dict[str, Any]] = [{
        "field": f"sequence_parallel.{spec.degree}.rows", "value": len(section.rows), "unit": "rows",
        "source": section.source, "context_tokens": [min(contexts), max(contexts)]}]
    if section.merge is not None:
        numbers += _cost_model(f"sequence_parallel.{spec.degree}.merge", section.merge)
    if section.decode_rows:  # per-batch decode merge and communication (published GPU profiles)
        batches = [row.batch for row in section.decode_rows]
        numbers.append({"field": f"sequence_parallel.{spec.degree}.decode_rows", "value": len(batches),
                        "unit": "rows", "source": section.source, "batch": [min(batches), max(batches)]})
    return {"parameters": params, "numbers_from": numbers}


def _compression(spec: CompressionSpec, profile: Profile) -> dict[str, Any]:
    mode = profile.compression[spec.mode]
    params = {"mode": spec.mode}
    numbers = [_coefficient(f"compression.{spec.mode}.{name}", getattr(mode, name)) for name in mode.FIELDS]
    return {"parameters": params, "numbers_from": numbers}


def strategies(scenario: Scenario, profile: Profile) -> dict[str, Any]:
    """{"on": [path names], path name: {"parameters", "numbers_from"}, "sources": kinds used} for the summary."""
    spec = scenario.strategy
    tasks = tuple(task for task, _ in scenario.workload.tasks)
    out: dict[str, Any] = {"on": []}
    if spec.speculative is not None:
        out["speculative"] = _speculative(spec.speculative, profile, tasks)
    if spec.tiered is not None:
        out["tiered"] = _tiered(spec.tiered, profile)
    if spec.sequence_parallel is not None:
        out["sequence_parallel"] = _sequence_parallel(spec.sequence_parallel, profile)
    if spec.compression is not None:
        out["compression"] = _compression(spec.compression, profile)
    if spec.prefix_cache is not None:
        out["prefix_cache"] = _prefix_cache(spec.prefix_cache, profile)
    out["on"] = [name for name in out if name != "on"]
    kinds = sorted({n["source"] for name in out["on"] for n in out[name]["numbers_from"]})
    out["sources"] = kinds
    out["note"] = ("the baseline (no [strategy.*] table)" if not out["on"] else
                   "paths switched on, parameters as resolved, and the profile entries their physics read, "
                   "each with the profile's source kind")
    if "step_overhead" in profile.costs:  # every iteration of every path pays it (tripath/simulator/costs.py)
        out["step_overhead"] = {"numbers_from": _cost_model("costs.step_overhead", profile.costs["step_overhead"]),
                                "note": "the served step's host work outside the forward, added once per iteration"}
    return out


def _prefix_cache(spec: PrefixCacheSpec, profile: Profile) -> dict[str, Any]:
    """A hit's suffix is priced by the profile's prefill over a cached context (no section of its own)."""
    params = {"block_tokens": spec.block_tokens, "routing": spec.routing, "eviction": "lru",
              "hit_cap": "(prompt - 1) // block_tokens blocks (the last prompt token is always computed)"}
    if spec.routing == "affinity":
        params["affinity_slack"] = spec.affinity_slack
    return {"parameters": params, "numbers_from": _cost_model("costs.prefill", profile.costs["prefill"])}


def one_line(report: dict[str, Any]) -> str:
    """e.g. 'speculative (k 5, adaptive false, draft) + compression (int8); numbers: measured, fitted'."""
    overhead = report.get("step_overhead")
    if overhead is not None:  # e.g. '; step overhead o0 0.15 ms, o_seq 0.0045 ms/sequence, o_tok 0 ms/token (fitted)'
        numbers = overhead["numbers_from"]
        terms = ", ".join(f"{n['field'].rsplit('.', 1)[1]} {n['value']:.3g} {n['unit']}" for n in numbers)
        sources = ", ".join(sorted({n["source"] for n in numbers}))
        without = dict(report)
        del without["step_overhead"]
        return f"{one_line(without)}; step overhead {terms} ({sources})"
    if not report.get("on"):
        return "none (baseline)"
    parts = []
    for name in report["on"]:
        p = report[name]["parameters"]
        if name == "speculative":
            detail = f"K {p['k']} ({p['k_from']}), adaptive {str(p['adaptive']).lower()}, {p['proposer']}"
            if p.get("acceptance_from_scenario"):
                detail += f", acceptance of {', '.join(p['acceptance_from_scenario'])} from the scenario"
        elif name == "tiered":
            detail = (f"host {p['host_capacity_gib']:.4g} GiB, SSD {p['ssd_capacity_gib']:.4g} GiB, "
                      f"chunk {p['chunk_tokens']}, {p['policy']}")
        elif name == "sequence_parallel":
            detail = f"degree {p['degree']}, {p['gpus_per_replica']} GPUs per replica"
        elif name == "prefix_cache":
            detail = f"blocks of {p['block_tokens']} tokens, {p['routing']} routing"
        else:
            detail = f"mode {p['mode']}"
        parts.append(f"{name} ({detail})")
    return " + ".join(parts) + f"; their profile numbers are {', '.join(report['sources'])}"
