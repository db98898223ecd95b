"""The explorer's scenario editor: widgets that turn a shipped scenario into an edited TOML-shaped dict.

The dict follows the agreed scenario format (README of data/scenarios, with the tables
[batching] and [strategy.*]) and is validated only by tripath.simulator.scenario.scenario.scenario_from_dict,
the CLI's reader: the app never re-implements a check. A field this simulator build does not
accept yet (e.g. a batching policy still being built) is reported by that reader, by name.
Keys the user leaves at their defaults are left out, so an untouched form is the shipped file.
"""

from __future__ import annotations

import copy
import tomllib
from typing import Any

import streamlit as st

from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.profile.profile import Profile
from tripath.simulator.scenario.strategy import PREFIX_ROUTINGS
from tripath.simulator.scenario.traces import SHIPPED_TRACES

POLICIES = ("static", "dynamic", "continuous", "chunked", "adaptive")
PREEMPTION = ("none", "recompute", "swap")
LENGTH_KINDS = ("fixed", "uniform", "lognormal", "empirical")
PROPOSERS = ("draft", "prompt_lookup")


def shipped_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.toml"))


def base_dict(name: str) -> dict[str, Any]:
    with open(SCENARIOS_DIR / f"{name}.toml", "rb") as handle:
        return tomllib.load(handle)


def parse_mix(text: str) -> dict[str, float]:
    """"dialogue:3, code:1" -> {"dialogue": 3.0, "code": 1.0}; ValueError naming the bad part."""
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, weight = part.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"task mix: {part!r} is not NAME:WEIGHT")
        try:
            mix[name.strip()] = float(weight)
        except ValueError:
            raise ValueError(f"task mix: weight {weight.strip()!r} of {name.strip()!r} is not a number") from None
    if not mix:
        raise ValueError("task mix: give at least one NAME:WEIGHT")
    return mix


def edit(base: str, profile: Profile) -> dict[str, Any]:
    """Draw the editor for shipped scenario ``base`` and return the edited dict (not yet validated)."""
    data = copy.deepcopy(base_dict(base))
    data.pop("profile", None)  # the page's profile picker decides
    k = f"{base}."  # widget keys per base scenario: switching scenarios shows that file's values
    workload = data["workload"]
    with st.expander("Workload", expanded=True):
        _arrival(workload, k)
        mix = ", ".join(f"{t}:{w:g}" for t, w in workload.get("tasks", {"default": 1.0}).items())
        workload["tasks"] = parse_mix(st.text_input("task mix (NAME:WEIGHT, ...)", mix, key=k + "tasks",
                                                    help="tasks name the profile's acceptance rows"))
        left, right = st.columns(2)
        with left:
            workload["prompt_tokens"] = _lengths("prompt tokens", workload["prompt_tokens"], k + "prompt.", "prompt")
        with right:
            workload["output_tokens"] = _lengths("output tokens", workload["output_tokens"], k + "output.", "output")
    with st.expander("Cluster and batching", expanded=True):
        _cluster(data, k)
        _batching(data, k)
    with st.expander("Strategy (optimization paths)"):
        strategy = _strategy(data.get("strategy", {}), profile, k)
        data.pop("strategy", None)
        if strategy:
            data["strategy"] = strategy
    with st.expander("SLA (P99 targets; 0 = no target)", expanded=True):
        sla = data.get("sla", {})
        cols = st.columns(3)
        for col, term in zip(cols, ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms"), strict=True):
            value = col.number_input(term, min_value=0.0, value=float(sla.get(term, 0.0)), key=k + term)
            if value > 0:
                sla[term] = value
            else:
                sla.pop(term, None)
        data["sla"] = sla
    return data


def _arrival(workload: dict[str, Any], k: str) -> None:
    arrival = workload["arrival"]
    kinds = ("poisson", "gamma", "constant", "trace")
    kind = st.selectbox("arrivals", kinds, index=kinds.index(arrival["kind"]), key=k + "arrival",
                        help="gamma: bursty arrivals with the given inter-arrival CV (1 = Poisson); constant: evenly "
                             "spaced, as a benchmark client sends")
    if kind == "trace":
        traces = sorted(SHIPPED_TRACES)
        current = arrival.get("trace", traces[0])
        trace = st.selectbox("trace (real timestamps and lengths)", traces,
                             index=traces.index(current) if current in traces else 0, key=k + "trace")
        scale = st.number_input("time scale (x inter-arrival times)", 0.01, 100.0,
                                float(arrival.get("time_scale", 1.0)), key=k + "time_scale")
        workload["arrival"] = {"kind": "trace", "trace": trace, **({"time_scale": scale} if scale != 1.0 else {})}
        for key in ("prompt_tokens", "output_tokens"):
            if workload[key].get("kind") != "trace":
                workload[key] = {"kind": "trace"}
        workload.pop("requests", None)
        workload["duration_s"] = st.number_input("replay the first (s) of the trace", 1.0, 86400.0,
                                                 float(workload.get("duration_s", 300.0)), key=k + "duration")
        return
    modes = ("load_fraction", "rate_per_s")
    mode = st.radio("rate given as", modes, index=0 if "load_fraction" in arrival else 1, horizontal=True,
                    key=k + "rate_mode", help="load_fraction: of the saturation estimate "
                                              "(tripath/simulator/capacity.py)")
    default = float(arrival.get(mode, 0.6 if mode == "load_fraction" else 1.0))
    value = st.number_input(mode, min_value=0.0001, value=default, format="%.4f", key=k + mode)
    new = {"kind": kind, mode: value}
    if kind == "gamma":
        new["cv"] = st.number_input("inter-arrival CV (burstiness)", 0.01, 20.0, float(arrival.get("cv", 2.0)),
                                    key=k + "cv")
    workload["arrival"] = new
    requests = int(workload.get("requests", 200))
    workload.pop("duration_s", None)
    workload["requests"] = int(st.number_input("requests per replication", 1, 1_000_000, requests, key=k + "requests"))


def _lengths(label: str, spec: dict[str, Any], k: str, column: str) -> dict[str, Any]:
    if spec.get("kind") == "trace":
        st.caption(f"{label}: each trace row's own (measured)")
        return spec
    kind = st.selectbox(label, LENGTH_KINDS, index=LENGTH_KINDS.index(spec["kind"]), key=k + "kind")
    out: dict[str, Any] = {"kind": kind}
    if kind == "fixed":
        out["value"] = int(st.number_input("tokens", 1, 10_000_000, int(spec.get("value", 1024)), key=k + "value"))
    elif kind == "uniform":
        out["low"] = int(st.number_input("low", 1, 10_000_000, int(spec.get("low", 512)), key=k + "low"))
        out["high"] = int(st.number_input("high", 1, 10_000_000, int(spec.get("high", 4096)), key=k + "high"))
    elif kind == "lognormal":
        out["median"] = st.number_input("median", 1.0, 1e7, float(spec.get("median", 1000.0)), key=k + "median")
        out["sigma"] = st.number_input("sigma of log", 0.0, 5.0, float(spec.get("sigma", 0.8)), key=k + "sigma")
    else:
        traces = sorted(SHIPPED_TRACES)
        current = spec.get("trace", "azure-conv-2023")
        out["trace"] = st.selectbox("bootstrap from trace", traces, index=traces.index(current)
                                    if current in traces else 0, key=k + "trace")
        out["column"] = spec.get("column", column)
    for bound in ("min", "max"):
        if bound in spec:
            out[bound] = spec[bound]
    return out


def _cluster(data: dict[str, Any], k: str) -> None:
    cluster = data.setdefault("cluster", {})
    left, right = st.columns(2)
    cluster["gpus"] = int(left.number_input("GPUs", 1, 4096, int(cluster.get("gpus", 1)), key=k + "gpus"))
    memory = right.number_input("device memory GiB (0 = the profile's)", 0.0, 4096.0,
                                float(cluster.get("device_memory_gib", 0.0)), key=k + "device_memory")
    if memory > 0:
        cluster["device_memory_gib"] = memory
    else:
        cluster.pop("device_memory_gib", None)


def _batching(data: dict[str, Any], k: str) -> None:
    batching = data.setdefault("batching", {})
    cols = st.columns(5)
    policy = cols[0].selectbox("batching policy", POLICIES, index=POLICIES.index(batching.get("policy", "continuous")),
                               key=k + "policy")
    batching["policy"] = policy
    batching["max_batch_size"] = int(cols[1].number_input("max batch size", 1, 65536,
                                                          int(batching.get("max_batch_size", 256)), key=k + "mbs"))
    batching["max_batched_tokens"] = int(cols[2].number_input(
        "max batched tokens", 1, 10_000_000, int(batching.get("max_batched_tokens", 8192)), key=k + "mbt"))
    wait = cols[3].number_input("max wait ms (window)", 0.0, 1e6, float(batching.get("max_wait_ms", 0.0)),
                                key=k + "wait", help="static/dynamic/adaptive: longest a batch waits to fill")
    preemption = cols[4].selectbox("preemption", PREEMPTION, index=PREEMPTION.index(batching.get("preemption", "none")),
                                   key=k + "preemption")
    # defaults stay absent, so an untouched form is the shipped file (and today's baseline)
    for key, value, default in (("max_wait_ms", wait, 0.0), ("preemption", preemption, "none")):
        if value != default or key in batching:
            batching[key] = value


def _strategy(current: dict[str, Any], profile: Profile, k: str) -> dict[str, Any]:
    st.caption("Each path on = its [strategy.*] table in the scenario; all off = the baseline.")
    out: dict[str, Any] = {}
    if st.checkbox("speculative decoding", "speculative" in current, key=k + "spec"):
        spec = current.get("speculative", {})
        cols = st.columns(4)
        default_k = profile.speculative.k if profile.speculative else 5
        table: dict[str, Any] = {"k": int(cols[0].number_input("K", 1, 32, int(spec.get("k", default_k)),
                                                               key=k + "spec.k"))}
        table["adaptive"] = cols[1].checkbox("adaptive K", bool(spec.get("adaptive", False)), key=k + "spec.adaptive")
        fallback = cols[2].number_input("fallback below acceptance (empty = break-even)", 0.0, 1.0,
                                        spec.get("fallback_acceptance"), key=k + "spec.fallback")
        if fallback is not None:
            table["fallback_acceptance"] = fallback
        proposer = spec.get("proposer", "draft")
        table["proposer"] = cols[3].selectbox("proposer", PROPOSERS, index=PROPOSERS.index(proposer),
                                              key=k + "spec.proposer")
        out["speculative"] = table
    if st.checkbox("tiered KV cache (GPU -> CPU -> SSD)", "tiered" in current, key=k + "tiered"):
        tiered = current.get("tiered", {})
        cols = st.columns(4)
        table = {}
        host = cols[0].number_input("host GiB (empty = profile's)", 0.0, 1e6, tiered.get("host_capacity_gib"),
                                    key=k + "tiered.host")
        ssd = cols[1].number_input("SSD GiB (empty = profile's)", 0.0, 1e7, tiered.get("ssd_capacity_gib"),
                                   key=k + "tiered.ssd")
        for key, value in (("host_capacity_gib", host), ("ssd_capacity_gib", ssd)):
            if value is not None:
                table[key] = value
        table["chunk_tokens"] = int(cols[2].number_input("chunk tokens", 1, 1 << 20,
                                                         int(tiered.get("chunk_tokens", 256)), key=k + "tiered.chunk"))
        table["policy"] = cols[3].selectbox("eviction policy", ("lru",), key=k + "tiered.policy")
        out["tiered"] = table
    if st.checkbox("sequence parallelism", "sequence_parallel" in current, key=k + "sp"):
        degrees = sorted(profile.sequence_parallel) or [2]
        default = current.get("sequence_parallel", {}).get("degree", degrees[0])
        index = degrees.index(default) if default in degrees else 0
        out["sequence_parallel"] = {"degree": st.selectbox("degree (the profile's measured degrees)", degrees,
                                                           index=index, key=k + "sp.degree")}
    modes = sorted(profile.compression)
    if st.checkbox("KV compression", "compression" in current, key=k + "compression", disabled=not modes,
                   help=None if modes else "this profile has no compression section"):
        mode = current.get("compression", {}).get("mode", modes[0] if modes else "")
        out["compression"] = {"mode": st.selectbox("mode (from the profile)", modes,
                                                   index=modes.index(mode) if mode in modes else 0,
                                                   key=k + "compression.mode")}
    if st.checkbox("prefix caching", "prefix_cache" in current, key=k + "prefix",
                   help="reuses the KV of shared prompt prefixes: needs a [workload.prefix] table or a trace with "
                        "hash_ids (Mooncake); docs/prefix_caching.md"):
        prefix = current.get("prefix_cache", {})
        cols = st.columns(2)
        routing = prefix.get("routing", PREFIX_ROUTINGS[0])
        out["prefix_cache"] = {
            "block_tokens": int(cols[0].number_input("block tokens", 1, 1 << 16, int(prefix.get("block_tokens", 512)),
                                                     key=k + "prefix.block")),
            "routing": cols[1].selectbox("routing", PREFIX_ROUTINGS, index=PREFIX_ROUTINGS.index(routing),
                                         key=k + "prefix.routing")}
    return out
