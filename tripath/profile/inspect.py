"""What `tripath profile show` and `compare` print: coefficients, domains, fit errors and sources.

``describe`` / ``compare`` return plain dicts (the --json output); ``format_*`` render them as
text. A projected or seed profile is labelled as such at the top and on every number.
"""

from __future__ import annotations

from typing import Any

from tripath.profile.profile import CostModel, Profile

SOURCE_LABELS = {
    "measured": "MEASURED on the named hardware by tripath calibrate",
    "fitted": "FITTED to samples",
    "published": "PUBLISHED: third-party measurements and vendor specifications, not measured by tripath",
    "projected": "PROJECTED: scaled from another profile by roofline ratios, NOT measured on this hardware",
    "seed": "SEED: numbers transcribed from a document, not measured",
}
# Points at which compare evaluates both profiles, to show what the coefficients mean together.
PROBES = {"prefill": ({"new_tokens": 512, "context_tokens": 0}, {"new_tokens": 512, "context_tokens": 2048}),
          "decode": ({"batch": 1, "total_context": 1024}, {"batch": 32, "total_context": 32768})}


def _cost(model: CostModel) -> dict[str, Any]:
    return model.to_dict()


def describe(profile: Profile) -> dict[str, Any]:
    data = profile.to_dict()
    data["label"] = SOURCE_LABELS[profile.source]
    data["key_str"] = profile.key_str()
    data["sections"] = {"speculative": profile.speculative is not None, "acceptance": sorted(profile.acceptance),
                        "paging": sorted(profile.paging), "sequence_parallel": sorted(profile.sequence_parallel),
                        "compression": sorted(profile.compression)}
    return data


def _fit_text(fit: dict[str, Any] | None) -> str:
    if fit is None:
        return "no fit (not fitted to samples here)"
    holdout = "n/a" if fit["holdout_mape"] is None else f"{fit['holdout_mape']:.1%}"
    return (f"n={fit['n_samples']}, train MAPE {fit['train_mape']:.1%}, worst {fit['max_ape']:.1%}, "
            f"holdout MAPE {holdout} — {fit['method']}; data: {fit['data']}")


def format_show(profile: Profile) -> str:
    d = describe(profile)
    hw, model, mem = d["hardware"], d["model"], d["memory"]
    lines = [f"profile {d['key_str']}", f"source: {profile.source} — {d['label']}",
             f"hardware: {hw['device_name']}, device {hw['device_memory_bytes'] / 2**30:.1f} GiB, host "
             f"{hw['host_memory_bytes'] / 2**30:.1f} GiB, ssd {hw['ssd_bytes'] / 1e12:.2f} TB"]
    for name, link in hw["links"].items():
        lines.append(f"  link {name}: {link['value']:g} {link['unit']} [{link['source']}] {link['note']}")
    lines.append(f"model: {model['name']}, {model['layers']} layers, {model['heads']} heads / {model['kv_heads']} KV "
                 f"heads x {model['head_dim']}, {model['params']:,} params, KV {model['kv_bytes_per_token']:,} "
                 f"B/token — {model['note']}")
    lines.append(f"KV budget: {mem['kv_capacity_bytes']:,} B [{mem['source']}] {mem['note']}")
    for name, cost in d["costs"].items():
        lines.append(f"costs.{name}: {cost['formula']}({', '.join(cost['inputs'])}) -> ms")
        for cname, c in cost["coefficients"].items():
            lines.append(f"  {cname} = {c['value']:.6g} {c['unit']} [{c['source']}] {c['note']}")
        table = cost.get("table")
        if table is not None:
            share = "" if table.get("measured_share") is None else f", {table['measured_share']:.1%} of its time " \
                "from measured kernel rows"
            lines.append(f"  table: {len(table['rows'])} x {len(table['columns'])} points (rows {table['rows'][0]:g}-"
                         f"{table['rows'][-1]:g}, columns {table['columns'][0]:g}-{table['columns'][-1]:g}) "
                         f"[{table['source']}]{share}; {table['note']}")
        domain = ", ".join(f"{k} in [{lo:g}, {hi:g}]" for k, (lo, hi) in cost["domain"].items())
        lines += [f"  domain: {domain}", f"  fit: {_fit_text(cost['fit'])}"]
    for link, page in d["paging"].items():
        bw = page["cost"]["coefficients"]["bandwidth_gbps"]
        setup = page["cost"]["coefficients"].get("setup_ms")
        setup_text = f", setup {setup['value']:.4g} ms [{setup['source']}]" if setup else ""
        lines.append(f"paging.{link}: {bw['value']:g} GB/s [{bw['source']}]{setup_text}, "
                     f"{page['ms_per_2k_tokens']:.4g} ms per 2K tokens of KV")
        if page.get("by_chunk_tokens"):
            lines.append("  per chunk size: " + "; ".join(
                f"{c} tokens/page {m['coefficients']['bandwidth_gbps']['value']:.3g} GB/s, setup "
                f"{m['coefficients']['setup_ms']['value']:.3g} ms" for c, m in page["by_chunk_tokens"].items()))
    if d["speculative"] is not None:
        spec = d["speculative"]
        lines.append(f"speculative: draft {spec['draft_model']}, K={spec['k']}, c={spec['cost_ratio']['value']:g} "
                     f"[{spec['cost_ratio']['source']}], v(K)={spec['verify_cost_ratio']['value']:g} "
                     f"[{spec['verify_cost_ratio']['source']}] (target steps)")
        if spec.get("verify_by_k"):
            lines.append("  v(K) per K: " + ", ".join(f"{k}: {c['value']:.3g}" for k, c in spec["verify_by_k"].items())
                         + f" [{next(iter(spec['verify_by_k'].values()))['source']}]")
    for task, acc in d["acceptance"].items():
        per = acc.get("per_position")
        per_text = f", per position {', '.join(f'{p:.3g}' for p in per)}" if per else ""
        lines.append(f"acceptance.{task}: {acc['mean']:g} at K={acc['k']} [{acc['source']}]{per_text}")
        if acc.get("by_k"):
            lines.append("  a per K: " + ", ".join(f"{k}: {e['mean']:.3g}" for k, e in acc["by_k"].items()))
    for degree, sp in d["sequence_parallel"].items():
        lines.append(f"sequence_parallel.{degree}: {len(sp['rows'])} rows, merge "
                     f"{'model' if sp['merge'] else 'none'} [{sp['source']}]" + "".join(
                         f"; {r['context_tokens']} tokens: {r['speedup']:.3g}x, merge {r['merge_ms']:.3g} ms"
                         for r in sp["rows"]))
    absent = [k for k, v in d["sections"].items() if not v]
    if absent:
        lines.append(f"absent sections: {', '.join(absent)}")
    prov = d["provenance"]
    lines.append(f"provenance: {prov['command']} | commit {prov['engine_commit']} | torch {prov['torch_version']} | "
                 f"cuda {prov['cuda_version']} | {prov['device_name']} | {prov['created_utc']}")
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)


def compare(a: Profile, b: Profile) -> dict[str, Any]:
    """Coefficients, fit errors and example costs of two profiles side by side (ratio = B / A)."""
    out: dict[str, Any] = {"a": {"key": a.key_str(), "source": a.source, "label": SOURCE_LABELS[a.source]},
                           "b": {"key": b.key_str(), "source": b.source, "label": SOURCE_LABELS[b.source]},
                           "costs": {}}
    for name in sorted(set(a.costs) | set(b.costs)):
        ca, cb = a.costs.get(name), b.costs.get(name)
        entry: dict[str, Any] = {"formula": [c.formula if c else None for c in (ca, cb)], "coefficients": {},
                                 "fit": [c.fit.to_dict() if c and c.fit else None for c in (ca, cb)],
                                 "domain": [c.to_dict()["domain"] if c else None for c in (ca, cb)], "examples": []}
        names = list(ca.coefficients if ca else []) + [n for n in (cb.coefficients if cb else []) if
                                                       not ca or n not in ca.coefficients]
        for cname in names:
            xa = ca.coefficients.get(cname) if ca else None
            xb = cb.coefficients.get(cname) if cb else None
            ratio = xb.value / xa.value if xa and xb and xa.value else None
            entry["coefficients"][cname] = {"a": xa.to_dict() if xa else None, "b": xb.to_dict() if xb else None,
                                            "ratio": ratio}
        if ca and cb and ca.inputs == cb.inputs:
            for point in PROBES.get(name, ()):
                va, vb = ca.evaluate(**point), cb.evaluate(**point)
                entry["examples"].append({"inputs": point, "a_ms": va, "b_ms": vb, "ratio": vb / va if va else None,
                                          "in_domain": [ca.in_domain(**point), cb.in_domain(**point)]})
        out["costs"][name] = entry
    return out


def format_compare(a: Profile, b: Profile) -> str:
    d = compare(a, b)
    lines = [f"A: {d['a']['key']} — {d['a']['label']}", f"B: {d['b']['key']} — {d['b']['label']}"]
    for name, entry in d["costs"].items():
        lines.append(f"costs.{name}: {entry['formula'][0]} vs {entry['formula'][1]}")
        for cname, c in entry["coefficients"].items():
            sa = f"{c['a']['value']:.6g} [{c['a']['source']}]" if c["a"] else "-"
            sb = f"{c['b']['value']:.6g} [{c['b']['source']}]" if c["b"] else "-"
            ratio = f"x{c['ratio']:.3g}" if c["ratio"] is not None else ""
            lines.append(f"  {cname:8s} A {sa:28s} B {sb:28s} {ratio}")
        for label, fit in zip("AB", entry["fit"], strict=True):
            lines.append(f"  fit {label}: {_fit_text(fit)}")
        for ex in entry["examples"]:
            where = ", ".join(f"{k}={v}" for k, v in ex["inputs"].items())
            flags = "" if all(ex["in_domain"]) else "  (outside a measured domain: extrapolated)"
            ratio = f"x{ex['ratio']:.3g}" if ex["ratio"] else ""
            lines.append(f"  at {where}: A {ex['a_ms']:.4g} ms, B {ex['b_ms']:.4g} ms {ratio}{flags}")
    return "\n".join(lines)
