"""The answer: which GPU type and TP, which path, how many replicas, what it costs, how sure, for one scenario at one
request rate.

The search (docs/planning.md "recommend"): the baseline on every layout first (capacity.py's sizing search, each
verdict decided by tripath/planning/decision.py), then every other candidate only at replica counts that cost less
than the cheapest baseline found, then the baselines and every other candidate that met at the other max batch sizes
of the ladder (``batch_ladder``), again only below the cheapest row found. Rows rank by ``rank_key`` (cheapest,
lossless, simpler, larger margin); a path that never engaged is never ranked. The first is recommended, the second
is the runner-up; when none meets, the closest is the row with the largest SLA margin. Its headroom is
tripath/planning/headroom.py's. Prunes (each reported with its reason): the TTFT floor, the cost bound, and tiering
where the baseline's KV never filled the device.

Speed: the sizing searches run in parallel on the executor, largest first, each simulating its bound first
(capacity.py ``bound_first``); this changes when each simulation runs, never a number.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from tripath.core.errors import InputError
from tripath.core.metrics import TERMS, sla_targets
from tripath.planning.cache import ResultCache
from tripath.planning.candidates import BASELINE, Candidate, candidates, idle_paths, is_lossy
from tripath.planning.capacity import SearchSpec, run_searches, strict_from_dict
from tripath.planning.decision import DecisionRule
from tripath.planning.executor import Executor
from tripath.planning.headroom import BISECTIONS, robustness
from tripath.planning.prices import GpuPrices, cost_per_million_output_tokens
from tripath.planning.scenario_dict import build, canonical, refuse_closed_loop, with_fields
from tripath.profile.profile import Profile, resolve_profile

GO_FURTHER = ("to go further: measure your own deployment (`tripath calibrate`, docs/) and rerun with --profile; "
              "`tripath plan SCENARIO --qps Q` adds goodput curves, `tripath whatif` varies any field")


def section_sources(profile: Profile) -> dict[str, list[str]]:
    """Per top-level profile section, the source kinds its numbers carry (every nested ``source`` field)."""
    data = json.loads(profile.to_json())
    out: dict[str, list[str]] = {}

    def walk(node: Any, found: set[str]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "source" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value, found)
        elif isinstance(node, list):
            for value in node:
                walk(value, found)

    for section, value in data.items():
        if section in ("source", "key", "provenance", "notes", "schema_version"):
            continue
        found: set[str] = set()
        walk(value, found)
        if found:
            out[section] = sorted(found)
    return out


def sla_terms(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per given SLA term: P99 mean and interval (ms), target, margin, and the overshoot when it misses."""
    out: dict[str, dict[str, Any]] = {}
    for term in TERMS:
        target = outcome["sla_targets_ms"][term]
        if target is None:
            continue
        p99 = outcome["p99_ms"][term]
        mean = p99["mean"]
        margin = None if mean is None else (target - mean) / target
        out[term] = {"p99_ms": mean, "ci_low_ms": p99.get("ci_low"), "ci_high_ms": p99.get("ci_high"),
                     "target_ms": target, "margin": margin,
                     "over_by": None if margin is None or margin >= 0 else -margin}
    return out


def binding_term(terms: dict[str, dict[str, Any]]) -> str | None:
    """The term with the smallest margin (None when no term has a P99)."""
    given = {t: v["margin"] for t, v in terms.items() if v["margin"] is not None}
    return min(given, key=lambda t: given[t]) if given else None


HEADROOM_WARNING = 0.10  # a recommendation whose load or cost headroom is under this is said to be thin


@dataclass(frozen=True)
class Layout:
    """One deployment shape a recommendation may choose: a shipped profile (GPU type, TP degree, attention data
    parallelism) and its price."""

    name: str
    profile: Profile
    usd_per_gpu_hour: float | None
    price_source: str | None

    @property
    def gpu(self) -> str:
        return self.profile.key.hardware

    @property
    def tp(self) -> int:
        """The tensor-parallel degree (of each attention data-parallel rank)."""
        return int(self.profile.key.tp)

    def to_dict(self) -> dict[str, Any]:
        """The layout as the answer reports it; ``attention_dp`` is 1 where the profile has no attention data
        parallelism (a layout dict written before it existed has no key: read it with ``.get("attention_dp", 1)``)."""
        key = self.profile.key
        return {"profile": self.name, "gpu": self.gpu, "tp": self.tp, "attention_dp": int(key.attention_dp),
                "weights": key.dtype, "expert_parallel": key.expert_parallel, "profile_key": self.profile.key_str(),
                "usd_per_gpu_hour": self.usd_per_gpu_hour, "price_source": self.price_source}


def row_terms(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per given SLA term of a row: the verdict's P99 and replication interval when it was decided by the rule,
    else the outcome's (sla_terms)."""
    verdict = row.get("verdict")
    outcome = row.get("outcome")
    if verdict is None:
        return {} if outcome is None or outcome.get("error") else sla_terms(outcome)
    out = {}
    for term, t in verdict["terms"].items():
        margin = t["margin"]
        out[term] = {"p99_ms": t["p99_ms"], "ci_low_ms": t["ci_low_ms"], "ci_high_ms": t["ci_high_ms"],
                     "target_ms": t["target_ms"], "margin": margin, "verdict": t["verdict"],
                     "over_by": None if margin is None or margin >= 0 else -margin}
    return out


def row_margin(row: dict[str, Any]) -> float | None:
    """The row's SLA margin: its binding term's (target - P99) / target, from its verdict when it was decided by
    the rule (the verdict judges the steady tails with confidence), else the outcome's."""
    if row.get("verdict") is None:
        return (row.get("outcome") or {}).get("sla_margin")
    terms = row_terms(row)
    margins = [t["margin"] for t in terms.values() if t["margin"] is not None]
    return min(margins) if margins and len(margins) == len(terms) else None


def rank_key(row: dict[str, Any]) -> tuple[float, bool, int, float]:
    """Cheapest first ($/h, or GPUs without a price), then lossless before lossy, then the simpler deployment
    (fewer paths): two candidates on the same bill are a tie whatever their margins, and a tie goes to the one with
    less to run; last, the larger SLA margin."""
    cost = row.get("cost_usd_per_hour")
    margin = row_margin(row) or 0.0
    paths = row["candidate"]["paths"]
    return (float(row["gpus"]) if cost is None else float(cost), is_lossy(paths), len(paths), -margin)


@dataclass(frozen=True)
class RowSummary:
    """One searched (layout, candidate) row as the answer reports it: the JSON shape of ``recommended``,
    ``runner_up``, ``closest`` and each of ``others`` in ``Recommendation.to_dict()`` (what `tripath recommend
    --json` prints and the app keeps in session state), typed once so the CLI, the app and the export read the same
    fields. ``to_dict``/``from_dict`` are its one codec: ``from_dict(s.to_dict()) == s``."""

    id: str
    candidate: str
    paths: list[str] | None
    layout: dict[str, Any]
    max_batch_size: int | None
    replicas: int | None  # the sized count; None when no count searched meets
    gpus: int | None
    gpus_per_replica: int | None
    searched_replicas: int | None  # the most replicas simulated (where a miss was last seen)
    cost_usd_per_hour: float | None
    usd_per_million_output_tokens: float | None
    terms: dict[str, dict[str, Any]]  # row_terms: per given SLA term, P99, interval, target, margin, verdict
    binding_term: str | None
    rejected_share: float | None
    verdict: dict[str, Any] | None
    verdict_below: dict[str, Any] | None
    quality_loss: dict[str, Any] | None
    idle: str | None
    pruned: str | None
    remark: str | None
    not_applicable: str | None

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> RowSummary:
        """The summary of one of ``Recommendation.rows`` (the search's own row dicts)."""
        outcome = row.get("outcome") or {}
        terms = row_terms(row)
        return cls(id=row["id"], candidate=row["candidate"]["name"], paths=row["candidate"].get("paths"),
                   layout=row["layout"], max_batch_size=row.get("max_batch_size"), replicas=row.get("replicas"),
                   gpus=row.get("gpus"), gpus_per_replica=row.get("gpus_per_replica"),
                   searched_replicas=outcome.get("replicas"), cost_usd_per_hour=row.get("cost_usd_per_hour"),
                   usd_per_million_output_tokens=row.get("usd_per_million_output_tokens"), terms=terms,
                   binding_term=binding_term(terms), rejected_share=outcome.get("rejected_share"),
                   verdict=row.get("verdict"), verdict_below=row.get("verdict_below"),
                   quality_loss=row.get("quality_loss"), idle=row.get("idle"), pruned=row.get("pruned"),
                   remark=row.get("remark"), not_applicable=row.get("not_applicable"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict, keys in field order (the nested dicts are the row's own, not copies)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RowSummary:
        """Back from ``to_dict`` (or the stored ``--json``); a missing or unknown key is refused by name."""
        return strict_from_dict(cls, data, "a row summary")


@dataclass(frozen=True)
class Recommendation:
    """Every (layout, candidate) row searched, the recommended row, the runner-up, the closest when none meets,
    the winner's headroom, and where the numbers come from."""

    scenario: str
    qps: float
    sla_ms: dict[str, float | None]
    layouts: tuple[Layout, ...]
    rows: tuple[dict[str, Any], ...]
    recommended: str | None
    runner_up: str | None
    closest: str | None
    robustness: dict[str, Any] | None
    sources: dict[str, list[str]]
    rule: DecisionRule | None
    allow_lossy: bool = False
    excluded_lossy: tuple[str, ...] = ()
    batch_search: dict[str, Any] | None = None  # the other max batch sizes searched, how many searches, how many met

    def row(self, row_id: str | None) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["id"] == row_id), None)

    def _summary(self, row_id: str | None) -> dict[str, Any] | None:
        row = self.row(row_id)
        return None if row is None else RowSummary.of_row(row).to_dict()

    def headroom(self) -> dict[str, Any] | None:
        """The recommended row's smaller factor of load or step cost at which a P99 reaches its target (each
        factor's interpolated ``estimate``), whether it is under 10 %, and the smaller factor at which a P99's
        95 % interval top reaches it (``confident``: what the sample can promise)."""
        if self.robustness is None:
            return None
        factors = {k: self.robustness[k]["estimate"] for k in BISECTIONS}
        kind = min(factors, key=lambda k: factors[k])
        room = factors[kind] - 1.0
        confident = min(self.robustness[k]["confident"] for k in BISECTIONS) - 1.0
        return {"least": kind, "headroom": room, "confident": confident, "thin": room < HEADROOM_WARNING}

    def to_dict(self) -> dict[str, Any]:
        chosen = (self.recommended, self.runner_up, self.closest)
        first = self.layouts[0]
        return {"scenario": self.scenario, "qps": self.qps, "sla_ms": self.sla_ms,
                "layouts": [layout.to_dict() for layout in self.layouts],
                "gpu_price_usd_per_gpu_hour": {layout.gpu: layout.usd_per_gpu_hour for layout in self.layouts},
                "profile": {"key": first.profile.key_str(), "source": first.profile.source,
                            "section_sources": self.sources},
                "numbers_from": "simulated on " + ", ".join(
                    f"'{layout.profile.source}' profile {layout.name}" for layout in self.layouts),
                "decision_rule": None if self.rule is None else self.rule.to_dict(),
                "allow_lossy": self.allow_lossy, "excluded_lossy": list(self.excluded_lossy),
                "batch_search": self.batch_search,
                "meets_sla": self.recommended is not None,
                "recommended": self._summary(self.recommended), "runner_up": self._summary(self.runner_up),
                "closest": self._summary(self.closest), "robustness": self.robustness, "headroom": self.headroom(),
                "not_applicable": {r["id"]: r["not_applicable"] for r in self.rows if r.get("not_applicable")},
                "others": [self._summary(r["id"]) for r in self.rows if not r.get("not_applicable")
                           and r["id"] not in chosen],
                "go_further": GO_FURTHER}


def closest_candidate(rows: tuple[dict[str, Any], ...]) -> str | None:
    """Of a plan's rows that ran, the one with the largest SLA margin (the least negative): the closest to meeting."""
    ran = [r for r in rows if r.get("outcome") and not r["outcome"].get("error")
           and r["outcome"].get("sla_margin") is not None]
    if not ran:
        return None
    return max(ran, key=lambda r: r["outcome"]["sla_margin"])["candidate"]["name"]


def _layouts(names: Sequence[str], prices: GpuPrices | None) -> tuple[Layout, ...]:
    out = []
    for name in names:
        profile = resolve_profile(name) if not isinstance(name, Profile) else name
        label = name if isinstance(name, str) else profile.key_str()
        gpu = profile.key.hardware
        price = None if prices is None else prices.price(gpu)
        out.append(Layout(label, profile, price, None if prices is None else prices.source(gpu)))
    return tuple(out)


FLOOR_DRAWS = 20_000  # prompts drawn for the workload's P99 prompt length (the floor's)
FLOOR_CLEAR = 1.1  # a floor this far over the TTFT target rules a layout out; closer ones are simulated


def p99_prompt(data: dict[str, Any], source: str | None) -> int | None:
    """The workload's P99 prompt length (tokens, an observed draw) over FLOOR_DRAWS prompts drawn as the simulator
    draws them (seed 0); None when the scenario cannot be built."""
    from tripath.simulator.scenario.scenario import scenario_from_dict
    from tripath.simulator.scenario.workload import generate_arrays

    try:
        scenario = scenario_from_dict(with_fields(data, {"workload.requests": FLOOR_DRAWS,
                                                         "workload.duration_s": None}), source)
        rate = scenario.workload.arrival.rate_per_s or 1.0
        _, prompts, _, _, _ = generate_arrays(scenario.workload, np.random.default_rng(0), rate)
    except (InputError, ValueError):
        return None
    return int(np.percentile(prompts, 99.0, method="lower"))


def ttft_floor_ms(data: dict[str, Any], source: str | None, profile: Profile, candidate: Candidate, length: int
                  ) -> float | None:
    """A lower bound on the TTFT P99 in ms: the unloaded prefill of a ``length``-token prompt (the workload's P99
    prompt) on this layout with this candidate's cost transform (SP splits it; compression as its profile says),
    chunked as the scenario's policy chunks. Every request's TTFT is at least its own prefill, and prefill time grows
    with the prompt, so the TTFT P99 is at least this whatever the replica count; queueing, decodes sharing the
    iteration, SP merges, a draft's own prefill and paging only add. None when the scenario cannot be built."""
    from tripath.simulator.paths.run_costs import RunCosts
    from tripath.simulator.paths.step import Transforms
    from tripath.simulator.scenario.scenario import scenario_from_dict

    try:
        scenario = scenario_from_dict(candidate.apply(data), source)
        costs = RunCosts.for_scenario(scenario, profile)
    except (InputError, ValueError):
        return None
    cost = Transforms(costs).cost if costs.sequence_parallel is not None or costs.compression is not None \
        else costs.cost.fresh()
    if scenario.batching.policy != "chunked":
        return cost.mixed_s([length], 0, 0) * 1000.0
    chunk, done, seconds = int(scenario.batching.max_batched_tokens), 0, 0.0
    while done < length:
        tokens = min(chunk, length - done)
        seconds += cost.chunked_s([(tokens, done)], 0, 0)
        done += tokens
    return seconds * 1000.0


KV_NEVER_FULL = 0.9  # a peak live KV under this share of the device's KV budget never made a request wait for memory


def kv_room(base: dict[str, Any]) -> str | None:
    """Why tiering cannot pay on a layout, when it cannot: the baseline at the fewest replicas it simulated (the
    most load on each) never filled the device's KV budget, so its misses there were compute, which fewer replicas
    only worsen, and tiering would page nothing at any count searched (a candidate with tiering is then the one
    without it, by another name). None when the KV came near the budget, or when nothing was simulated."""
    probes = [p for p in base.get("search") or [] if p.get("peak_kv_bytes") is not None and p.get("kv_capacity_bytes")]
    if not probes:
        return None
    fewest = min(probes, key=lambda p: p["replicas"])
    peak, budget = fewest["peak_kv_bytes"], fewest["kv_capacity_bytes"]
    if peak >= KV_NEVER_FULL * budget:
        return None
    return (f"tiering would never engage: the baseline's peak live KV at {fewest['replicas']} replica(s), "
            f"{peak / 2**30:.1f} GiB, stayed under {KV_NEVER_FULL:.0%} of the device's KV budget "
            f"({budget / 2**30:.1f} GiB), and fewer replicas are compute-bound")


def _priced(row: dict[str, Any], layout: Layout, qps: float) -> None:
    """The row's layout, id, bill and, when it meets, its cost per hour and per million output tokens."""
    row["layout"] = layout.to_dict()
    row["id"] = f"{row['candidate']['name']} on {layout.name}"
    _quality(row, layout.profile)
    if row.get("gpus") is None or layout.usd_per_gpu_hour is None:
        return
    per_hour = row["gpus"] * layout.usd_per_gpu_hour
    row["cost_usd_per_hour"] = per_hour
    row["cost_usd_per_1k_requests"] = per_hour / (qps * 3600.0) * 1000.0
    tokens = (row.get("outcome") or {}).get("output_tokens_per_s")
    row["usd_per_million_output_tokens"] = None if not tokens else cost_per_million_output_tokens(per_hour, tokens)


def _quality(row: dict[str, Any], profile: Profile) -> None:
    """A lossy row's published quality cost beside it (the profile's compression quality_loss)."""
    mode = row["candidate"]["strategy"].get("compression", {}).get("mode")
    section = profile.compression.get(mode) if mode else None
    loss = None if section is None else getattr(section, "quality_loss", None)
    if loss is not None:
        row["quality_loss"] = {"value": loss.value, "unit": loss.unit, "source": loss.source, "note": loss.note}


def _searched(specs: list[SearchSpec], layouts: list[Layout], data: dict[str, Any], source: str | None,
              executor: Executor | None, qps: float, desc: str, batches: Sequence[int] | None = None
              ) -> list[dict[str, Any]]:
    """The sizing searches of ``specs`` as priced rows, each with the max batch size it simulated (``batches``,
    one per spec; the scenario's when None) and the paths that never engaged."""
    rows = run_searches(specs, data, source, executor, desc=desc)
    own = int(build(data, source).batching.max_batch_size)
    for i, (spec, layout, row) in enumerate(zip(specs, layouts, rows, strict=True)):
        batch = own if batches is None else int(batches[i])
        row["max_batch_size"] = batch
        _priced(row, layout, qps)
        if batch != own:
            row["id"] += f", max batch {batch}"
        idle = idle_paths(spec.candidate, row.get("outcome"), batch)
        if idle is not None:
            row["idle"] = idle
    return rows


BATCH_LADDER = (0.5, 2.0, 4.0)  # the other max batch sizes searched: the scenario's times these


def batch_ladder(batch: int, sizes: Sequence[int] | None = None) -> tuple[int, ...]:
    """The max batch sizes (vLLM's --max-num-seqs) searched besides the scenario's own ``batch``: ``sizes`` when
    given, else the scenario's halved, doubled and quadrupled (the knob a deployment turns first: a smaller batch
    shortens each decode step, a larger one serves more requests per GPU)."""
    chosen = sizes if sizes is not None else [max(1, int(batch * f)) for f in BATCH_LADDER]
    return tuple(sorted({int(b) for b in chosen} - {int(batch)}))


def cheaper_cap(best: float, per_replica: float, max_replicas: int) -> int:
    """The most replicas at ``per_replica`` $/h that cost strictly less than ``best`` $/h (at the same bill the row
    already found, the simpler, wins the tie), at most ``max_replicas``."""
    return max_replicas if math.isinf(best) else min(max_replicas, math.ceil(best / per_replica - 1e-9) - 1)


@dataclass(frozen=True)
class SearchOptions:
    """How recommend() searches, apart from what it searches (scenario, layouts, rate, prices) and where it runs
    (executor, cache): one value the CLI, the app and the tests build, instead of nine loose parameters.

    ``rule`` decides each probe with confidence (tripath/planning/decision.py); None: ``replications`` runs of the
    scenario's requests, P99 mean. ``max_replicas`` bounds every sizing search. ``with_robustness=False`` skips the
    headroom (tripath/planning/headroom.py). Lossy candidates (compression) only with
    ``allow_lossy``. ``candidate_names``: search only these (the baseline always: it sets the cost bound).
    ``batch_sizes``: the max batch sizes searched besides the scenario's (``batch_ladder``; empty: the scenario's
    only; None: the ladder)."""

    seed: int = 0
    rule: DecisionRule | None = None
    max_replicas: int = 16
    with_robustness: bool = True
    allow_lossy: bool = False
    replications: int = 2
    candidate_names: tuple[str, ...] | None = None
    batch_sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:  # any sequence given is kept as a tuple: the options stay hashable
        for name in ("candidate_names", "batch_sizes"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))


def recommend(data: dict[str, Any], source: str | None, layouts: Sequence[str | Profile], qps: float,
              prices: GpuPrices | None = None, options: SearchOptions | None = None,
              executor: Executor | None = None, cache: ResultCache | None = None) -> Recommendation:
    """Which layout (GPU type, TP), which path, how many replicas: the cheapest row meeting the SLA.

    ``layouts``: shipped profile names (or profiles) to choose among (catalog.layouts gives a model's family).
    Search: first the baseline on every layout (up to ``options.max_replicas``), then every other candidate only up
    to the replicas that cost less than the cheapest baseline found (one as dear could never be recommended: at
    the same bill the baseline wins the tie; it is reported as pruned), then the other max batch sizes. ``options``
    (SearchOptions; its defaults when None): the seed, decision rule, bounds and filters."""
    opts = options if options is not None else SearchOptions()
    seed, rule, max_replicas = opts.seed, opts.rule, opts.max_replicas
    allow_lossy, candidate_names, batch_sizes = opts.allow_lossy, opts.candidate_names, opts.batch_sizes
    sla = sla_targets(data.get("sla"))
    if all(v is None for v in sla.values()):
        raise ValueError("no SLA term: give the scenario an [sla] table")
    chosen = _layouts(layouts, prices)
    cache_dir = None if cache is None else str(cache.directory)
    text = canonical(data)
    reps = rule.replications if rule is not None else opts.replications

    def spec(layout: Layout, candidate: Candidate, cap: int, scenario: str = text) -> SearchSpec:
        return SearchSpec(scenario, source, layout.profile.to_json(), candidate, qps, seed, reps, cap, (),
                          cache_dir=cache_dir, bound_first=True, rule=rule)

    target = sla.get("ttft")
    length = None if target is None else p99_prompt(data, source)

    def floored(layout: Layout, candidate: Candidate) -> dict[str, Any] | None:
        """A row for a candidate the TTFT floor rules out on this layout (None: search it)."""
        if candidate.profile_support(layout.profile, data) is not None or length is None or target is None:
            return None
        floor = ttft_floor_ms(data, source, layout.profile, candidate, length)
        if floor is None or floor <= FLOOR_CLEAR * target:
            return None
        row = {"candidate": candidate.to_dict(), "not_applicable": None,
               "gpus_per_replica": candidate.gpus_per_replica(layout.profile), "floor_ms": floor,
               "pruned": f"cannot meet the TTFT target at any replica count: the workload's P99 prompt "
                         f"({length:,} tokens) takes {floor:,.0f} ms to prefill alone on this layout"}
        _priced(row, layout, qps)
        return row

    base_layouts, base_floor = [], {}
    for layout in chosen:
        ruled = floored(layout, BASELINE)
        if ruled is None:
            base_layouts.append(layout)
        else:
            base_floor[layout.name] = ruled
    searched = _searched([spec(layout, BASELINE, max_replicas) for layout in base_layouts], base_layouts, data,
                         source, executor, qps, f"baselines on {len(base_layouts)} layout(s)")
    by_layout = {layout.name: row for layout, row in zip(base_layouts, searched, strict=True)}
    base_rows = [by_layout.get(layout.name) or base_floor[layout.name] for layout in chosen]
    met = [r for r in base_rows if r.get("gpus") is not None and not r.get("idle")]
    best = min((rank_key(r)[0] for r in met), default=math.inf)
    excluded: list[str] = []
    specs, spec_layouts, pruned = [], [], []
    for layout, base in zip(chosen, base_rows, strict=True):
        room = kv_room(base)
        for candidate in candidates(layout.profile):
            if candidate.name == BASELINE.name or (candidate_names and candidate.name not in candidate_names):
                continue
            if is_lossy(candidate.paths) and not allow_lossy:
                excluded.append(candidate.name)
                continue
            reason = candidate.profile_support(layout.profile, data)
            if reason is not None:  # reported as not applicable, never as pruned
                row = {"candidate": candidate.to_dict(), "not_applicable": reason,
                       "gpus_per_replica": candidate.gpus_per_replica(layout.profile)}
                _priced(row, layout, qps)
                pruned.append(row)
                continue
            ruled = floored(layout, candidate)
            if ruled is not None:
                pruned.append(ruled)
                continue
            if "tiered" in candidate.paths and room is not None:
                row = {"candidate": candidate.to_dict(), "not_applicable": None,
                       "gpus_per_replica": candidate.gpus_per_replica(layout.profile), "pruned": room}
                _priced(row, layout, qps)
                pruned.append(row)
                continue
            per_replica = candidate.gpus_per_replica(layout.profile) * (layout.usd_per_gpu_hour or 1.0)
            cap = cheaper_cap(best, per_replica, max_replicas)
            if cap < 1:
                row = {"candidate": candidate.to_dict(), "not_applicable": None,
                       "gpus_per_replica": candidate.gpus_per_replica(layout.profile),
                       "pruned": f"one replica costs as much as the cheapest baseline found (${best:,.2f}/h) or more"}
                _priced(row, layout, qps)
                pruned.append(row)
                continue
            specs.append(spec(layout, candidate, cap))
            spec_layouts.append(layout)
    others = _searched(specs, spec_layouts, data, source, executor, qps,
                       "the other candidates, up to the cheapest baseline's cost")
    rows = base_rows + others + pruned
    for row in rows:
        if row.get("replicas") is None and not row.get("pruned") and not row.get("not_applicable") \
                and row["candidate"]["name"] != BASELINE.name and not math.isinf(best):
            row["pruned"] = (f"not met at {row['outcome']['replicas']} replica(s), the most that cost less than "
                             f"the cheapest baseline found")
    ranked = sorted((r for r in rows if r.get("gpus") is not None and not r.get("idle")), key=rank_key)
    pairs = [(la, BASELINE, r) for la, r in zip(base_layouts, searched, strict=True)]
    pairs += [(la, sp.candidate, r) for la, sp, r in zip(spec_layouts, specs, others, strict=True)
              if r.get("gpus") is not None]
    own = int(build(data, source).batching.max_batch_size)
    ladder = batch_ladder(own, batch_sizes)
    cheapest = rank_key(ranked[0])[0] if ranked else math.inf
    batch_specs, batch_layouts, batches = [], [], []
    for layout, candidate, row in pairs:
        if (row.get("outcome") or {}).get("error") or row.get("idle"):
            continue
        cap = cheaper_cap(cheapest, candidate.gpus_per_replica(layout.profile) * (layout.usd_per_gpu_hour or 1.0),
                          max_replicas)
        for size in ladder if cap >= 1 else ():
            varied = canonical(with_fields(data, {"batching.max_batch_size": size}))
            batch_specs.append(spec(layout, candidate, cap, varied))
            batch_layouts.append(layout)
            batches.append(size)
    batch_rows = _searched(batch_specs, batch_layouts, data, source, executor, qps,
                           f"max batch {', '.join(map(str, ladder))}, below the cheapest found", batches)
    rows += [r for r in batch_rows if r.get("gpus") is not None]
    batch_search = {"sizes": list(ladder), "searched": len(batch_specs),
                    "met_cheaper": sum(r.get("gpus") is not None for r in batch_rows)}
    ranked = sorted((r for r in rows if r.get("gpus") is not None and not r.get("idle")), key=rank_key)
    winner = ranked[0]["id"] if ranked else None
    runner = ranked[1]["id"] if len(ranked) > 1 else None
    closest = None
    if winner is None:
        ran = [r for r in rows if r.get("outcome") and not r["outcome"].get("error") and row_margin(r) is not None]
        closest = max(ran, key=lambda r: row_margin(r) or 0.0)["id"] if ran else None
    probe_result = None
    if winner is not None and opts.with_robustness:
        row = ranked[0]
        layout = next(la for la in chosen if la.name == row["layout"]["profile"])
        held = data if row.get("max_batch_size", own) == own else with_fields(data, {"batching.max_batch_size":
                                                                            row["max_batch_size"]})
        decided = (row.get("verdict") or {}).get("requests_per_replication")
        probe_result = robustness(held, source, layout.profile, row["candidate"]["name"], int(row["replicas"]), qps,
                                  seed, reps, cache, executor, rule, decided)
    where = next((la for la in chosen if ranked and la.name == ranked[0]["layout"]["profile"]), chosen[0])
    return Recommendation(data.get("name", "scenario"), qps, sla, chosen, tuple(rows), winner, runner, closest,
                          probe_result, section_sources(where.profile), rule, allow_lossy,
                          tuple(dict.fromkeys(excluded)), batch_search)


def scenario_qps(data: dict[str, Any]) -> float | None:
    """The scenario's own request rate (``workload.arrival.rate_per_s``), None when it states a load fraction."""
    refuse_closed_loop(data)
    rate = (data.get("workload") or {}).get("arrival", {}).get("rate_per_s")
    return None if rate is None else float(rate)
