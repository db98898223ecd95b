"""The explorer's scenario editor: widgets that turn a shipped scenario into an edited TOML-shaped dict.

The dict follows the agreed scenario format (README of data/scenarios, with the tables
[batching] and [strategy.*]) and is validated only by tripath.simulator.scenario.scenario.scenario_from_dict,
the CLI's reader: the app never re-implements a check. A field this simulator build does not
accept yet (e.g. a batching policy still being built) is reported by that reader, by name.
Keys the user leaves at their defaults are left out, so an untouched form is the shipped file. Every
widget is bound (tripath/app/widgets/state.py): its value holds across page switches, and the SLA
targets are the shared ones (state.SLA_MS), so an SLA set on one page or scenario holds on the others.
"""

from __future__ import annotations

import copy
import tomllib
from typing import Any

import streamlit as st

from tripath.app.widgets.state import SLA_MS, bind
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


SLA_LABELS = {"ttft_p99_ms": "TTFT P99 target (ms)", "tpot_p99_ms": "TPOT P99 target (ms)",
              "e2e_p99_ms": "end-to-end P99 target (ms)"}
RATE_MODES = {"load_fraction": "fraction of the baseline's saturation", "rate_per_s": "requests per second"}


def edit(base: str, profile: Profile) -> dict[str, Any]:
    """Draw the editor for shipped scenario ``base`` and return the edited dict (not yet validated)."""
    data = copy.deepcopy(base_dict(base))
    data.pop("profile", None)  # the page's profile picker decides
    k = f"{base}."  # widget keys per base scenario: switching scenarios shows that file's values
    workload = data["workload"]
    with st.expander("Workload", expanded=True):
        _arrival(workload, k)
        mix = ", ".join(f"{t}:{w:g}" for t, w in workload.get("tasks", {"default": 1.0}).items())
        workload["tasks"] = parse_mix(st.text_input("task mix (NAME:WEIGHT, ...)", **bind(k + "tasks", mix),
                                                    help="tasks name the profile's acceptance rows"))
        left, right = st.columns(2)
        with left:
            workload["prompt_tokens"] = _lengths("prompt length (tokens)", workload["prompt_tokens"], k + "prompt.",
                                                 "prompt")
        with right:
            workload["output_tokens"] = _lengths("output length (tokens)", workload["output_tokens"], k + "output.",
                                                 "output")
    with st.expander("Cluster and batching", expanded=True):
        _cluster(data, k)
        _batching(data, k)
    with st.expander("Optimization paths"):
        strategy = _strategy(data.get("strategy", {}), profile, k)
        data.pop("strategy", None)
        if strategy:
            data["strategy"] = strategy
    with st.expander("SLA (P99 targets; 0 = no target for that term)", expanded=True):
        sla = data.get("sla", {})
        cols = st.columns(3)
        for col, term in zip(cols, SLA_LABELS, strict=True):
            shared = SLA_MS[term.removesuffix("_p99_ms")]  # the SLA holds across pages and scenarios
            value = col.number_input(SLA_LABELS[term], min_value=0.0, **bind(k + term, float(sla.get(term, 0.0)),
                                                                               shared))
            if value > 0:
                sla[term] = value
            else:
                sla.pop(term, None)
        data["sla"] = sla
    return data


def _arrival(workload: dict[str, Any], k: str) -> None:
    arrival = workload["arrival"]
    kinds = ("poisson", "gamma", "constant", "trace", "closed")
    kind = st.selectbox("arrivals", kinds, **bind(k + "arrival", arrival["kind"], options=kinds),
                        help="gamma: bursty arrivals with the given inter-arrival CV (1 = Poisson); constant: evenly "
                             "spaced, as a benchmark client sends; closed: N users, each sending its next request "
                             "when its previous one ends (a benchmark client's concurrency limit)")
    if kind == "trace":
        traces = sorted(SHIPPED_TRACES)
        current = arrival.get("trace", traces[0])
        trace = st.selectbox("trace (real timestamps and lengths)", traces,
                             **bind(k + "trace", current if current in traces else traces[0], options=traces))
        scale = st.number_input("time scale (x inter-arrival times)", 0.01, 100.0,
                                **bind(k + "time_scale", float(arrival.get("time_scale", 1.0))))
        workload["arrival"] = {"kind": "trace", "trace": trace, **({"time_scale": scale} if scale != 1.0 else {})}
        for key in ("prompt_tokens", "output_tokens"):
            if workload[key].get("kind") != "trace":
                workload[key] = {"kind": "trace"}
        workload.pop("requests", None)
        workload["duration_s"] = st.number_input("replay the first ... of the trace (s)", 1.0, 86400.0,
                                                 **bind(k + "duration", float(workload.get("duration_s", 300.0))))
        return
    if kind == "closed":
        users = st.number_input("concurrent users", 1, 100_000, **bind(k + "users", int(arrival.get("users", 32))))
        think = st.number_input("think time (s) after each response", 0.0, 3600.0,
                                **bind(k + "think_s", float(arrival.get("think_s", 0.0))))
        workload["arrival"] = {"kind": "closed", "users": int(users), **({"think_s": think} if think else {})}
    else:
        workload["arrival"] = _rated_arrival(arrival, kind, k)
    requests = int(workload.get("requests", 200))
    workload.pop("duration_s", None)
    workload["requests"] = int(st.number_input("requests per replication", 1, 1_000_000,
                                               **bind(k + "requests", requests)))


def _rated_arrival(arrival: dict[str, Any], kind: str, k: str) -> dict[str, Any]:
    """Poisson, gamma or constant arrivals at a rate or a load fraction."""
    modes = tuple(RATE_MODES)
    mode = st.radio("load given as", modes, horizontal=True, format_func=RATE_MODES.__getitem__,
                    **bind(k + "rate_mode", "load_fraction" if "load_fraction" in arrival else "rate_per_s",
                           options=modes),
                    help="a fraction of the BASELINE's saturation estimate (tripath/simulator/capacity.py), so "
                         "the rate in req/s stays the same when a path is switched on")
    default = float(arrival.get(mode, 0.6 if mode == "load_fraction" else 1.0))
    label = "load (fraction of the baseline's saturation)" if mode == "load_fraction" else "arrival rate (req/s)"
    value = st.number_input(label, min_value=0.0001, format="%.4f", **bind(k + mode, default))
    new = {"kind": kind, mode: value}
    if kind == "gamma":
        new["cv"] = st.number_input("inter-arrival CV (burstiness; 1 = Poisson)", 0.01, 20.0,
                                    **bind(k + "cv", float(arrival.get("cv", 2.0))))
    return new


def _lengths(label: str, spec: dict[str, Any], k: str, column: str) -> dict[str, Any]:
    if spec.get("kind") == "trace":
        st.caption(f"{label}: each trace row's own (measured)")
        return spec
    kind = st.selectbox(label, LENGTH_KINDS, **bind(k + "kind", spec["kind"], options=LENGTH_KINDS))
    out: dict[str, Any] = {"kind": kind}
    if kind == "fixed":
        out["value"] = int(st.number_input("tokens", 1, 10_000_000, **bind(k + "value", int(spec.get("value", 1024)))))
    elif kind == "uniform":
        out["low"] = int(st.number_input("lowest (tokens)", 1, 10_000_000,
                                         **bind(k + "low", int(spec.get("low", 512)))))
        out["high"] = int(st.number_input("highest (tokens)", 1, 10_000_000,
                                          **bind(k + "high", int(spec.get("high", 4096)))))
    elif kind == "lognormal":
        out["median"] = st.number_input("median (tokens)", 1.0, 1e7, **bind(k + "median",
                                                                           float(spec.get("median", 1000.0))))
        out["sigma"] = st.number_input("sigma of log", 0.0, 5.0, **bind(k + "sigma", float(spec.get("sigma", 0.8))))
    else:
        traces = sorted(SHIPPED_TRACES)
        current = spec.get("trace", "azure-conv-2023")
        out["trace"] = st.selectbox("bootstrap from trace", traces,
                                    **bind(k + "trace", current if current in traces else traces[0], options=traces))
        out["column"] = spec.get("column", column)
    for bound in ("min", "max"):
        if bound in spec:
            out[bound] = spec[bound]
    return out


def _cluster(data: dict[str, Any], k: str) -> None:
    cluster = data.setdefault("cluster", {})
    left, right = st.columns(2)
    cluster["gpus"] = int(left.number_input("GPUs", 1, 4096, **bind(k + "gpus", int(cluster.get("gpus", 1)))))
    memory = right.number_input("device memory per GPU (GiB; 0 = the profile's)", 0.0, 4096.0,
                                **bind(k + "device_memory", float(cluster.get("device_memory_gib", 0.0))))
    if memory > 0:
        cluster["device_memory_gib"] = memory
    else:
        cluster.pop("device_memory_gib", None)


def _batching(data: dict[str, Any], k: str) -> None:
    batching = data.setdefault("batching", {})
    cols = st.columns(5)
    policy = cols[0].selectbox("batching policy", POLICIES,
                               **bind(k + "policy", batching.get("policy", "continuous"), options=POLICIES))
    batching["policy"] = policy
    batching["max_batch_size"] = int(cols[1].number_input(
        "max batch size (requests)", 1, 65536, **bind(k + "mbs", int(batching.get("max_batch_size", 256)))))
    batching["max_batched_tokens"] = int(cols[2].number_input(
        "max batched tokens per step", 1, 10_000_000, **bind(k + "mbt", int(batching.get("max_batched_tokens", 8192)))))
    wait = cols[3].number_input("batching window (ms)", 0.0, 1e6, **bind(k + "wait", float(batching.get("max_wait_ms",
                                                                                                        0.0))),
                                help="static/dynamic/adaptive: longest a batch waits to fill")
    preemption = cols[4].selectbox("preemption", PREEMPTION,
                                   **bind(k + "preemption", batching.get("preemption", "none"), options=PREEMPTION))
    # defaults stay absent, so an untouched form is the shipped file (and today's baseline)
    for key, value, default in (("max_wait_ms", wait, 0.0), ("preemption", preemption, "none")):
        if value != default or key in batching:
            batching[key] = value


def _strategy(current: dict[str, Any], profile: Profile, k: str) -> dict[str, Any]:
    st.caption("Tick a path to switch it on; all off = the baseline (no optimization path). The load in req/s "
               "stays the same whichever paths are on.")
    out: dict[str, Any] = {}
    if st.checkbox("speculative decoding", **bind(k + "spec", "speculative" in current)):
        spec = current.get("speculative", {})
        cols = st.columns(4)
        default_k = profile.speculative.k if profile.speculative else 5
        table: dict[str, Any] = {"k": int(cols[0].number_input("draft tokens per round (K)", 1, 32,
                                                               **bind(k + "spec.k", int(spec.get("k", default_k)))))}
        table["adaptive"] = cols[1].checkbox("adaptive K",
                                             **bind(k + "spec.adaptive", bool(spec.get("adaptive", False))))
        fallback = cols[2].number_input("fall back below acceptance (0-1; empty = break-even)", 0.0, 1.0, value=None,
                                        **bind(k + "spec.fallback", spec.get("fallback_acceptance")))
        if fallback is not None:
            table["fallback_acceptance"] = fallback
        table["proposer"] = cols[3].selectbox("proposer", PROPOSERS,
                                              **bind(k + "spec.proposer", spec.get("proposer", "draft"),
                                                     options=PROPOSERS))
        out["speculative"] = table
    if st.checkbox("tiered KV cache (GPU -> CPU -> SSD)", **bind(k + "tiered", "tiered" in current)):
        tiered = current.get("tiered", {})
        cols = st.columns(4)
        table = {}
        host = cols[0].number_input("host memory (GiB; empty = the profile's)", 0.0, 1e6, value=None,
                                    **bind(k + "tiered.host", tiered.get("host_capacity_gib")))
        ssd = cols[1].number_input("SSD (GiB; empty = the profile's)", 0.0, 1e7, value=None,
                                   **bind(k + "tiered.ssd", tiered.get("ssd_capacity_gib")))
        for key, value in (("host_capacity_gib", host), ("ssd_capacity_gib", ssd)):
            if value is not None:
                table[key] = value
        table["chunk_tokens"] = int(cols[2].number_input("chunk (tokens)", 1, 1 << 20,
                                                         **bind(k + "tiered.chunk", int(tiered.get("chunk_tokens",
                                                                                                   256)))))
        table["policy"] = cols[3].selectbox("eviction policy", ("lru",), **bind(k + "tiered.policy", "lru",
                                                                                options=("lru",)))
        out["tiered"] = table
    if st.checkbox("sequence parallelism", **bind(k + "sp", "sequence_parallel" in current)):
        degrees = sorted(profile.sequence_parallel) or [2]
        default = current.get("sequence_parallel", {}).get("degree", degrees[0])
        out["sequence_parallel"] = {"degree": st.selectbox(
            "degree (GPUs per sequence; the profile's measured degrees)", degrees,
            **bind(k + "sp.degree", default if default in degrees else degrees[0], options=degrees))}
    modes = sorted(profile.compression)
    if st.checkbox("KV compression", **bind(k + "compression", "compression" in current and bool(modes)),
                   disabled=not modes, help=None if modes else "this profile has no compression section"):
        mode = current.get("compression", {}).get("mode", modes[0] if modes else "")
        out["compression"] = {"mode": st.selectbox("mode (from the profile)", modes,
                                                   **bind(k + "compression.mode", mode if mode in modes else modes[0],
                                                          options=modes))}
    if st.checkbox("prefix caching", **bind(k + "prefix", "prefix_cache" in current),
                   help="reuses the KV of shared prompt prefixes: needs a [workload.prefix] table or a trace with "
                        "hash_ids (Mooncake); docs/prefix_caching.md"):
        prefix = current.get("prefix_cache", {})
        cols = st.columns(2)
        routing = prefix.get("routing", PREFIX_ROUTINGS[0])
        out["prefix_cache"] = {
            "block_tokens": int(cols[0].number_input("block size (tokens)", 1, 1 << 16,
                                                     **bind(k + "prefix.block", int(prefix.get("block_tokens", 512))))),
            "routing": cols[1].selectbox("routing across replicas", PREFIX_ROUTINGS,
                                         **bind(k + "prefix.routing", routing if routing in PREFIX_ROUTINGS
                                                else PREFIX_ROUTINGS[0], options=PREFIX_ROUTINGS))}
    return out
