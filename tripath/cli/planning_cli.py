"""`tripath recommend | matrix | plan | whatif | stack | breakeven`: commands over tripath/planning/ (parser:
planning_parser.py).

Every command prints where its numbers come from (simulated on a <source> profile, or computed
from the profile's costs), takes --json, and shows a progress bar on stderr while it simulates.
Sweeps run on a local process pool (every core) or, with --executor ray [--address A], on Ray;
results are cached under --cache-dir (default .tripath-cache/) unless --no-cache.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tripath.core.errors import InputError
from tripath.core.metrics import TERMS


def _runtime(args: argparse.Namespace) -> tuple[Any, Any]:
    from tripath.planning.cache import ResultCache
    from tripath.planning.executor import make_executor

    executor = make_executor(args.executor, workers=args.workers, address=args.address)
    return executor, (None if args.no_cache else ResultCache(args.cache_dir))


def _profile(name: str | None, scenario_profile: str | None = None, source: str | None = None) -> Any:
    from tripath.profile.profile import resolve_profile

    name = name or scenario_profile
    if name is None:
        raise InputError(source, "profile", "no profile given: pass --profile NAME|PATH")
    return resolve_profile(name)


def _scenario(args: argparse.Namespace) -> tuple[dict[str, Any], str, Any]:
    from tripath.planning.scenario_dict import build, load_scenario_dict

    data, source = load_scenario_dict(args.scenario)
    given = getattr(args, "requests", None)
    _check_fits(given or build(data, source).workload.planned_requests, args.replications, source,
                "--requests x --replications" if given else "workload.requests x --replications")
    return data, source, _profile(args.profile, data.get("profile"), source)


def _check_fits(requests: int | None, replications: int, source: str | None, field: str) -> None:
    """One simulation's requests x --replications must fit this machine's memory: refused before any runs."""
    from tripath.core.limits import check_fits

    if requests:
        check_fits(requests * replications, source, field)


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> int:
    from tripath.simulator.summary import _json_ready

    if args.json:
        print(json.dumps(_json_ready(payload), indent=2, sort_keys=True, allow_nan=False))
    else:
        print(text)
    return 0


def _ms(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("mean")
    return "-" if value is None else f"{value:,.0f}"


def _p99s(row: dict[str, Any]) -> str:
    p99 = row.get("p99_ms") or {}
    return " / ".join(_ms(p99.get(t)) for t in TERMS)


# --- matrix -------------------------------------------------------------------------------------
def _cmd_matrix(args: argparse.Namespace) -> int:
    from tripath.planning.matrix import decision_matrix

    profile = _profile(args.profile)
    _check_fits(args.requests, args.replications, None, "--requests x --replications")
    executor, cache = _runtime(args)
    result = decision_matrix(profile, seed=args.seed, replications=args.replications, executor=executor,
                             cache=cache, requests=args.requests).to_dict()
    lines = [f"Decision matrix: {result['numbers_from']}", ""]
    for cell in result["cells"]:
        lines.append(f"{cell['scenario']} ({cell['gpus']} GPU, {cell['rate_per_s']:.4g} req/s, SLA P99 ms "
                     f"ttft/tpot/e2e {' / '.join(_ms(v) for v in cell['sla_ms'].values())})")
        if "sized" in cell:
            lines.append(f"  {cell['sized']['note']}")
        lines.append(f"  recommended: {cell['recommended'] or 'none meets the SLA'}; runner-up: "
                     f"{cell['runner_up'] or '-'}; best single path: {cell['best_single_path'] or '-'}")
        attribution = cell["attribution"] or {}
        chosen = cell["chosen"] or "-"
        lines.append(f"  {'of the recommended' if cell['chosen_meets_sla'] else 'closest (misses the SLA)'} {chosen}: "
                     f"primary path: {attribution.get('primary_path', '-')}; needed for memory: "
                     f"{', '.join(attribution.get('needed_for_memory', [])) or '-'}")
        lines.append(f"  seed: {cell['seed_recommends']} (a {cell['seed_claim']} claim, compared with "
                     f"{cell['seed_compared_with'] or '-'}: {cell['seed_match'] or '-'})")
        lines.extend(f"  why: {note}" for note in cell["why"])
        if cell["why_not_seed"]:
            lines.append(f"  why not the seed's: {cell['why_not_seed']}")
        for row in cell["candidates"]:
            if "not_applicable" in row:
                lines.append(f"    {row['candidate']:<34} not applicable: {row['not_applicable']}")
                continue
            margin = row.get("sla_margin")
            lines.append(f"    {row['candidate']:<34} {'MEETS' if row['meets_sla'] else 'misses':<6} "
                         f"P99 {_p99s(row):<28} margin {'-' if margin is None else f'{margin:+.0%}':>7} "
                         f"GPUs {row['gpus']} rejected {row['rejected_share']:.0%} "
                         f"peak KV {row['peak_kv_bytes'] / 2**30:.1f} GiB")
            if "remark" in row:
                lines.append(f"    {'':<34} {row['remark']}")
        lines.append("")
    return _emit(args, result, "\n".join(lines))


# --- plan ---------------------------------------------------------------------------------------
def _cmd_plan(args: argparse.Namespace) -> int:
    from tripath.planning.capacity import PlanRow, plan
    from tripath.planning.scenario_dict import with_requests

    data, source, profile = _scenario(args)
    if args.requests is not None:
        data = with_requests(data, args.requests)
    executor, cache = _runtime(args)
    sla = {"ttft": args.sla_ttft_ms, "tpot": args.sla_tpot_ms, "e2e": args.sla_e2e_ms}
    try:
        result = plan(data, source, profile, args.qps, sla, args.gpu_price, args.candidates, args.seed,
                      args.replications, args.max_replicas, executor, cache).to_dict()
    except ValueError as err:
        if isinstance(err, InputError):
            raise
        raise InputError(source, "sla" if "SLA" in str(err) else "candidates", str(err)) from None
    lines = [f"Capacity plan for {result['scenario']} at {args.qps:g} req/s: {result['numbers_from']}",
             f"SLA P99 ms ttft/tpot/e2e: {' / '.join(_ms(v) for v in result['sla_ms'].values())}",
             result["sizing"], ""]
    for row in map(PlanRow.of_row, result["candidates"]):
        lines.append(f"  {row.line()}")
        if row.remark:
            lines.append(f"  {'':<34} {row.remark}")
    lines += ["", f"recommended: {result['recommended'] or 'none meets the SLA'}"]
    return _emit(args, result, "\n".join(lines))


# --- whatif -------------------------------------------------------------------------------------
def _cmd_whatif(args: argparse.Namespace) -> int:
    from tripath.planning.whatif import load_step, parse_vary, whatif

    data, source, profile = _scenario(args)
    executor, cache = _runtime(args)
    if args.load_step:
        factor_f, at_f = args.load_step  # bounded by its argparse type (tripath/cli/arg_types.py load_step)
        result = load_step(data, source, profile, factor_f, at_f, args.window_s, args.seed, args.replications,
                           executor, cache).to_dict()
        lines = [f"Load step x{factor_f:g} at {at_f:g} s on {result['scenario']}: {result['numbers_from']}", ""]
        for label, series in result["series"].items():
            lines.append(f"{label} (policy {series['policy']}):")
            if "error" in series:
                lines.append(f"  the simulator refused it: {series['error']}")
                continue
            for w in series["windows"]:
                lines.append(f"  {w['start_s']:>8.0f}-{w['end_s']:<8.0f} s  arrived {w['arrived']:>5}  P99 ms "
                             f"ttft/tpot/e2e {_ms(w['ttft_p99_ms'])} / {_ms(w['tpot_p99_ms'])} / "
                             f"{_ms(w['e2e_p99_ms'])}")
        return _emit(args, result, "\n".join(lines))
    if not args.vary:
        raise InputError(None, "--vary", "give at least one --vary FIELD=V1,V2,... (or --load-step FACTOR@SECONDS)")
    try:
        vary = [parse_vary(v) for v in args.vary]
    except ValueError as err:
        raise InputError(None, "--vary", str(err)) from None
    result = whatif(data, source, profile, vary, args.seed, args.replications, executor, cache).to_dict()
    lines = [f"What-if on {result['scenario']}: {result['numbers_from']}", ""]
    for point in result["points"]:
        setting = ", ".join(f"{k}={v}" for k, v in point["settings"].items())
        if "error" in point:
            lines.append(f"  {setting}: {point['error']}")
            continue
        ci = " ".join(f"{t} {_ms(v)} [{_ms(v.get('ci_low'))}, {_ms(v.get('ci_high'))}]"
                      for t, v in point["p99_ms"].items())
        lines.append(f"  {setting}: P99 ms {ci}; SLA {'met' if point['meets_sla'] else 'missed'}")
    return _emit(args, result, "\n".join(lines))


# --- stack --------------------------------------------------------------------------------------
def _cmd_stack(args: argparse.Namespace) -> int:
    from tripath.planning.stack import stack

    data, source, profile = _scenario(args)
    executor, cache = _runtime(args)
    result = stack(data, source, profile, args.seed, args.replications, args.compression_mode, executor,
                   cache, metric=args.metric).to_dict()
    lines = [f"Stacking on {result['scenario']}: {result['numbers_from']}",
             *([result["sized"]["note"]] if "sized" in result else []),
             f"paths: {', '.join(result['paths']) or 'none'}"]
    lines += [f"  {p}: not applicable: {why}" for p, why in result["not_applicable"].items()]
    lines.append("P99 ms ttft / tpot / e2e per set:")
    for label, s in result["subsets"].items():
        lines.append(f"  {label:<40} {s.get('error') or _p99s(s)}"
                     + ("" if "error" in s else f"  rejected {s['rejected_share']:.0%}"))
    reduction = result["order_reduction"] or {}
    if reduction:
        lines.append(f"orders: {reduction['orders_shown']} of {reduction['orders_total']} shown, one per order "
                     f"of the interacting pairs:")
        lines += [f"  {' x '.join(r['pair'])}: {r['why']}" for r in reduction["interacting"]]
        if reduction["orders_shown"] < reduction["orders_total"]:
            lines.append(f"  others omitted: {reduction['omitted_because']}")
    lines.append(f"marginal {args.metric} P99 gain per step (ms, + = faster):")
    for order in result["orders"]:
        steps = " -> ".join(f"+{s['add']} ({_gain(s, args.metric)})" for s in order["steps"])
        lines.append(f"  {steps}")
    flagged = result["negative_couplings"]
    lines.append("negative coupling: " + ("none above noise" if not flagged else ""))
    if not flagged:  # the largest interaction anyway, with the noise it did not clear
        rows = [c for c in result["couplings"] if c.get("coupling_ms") is not None and c["term"] == args.metric]
        if rows:
            worst = min(rows, key=lambda c: c["coupling_ms"])
            lines.append(f"  (largest: {worst['path']} after {worst['after']}: {worst['coupling_ms']:+,.0f} ms "
                         f"vs noise {worst['noise_ms']:,.0f} ms; more --replications narrow the noise)")
    lines += [f"  [{c['term']}] {c['verdict']}: alone {_ms(c['gain_alone_ms'])} ms, after {c['after']} "
              f"{_ms(c['gain_after_ms'])} ms" for c in flagged]
    return _emit(args, result, "\n".join(lines))


def _gain(step: dict[str, Any], term: str) -> str:
    gain = step[f"{term}_gain_ms"]
    return step[f"{term}_effect"] if gain is None else f"{gain:+,.0f}"


# --- breakeven ----------------------------------------------------------------------------------
def _cmd_breakeven(args: argparse.Namespace) -> int:
    from tripath.planning.breakeven import breakeven

    profile = _profile(args.profile)
    try:
        result = breakeven(profile, ks=args.k, batches=args.batch, context_tokens=args.context_tokens).to_dict()
    except ValueError as err:
        raise InputError(None, "speculative", str(err)) from None
    lines = [f"Break-even acceptance: {result['numbers_from']}",
             f"(per-sequence context {result['context_tokens']:g} tokens; profile c = "
             f"{result['profile_cost_ratio']:.4g})", ""]
    ratios = sorted({r["cost_ratio"] for r in result["rows"]})
    lines.append("   K  batch  v_eff   " + "  ".join(f"c={c:<6.3g}" for c in ratios))
    rows = result["rows"]
    for k in dict.fromkeys(r["k"] for r in rows):
        for b in dict.fromkeys(r["batch"] for r in rows):
            cells = [r for r in rows if r["k"] == k and r["batch"] == b]
            values = "  ".join(f"{_ms3(r['breakeven_acceptance']):<8}" for r in cells)
            lines.append(f"  {k:>2}  {b:>5}  {cells[0]['verify_ratio_effective']:.3f}   {values}")
    lines += ["", "per task (profile K, batch 1):"]
    for task, t in result["tasks"].items():
        lines.append(f"  {task:<14} acceptance {t['acceptance']:.3f} vs break-even {_ms3(t['breakeven'])}: "
                     f"{'pays' if t['pays'] else 'does not pay'} (latency x{t['latency_ratio']:.3f})")
    lines += ["", "the seeds' claims:"]
    for claim in result["seed_claims"]:
        near = ", ".join(f"K={h['k']} c={h['c']:.3g} ({h['breakeven']:.3f})" for h in claim["holds_at_batch1_for"])
        lines.append(f"  {claim['claim']}: for this profile "
                     f"{'holds' if claim['holds_for_profile'] else 'does not hold'} "
                     f"(break-even {_ms3(claim['profile_breakeven_at_profile_k_batch1'])}); "
                     f"within 0.05 of {claim['acceptance']:.0%} at batch 1 for: {near or 'none'}")
    return _emit(args, result, "\n".join(lines))


def _ms3(value: float | None) -> str:
    return "never" if value is None else f"{value:.3f}"


# --- recommend ----------------------------------------------------------------------------------
DEFAULT_SCENARIO = "default"


def _cmd_recommend(args: argparse.Namespace) -> int:
    from tripath.core.atomic import check_dir_target
    from tripath.planning import recommend_text as render
    from tripath.planning.decision import DecisionRule
    from tripath.planning.export.files import recommended_sglang, recommended_suggestion, write_export
    from tripath.planning.prices import load_prices
    from tripath.planning.recommend import SearchOptions, recommend, scenario_qps
    from tripath.planning.scenario_dict import with_fields, with_rate, with_requests
    from tripath.profile.catalog import layouts
    from tripath.profile.profile import resolve_profile
    from tripath.simulator.summary import _json_ready

    if args.export is not None:
        check_dir_target(args.export, args.replace, "--export")  # before the search, not after it
    if args.scenario is None:
        args.scenario = DEFAULT_SCENARIO
    data, source, profile = _scenario(args)
    if args.requests is not None:
        data = with_requests(data, args.requests)
    qps = args.qps if args.qps is not None else scenario_qps(data)
    if qps is None:
        raise InputError(source, "workload.arrival.rate_per_s",
                         "no request rate: give the scenario a rate_per_s or pass --qps")
    if not (data.get("sla") or {}):
        raise InputError(source, "sla", "no SLA term: give the scenario an [sla] table")
    if args.replications < 2:
        raise InputError(None, "--replications", "a verdict's interval needs >= 2 replications")
    name = str(args.profile or data.get("profile"))
    family = layouts(name)
    names: list[Any] = [name] if args.only_profile else list(family)
    if args.gpus:
        names = [n for n in names if (resolve_profile(n) if isinstance(n, str) else n).key.hardware in args.gpus]
        if not names:
            raise InputError(None, "--gpus", f"no shipped profile of this model on {', '.join(args.gpus)}")
    prices = load_prices(args.gpu_prices).with_overrides(args.gpu_price)
    executor, cache = _runtime(args)
    _check_fits(args.budget_requests, args.replications, None, "--budget-requests x --replications")
    rule = DecisionRule(args.replications, args.budget_requests)
    try:
        options = SearchOptions(seed=args.seed, rule=rule, max_replicas=args.max_replicas,
                                with_robustness=not args.no_robustness, allow_lossy=args.allow_lossy,
                                candidate_names=args.candidates, batch_sizes=args.batch_sizes)
        rec = recommend(data, source, names, qps, prices, options, executor, cache)
    except ValueError as err:
        if isinstance(err, InputError):
            raise
        raise InputError(source, "sla", str(err)) from None
    result = rec.to_dict()
    suggestion = recommended_suggestion(result, profile, data)
    sglang = recommended_sglang(result, profile, data)
    result["vllm"] = None if suggestion is None else suggestion.to_dict()
    result["sglang"] = None if sglang is None else sglang.to_dict()
    sla = ", ".join(f"{t.upper()} P99 <= {_ms(v)} ms" for t, v in result["sla_ms"].items() if v is not None)
    shapes = ", ".join(render.shape(la) for la in result["layouts"])
    rule_d = result["decision_rule"]
    lines = [f"Recommendation for {result['scenario']} at {qps:g} req/s ({sla})",
             f"searched: {len(result['layouts'])} layout(s): {shapes}; prices: {prices.path} "
             "(per GPU type below; --gpu-price TYPE=PRICE overrides)",
             f"verdicts: each term's P99 per replication over its steady requests (first {rule_d['warmup_share']:.0%} "
             f"of arrivals dropped), 95 % interval over {rule_d['replications']} seeded replications; meets only "
             f"when the whole interval is under the target; {rule_d['tail_minimum_requests']:,} requests per "
             f"replication first, doubled while undecided up to {rule_d['budget_requests_per_replication']:,}", ""]
    lines += render.headline_text(result, args.max_replicas)
    others = [o for o in result["others"] if not o["not_applicable"]]
    simulated = [o for o in others if not (o["pruned"] and o["searched_replicas"] is None)]
    if simulated:
        lines += ["", "the others simulated (cheapest first):"]
        for o in sorted(simulated, key=lambda o: (o["cost_usd_per_hour"] is None, o["cost_usd_per_hour"] or 0.0)):
            label = f"{o['candidate']} on {render.where(o)}"
            if o["gpus"] is not None:
                cost = "" if o["cost_usd_per_hour"] is None else f", ${o['cost_usd_per_hour']:,.2f}/h"
                idle = " (never engaged: not ranked)" if o["idle"] else ""
                lines.append(f"  {label:<44} meets on {o['gpus']} GPU(s){cost}{idle}")
            else:
                verdict = o["verdict"] or {}
                kind = "misses" if verdict.get("verdict", "misses") == "misses" else "not met with confidence"
                dearer = " (the most replicas cheaper than the cheapest baseline)" if o["pruned"] else ""
                lines.append(f"  {label:<44} {kind} at {o['searched_replicas']} replica(s){dearer}")
    pruned = [o for o in others if o["pruned"] and o["searched_replicas"] is None]
    if pruned:
        lines += ["", f"not simulated ({len(pruned)}; each reason in --json as 'pruned'):"]
        groups: dict[str, list[str]] = {}
        for o in pruned:
            why = o["pruned"]
            kind = ("its TTFT floor (the P99 prompt's prefill alone) is over the target" if "prefill alone" in why
                    else "tiering would never engage (the baseline's KV never filled the device)"
                    if "tiering would never engage" in why
                    else "one replica costs as much as the cheapest baseline or more")
            groups.setdefault(kind, []).append(f"{o['candidate']} on {render.where(o)}")
        for kind, labels in groups.items():
            lines.append(f"  {kind}: " + ", ".join(labels))
    robust = render.robustness_lines(result)
    if robust:
        lines += ["", robust[0], *("  " + line for line in robust[1:])]
    batch = render.batch_search_line(result)
    if batch is not None:
        lines += ["", batch]
    if result["excluded_lossy"]:
        lines += ["", "lossy paths not searched (they change the model's answers; --allow-lossy searches them): "
                  + ", ".join(result["excluded_lossy"])]
    skipped: dict[str, list[str]] = {}  # reason -> the candidates it rules out, on any layout
    for row_id, why in result["not_applicable"].items():
        name = row_id.split(" on ", 1)[0]
        if name not in skipped.setdefault(why, []):
            skipped[why].append(name)
    if skipped:
        lines += ["", "not applicable: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in skipped.items())]
    priced = ", ".join(f"{gpu} ${price:,.3g}" for gpu, price in result["gpu_price_usd_per_gpu_hour"].items()
                       if price is not None)
    kinds = "; ".join(f"{k}: {', '.join(v)}" for k, v in result["profile"]["section_sources"].items())
    lines += ["", f"Numbers: {result['numbers_from']}; the recommended one's sections: {kinds}.",
              f"GPU prices per GPU-hour: {priced} ({prices.path})", result["go_further"]]
    for label, command, file in (("vLLM", suggestion, "vllm.txt"), ("SGLang", sglang, "sglang.txt")):
        if command is None:
            continue
        lines += ["", f"{label} suggestion (the simulated settings as flags; a starting point, not a tested "
                  "configuration):", *("  " + line for line in command.command().splitlines())]
        lines += [f"  note: {note}" for note in getattr(command, "notes", ())]
        lines.append(f"  (where each value comes from: --export DIR writes DIR/{file})")
    if args.export is not None:
        kept = with_rate(data, qps)
        if args.profile is not None:
            kept = with_fields(kept, {"profile": args.profile})
        try:
            written = write_export(args.export, kept, _json_ready(result), suggestion, args.replace, sglang=sglang)
        except OSError as err:
            raise InputError(args.export, "--export", f"cannot write the export: {err.strerror or err}") from None
        lines += ["", "exported: " + ", ".join(str(p) for p in written)]
    return _emit(args, result, "\n".join(lines))
