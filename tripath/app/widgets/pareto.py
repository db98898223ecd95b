"""Cost (or GPUs) against P99 for every candidate of a recommendation, the recommended one marked.

Points come from ``Recommendation.to_dict()`` (tripath/planning/recommend.py): a candidate that meets the SLA
sits at its sized replica count; one that misses sits at the largest count searched (drawn hollow), where its
P99 is what the search saw. The Pareto front is the points no other point beats on both axes.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from tripath.planning.recommend_text import shape  # noqa: E402

AXES = {"cost": "cost (USD per hour)", "gpus": "GPUs"}
TERM_UNITS = {"ttft": ("TTFT P99 (s)", 1e-3), "tpot": ("TPOT P99 (ms)", 1.0), "e2e": ("end-to-end P99 (s)", 1e-3)}


def summaries(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every candidate that ran: recommended, runner-up, closest, then the others."""
    firsts = [result.get(k) for k in ("recommended", "runner_up", "closest")]
    return [s for s in firsts if s is not None] + list(result.get("others") or [])


def points(result: dict[str, Any], term: str, y: str) -> list[dict[str, Any]]:
    """Per row with a P99 for ``term``: x = P99 in the term's unit, y = USD/h (at its GPU type's price) or GPUs,
    whether it meets. A row that misses sits at the largest replica count searched."""
    _label, scale = TERM_UNITS[term]
    best = (result.get("recommended") or {}).get("id")
    out = []
    for s in summaries(result):
        given = s["terms"].get(term)
        if given is None or given["p99_ms"] is None:
            continue
        meets = s["gpus"] is not None
        replicas = s["replicas"] if meets else s["searched_replicas"]
        if replicas is None or s["gpus_per_replica"] is None:
            continue
        gpus = int(replicas) * int(s["gpus_per_replica"])
        price = (s.get("layout") or {}).get("usd_per_gpu_hour")
        if y == "cost" and price is None:
            continue
        value = gpus * price if y == "cost" else gpus
        layout = s.get("layout") or {}
        name = s["candidate"] if not layout else f"{s['candidate']} ({shape(layout)})"
        out.append({"candidate": name, "x": given["p99_ms"] * scale, "y": float(value), "gpus": gpus,
                    "meets": meets, "recommended": best is not None and s.get("id") == best})
    return out


def front(pts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points no other point beats on both axes (lower or equal on both, lower on one), by x."""
    def beaten(p: dict[str, Any]) -> bool:
        return any(q["x"] <= p["x"] and q["y"] <= p["y"] and (q["x"] < p["x"] or q["y"] < p["y"]) for q in pts)
    return sorted((p for p in pts if not beaten(p)), key=lambda p: (p["x"], p["y"]))


def figure(pts: list[dict[str, Any]], term: str, y: str, target_ms: float | None, provenance: str) -> Figure:
    """The scatter, its Pareto front, the SLA target, the recommended candidate as a star; names beside points
    (candidates at the same point share one label)."""
    label, scale = TERM_UNITS[term]
    unit = label[label.rindex("(") + 1:-1]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    met = [p for p in pts if p["meets"]]
    missed = [p for p in pts if not p["meets"]]
    if met:
        ax.scatter([p["x"] for p in met], [p["y"] for p in met], color="tab:blue", s=36, zorder=3,
                   label="meets the SLA (at its sized replicas)")
    if missed:
        ax.scatter([p["x"] for p in missed], [p["y"] for p in missed], facecolors="none", edgecolors="tab:red",
                   s=36, zorder=3, label="misses (at the largest replica count searched)")
    best = [p for p in pts if p["recommended"]]
    if best:
        ax.scatter([best[0]["x"]], [best[0]["y"]], marker="*", s=320, color="gold", edgecolors="k", zorder=4,
                   label=f"recommended: {best[0]['candidate']}")
    edge = front(pts)
    if len(edge) > 1:
        ax.step([p["x"] for p in edge], [p["y"] for p in edge], where="post", color="grey", lw=1, ls="-",
                zorder=2, label="Pareto front")
    if target_ms is not None:
        ax.axvline(target_ms * scale, color="k", ls="--", lw=1, label=f"SLA target {target_ms * scale:g} {unit}")
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for p in pts:  # points that look the same at the plot's resolution share one label
        groups.setdefault((f"{p['x']:.3g}", p["y"]), []).append(p)
    for i, group in enumerate(sorted(groups.values(), key=lambda g: (g[0]["y"], g[0]["x"]))):
        names = [p["candidate"] for p in group]
        text = names[0] if len(names) == 1 else f"{names[0]} +{len(names) - 1} more"
        ax.annotate(text, (group[0]["x"], group[0]["y"]), textcoords="offset points",
                    xytext=(6, 6 if i % 2 == 0 else -12), fontsize=7)  # alternate above / below: less overlap
    ax.set_xlabel(label)
    ax.set_ylabel(AXES[y])
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper right")
    ax.margins(x=0.25, y=0.2)
    ax.set_title(f"{AXES[y]} against {label} per candidate\n{provenance}", fontsize=9)
    fig.tight_layout()
    return fig
