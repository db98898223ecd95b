"""Stacking validation (the second seed's method): add optimizations one at a time, in each order that matters.

Each subset of the applicable paths is simulated once (a result depends on the set, not on the
order it was built in), with the same seed, so for every order the marginal effect of each step
is a difference of two simulations on common random numbers. For a metric (a P99 term, ms):

    gain(X | S) = P99(S) - P99(S + X)          (positive: X helps when added to S)
    coupling(X, Y) = gain(X | {Y}) - gain(X | {})

Negative coupling is flagged when coupling(X, Y) < -noise: X helps less (or hurts) once Y is on,
e.g. compression lowering acceptance until speculation stops paying ("stops paying" when X helps
alone but not after Y). noise = 1% of the baseline's P99 plus the four 95% half-widths when there
are >= 2 replications. A set that rejects more than 1% of requests is infeasible (P99 = inf):
adding X to it "enables" a feasible run, the reverse "breaks" it.

Orders shown: only those that matter. Two orders that differ only in where two non-interacting
paths sit give each path the same relative gain, so one order per class of orders that agree
on every interacting pair (INTERACTIONS, plus any pair measured to interact) is reported. With
all four paths (on 2+ GPUs) that is 12 of the 24 orders; with speculation, tiering and
compression on one GPU every pair interacts and all 6 are shown.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from tripath.core.metrics import TERMS
from tripath.planning.cache import ResultCache
from tripath.planning.candidates import BASELINE, PATH_ORDER, SP_DEGREE, Candidate, Sizing, size_to_profile
from tripath.planning.executor import Executor
from tripath.planning.scenario_dict import with_fields
from tripath.planning.sweep import MAX_REJECTED, Outcome, make_job, run_sweep
from tripath.profile.profile import Profile

NOISE_FRACTION = 0.01

# The pairs whose order matters: each changes what the other does, not only how much time there
# is to save. Orders that differ only in the relative place of two paths not listed here give
# each path the same relative gain, so one order per class is simulated-and-shown (see below).
INTERACTIONS: dict[frozenset[str], str] = {
    frozenset({"speculative", "compression"}): "acceptance: compressed KV lowers the draft/target agreement",
    frozenset({"tiered", "compression"}): "bytes: compression shrinks the KV that is paged, and what fits",
    frozenset({"sequence_parallel", "tiered"}): "cross-rank paging: each rank pages its own share of the KV",
    frozenset({"speculative", "tiered"}): "paging is paid per iteration and a speculative round emits E(a) "
                                          "tokens per iteration, so speculation amortises it",
    frozenset({"prefix_cache", "tiered"}): "capacity and loads: the tiers keep evicted prefix blocks, a hit loads "
                                           "them back (or recomputes them when cheaper)",
    frozenset({"prefix_cache", "compression"}): "bytes: compressed KV holds more cached prefix blocks in the same "
                                                "budget",
    frozenset({"prefix_cache", "speculative"}): "phases: prefix hits cut prefill, speculation cuts decode, so each "
                                                "shrinks the share of time the other can save",
}
NON_INTERACTION = ("speculation, sequence parallelism and compression act as factors on the step cost "
                   "(fewer target steps per token; per-rank work; KV bytes read), so the relative gain of "
                   "one does not depend on the others: their order changes the ms credited to each step, "
                   "not the verdict. A pair not declared here whose measured relative coupling exceeds the "
                   "noise is treated as interacting anyway (listed as measured).")


def _relative_coupling(b0: float, bx: float, by: float, bxy: float) -> float:
    """ln of X's speedup after Y minus ln of X's speedup alone (0 when the factors multiply)."""
    return math.log(by / bxy) - math.log(b0 / bx)


def order_classes(paths: tuple[str, ...], interacting: set[frozenset[str]]) -> list[tuple[str, ...]]:
    """One order per class: orders are equivalent when every interacting pair is in the same relative order."""
    kept: dict[tuple[bool, ...], tuple[str, ...]] = {}
    pairs = [tuple(sorted(p, key=PATH_ORDER.index)) for p in interacting if p <= set(paths)]
    pairs.sort(key=lambda p: (PATH_ORDER.index(p[0]), PATH_ORDER.index(p[1])))
    for order in itertools.permutations(paths):
        key = tuple(order.index(a) < order.index(b) for a, b in pairs)
        kept.setdefault(key, order)
    return list(kept.values())


def _single_paths(profile: Profile, compression_mode: str | None) -> dict[str, dict[str, Any]]:
    return {"speculative": {}, "tiered": {}, "sequence_parallel": {"degree": SP_DEGREE},
            "compression": {"mode": compression_mode or (sorted(profile.compression) or ["int8"])[0]},
            "prefix_cache": {}}


def path_tables(profile: Profile, data: dict[str, Any], compression_mode: str | None = None
                ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(the applicable paths' strategy tables, why each other path is not applicable)."""
    tables = _single_paths(profile, compression_mode)
    ok, skipped = {}, {}
    for path in PATH_ORDER:
        reason = Candidate(path, {path: tables[path]}).applicability(profile, data)
        if reason is None:
            ok[path] = tables[path]
        else:
            skipped[path] = reason
    return ok, skipped


def _value(outcome: Outcome, term: str) -> tuple[float, float]:
    """(P99 ms or inf when infeasible, 95% half-width or 0)."""
    if outcome.error or outcome.data["rejected_share"] > MAX_REJECTED:
        return math.inf, 0.0
    p = outcome.data["p99_ms"][term]
    if p["mean"] is None:
        return math.inf, 0.0
    half = 0.0 if p["ci_high"] is None else (p["ci_high"] - p["mean"])
    return p["mean"], half


def _gain(before: float, after: float) -> tuple[float | None, str]:
    if math.isinf(before) and math.isinf(after):
        return None, "infeasible"
    if math.isinf(before):
        return None, "enables"
    if math.isinf(after):
        return None, "breaks"
    return before - after, "gain" if before > after else "loss"


@dataclass(frozen=True)
class Stack:
    scenario: str
    profile_key: str
    profile_source: str
    paths: tuple[str, ...]
    not_applicable: dict[str, str]
    subsets: dict[str, dict[str, Any]]  # "+".join(sorted subset) or "baseline" -> outcome summary
    orders: tuple[dict[str, Any], ...]
    couplings: tuple[dict[str, Any], ...]
    order_reduction: dict[str, Any] | None = None
    sizing: Sizing | None = None  # set when the scenario's GPUs could not hold one replica of the profile

    @property
    def negative_couplings(self) -> list[dict[str, Any]]:
        return [c for c in self.couplings if c["negative"]]

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "profile": {"key": self.profile_key, "source": self.profile_source},
                "numbers_from": f"simulated on a '{self.profile_source}' profile ({self.profile_key})",
                "paths": list(self.paths), "not_applicable": self.not_applicable, "subsets": self.subsets,
                "orders": list(self.orders), "order_reduction": self.order_reduction,
                "couplings": list(self.couplings),
                "negative_couplings": self.negative_couplings,
                **({} if self.sizing is None else {"sized": self.sizing.to_dict()})}


def _label(subset: tuple[str, ...]) -> str:
    return "+".join(p for p in PATH_ORDER if p in subset) or "baseline"


def stack(data: dict[str, Any], source: str | None, profile: Profile, seed: int = 0, replications: int = 2,
          compression_mode: str | None = None, executor: Executor | None = None,
          cache: ResultCache | None = None, metric: str | None = None) -> Stack:
    """Every subset of the applicable paths, the orders that matter, and pairwise couplings.

    ``metric``: the P99 term the orders are shown for; an undeclared pair is kept as interacting
    when it measurably interacts on that term (on any term when None). Couplings cover every term. A
    scenario whose GPUs cannot hold one replica of the profile is sized to it (candidates.size_to_profile)."""
    every = [BASELINE, *(Candidate(p, {p: t}) for p, t in _single_paths(profile, compression_mode).items())]
    sizing = size_to_profile(profile, data, every)
    if sizing is not None:
        data = with_fields(data, {"cluster.gpus": sizing.gpus})
    tables, skipped = path_tables(profile, data, compression_mode)
    paths = tuple(tables)
    subsets = [tuple(s) for r in range(len(paths) + 1) for s in itertools.combinations(paths, r)]
    jobs = [make_job(Candidate(_label(s), {p: tables[p] for p in s}).apply(data), source, profile, seed,
                     replications) for s in subsets]
    outcomes = dict(zip((_label(s) for s in subsets), run_sweep(jobs, executor, cache, desc="stacking"),
                        strict=True))
    summaries = {}
    for label, o in outcomes.items():
        summaries[label] = ({"error": o.error} if o.error else
                            {"p99_ms": {t: o.data["p99_ms"][t]["mean"] for t in TERMS},
                             "rejected_share": o.data["rejected_share"], "meets_sla": o.data["meets_sla"]})
    base = {t: _value(outcomes["baseline"], t) for t in TERMS}
    interacting = {pair for pair in INTERACTIONS if pair <= set(paths)}
    measured = []
    for x, y in itertools.combinations(paths, 2):
        pair = frozenset({x, y})
        if pair in interacting:
            continue
        for term in (TERMS if metric is None else (metric,)):  # a measured interaction keeps its orders
            vals = [_value(outcomes[_label(s)], term) for s in ((), (x,), (y,), (x, y))]
            if any(math.isinf(v) or v <= 0 for v, _ in vals):
                continue
            rel = _relative_coupling(*(v for v, _ in vals))
            noise = NOISE_FRACTION + sum(h for _, h in vals) / vals[0][0]
            if abs(rel) > noise:
                interacting.add(pair)
                measured.append({"pair": sorted(pair, key=PATH_ORDER.index), "term": term,
                                 "relative_coupling": rel, "noise": noise})
                break
    kept = order_classes(paths, interacting)
    orders = []
    for order in kept:
        steps, prefix = [], ()
        for path in order:
            after = tuple(sorted(prefix + (path,), key=PATH_ORDER.index))
            step: dict[str, Any] = {"add": path, "to": _label(prefix)}
            for term in TERMS:
                before_ms = _value(outcomes[_label(prefix)], term)[0]
                gain, effect = _gain(before_ms, _value(outcomes[_label(after)], term)[0])
                step[f"{term}_gain_ms"] = gain
                step[f"{term}_effect"] = effect
            steps.append(step)
            prefix = after
        orders.append({"order": list(order), "steps": steps})
    couplings = []
    for x, y in itertools.permutations(paths, 2):
        both = _label((x, y))
        for term in TERMS:
            b0, h0 = base[term]
            bx, hx = _value(outcomes[_label((x,))], term)
            by, hy = _value(outcomes[_label((y,))], term)
            bxy, hxy = _value(outcomes[both], term)
            alone, alone_effect = _gain(b0, bx)
            after, after_effect = _gain(by, bxy)
            row: dict[str, Any] = {"path": x, "after": y, "term": term, "gain_alone_ms": alone,
                                   "gain_after_ms": after, "effect_alone": alone_effect,
                                   "effect_after": after_effect, "negative": False, "verdict": ""}
            if alone is not None and after is not None:
                noise = NOISE_FRACTION * b0 + h0 + hx + hy + hxy
                row["coupling_ms"] = after - alone
                row["noise_ms"] = noise
                if after - alone < -noise:
                    row["negative"] = True
                    row["verdict"] = (f"{x} stops paying after {y}" if alone > noise and after <= 0
                                      else f"{x} gains less after {y}")
            elif alone_effect == "gain" and after_effect == "breaks":
                row["negative"] = True
                row["verdict"] = f"{x} helps alone but breaks the run after {y}"
            couplings.append(row)
    reduction = {"interacting": [{"pair": sorted(p, key=PATH_ORDER.index),
                                  "why": INTERACTIONS.get(p, "measured: relative coupling above noise")}
                                 for p in sorted(interacting, key=lambda p: sorted(PATH_ORDER.index(q) for q in p))],
                 "measured": measured, "orders_total": math.factorial(len(paths)), "orders_shown": len(kept),
                 "omitted_because": NON_INTERACTION}
    return Stack(data.get("name", "scenario"), profile.key_str(), profile.source, paths, skipped, summaries,
                 tuple(orders), tuple(couplings), reduction, sizing)
