"""The recommendation's sentences, written once: `tripath recommend` prints them and the app's Recommendation page
shows them (tripath/app/pages/recommendation.py), so the two cannot word the same answer differently.

Every function reads the JSON-ready dict of ``Recommendation.to_dict()`` (or one of its row summaries), which is
what the CLI's ``--json`` prints and what the app keeps in session state. ``markdown=True`` only adds emphasis
(bold labels and candidate names): ``strip_markdown`` of the markdown sentence is the plain one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tripath.core.metrics import TERMS

Summary = Mapping[str, Any]
Kind = Literal["recommended", "term", "quality", "below", "headroom", "runner_up", "none_meets", "closest"]
HEADLINES: tuple[str, ...] = ("recommended", "runner_up", "none_meets", "closest")  # a chosen row's own line
LABELS = {"recommended": "Recommended:", "runner_up": "Runner-up:", "closest": "Closest:"}


def _bold(text: str, markdown: bool) -> str:
    return f"**{text}**" if markdown else text


def strip_markdown(text: str) -> str:
    """The plain sentence of a markdown one (the renderer's markdown is only ``**bold**``)."""
    return text.replace("**", "")


def ms(value: float | None) -> str:
    """A latency in whole ms with thousands separators; "-" when there is none."""
    return "-" if value is None else f"{value:,.0f}"


def where(summary: Summary) -> str:
    """The row's GPU type and TP degree: "a100-80gb TP1"."""
    return shape(summary["layout"])


def shape(layout: dict[str, Any]) -> str:
    """A layout's GPU type and TP degree, "DPn" where a mixture-of-experts model runs attention data parallel over
    n ranks of that TP (n > 1), and "EP" where its experts are sharded by expert parallelism: "h200 TP8 EP",
    "h200 TP1 DP8 EP"."""
    dp = int(layout.get("attention_dp") or 1)
    return (f"{layout['gpu']} TP{layout['tp']}" + (f" DP{dp}" if dp > 1 else "")
            + (" EP" if layout.get("expert_parallel") else ""))


def sized(summary: Summary, markdown: bool = False) -> str:
    """A sized row in one sentence: candidate, layout, profile, max batch, replicas x GPUs, $/h, $ per million
    output tokens."""
    layout = summary["layout"]
    cost = ""
    if summary.get("cost_usd_per_hour") is not None:
        cost = f", ${summary['cost_usd_per_hour']:,.2f}/h at ${layout['usd_per_gpu_hour']:,.3g} per GPU-hour"
        if summary.get("usd_per_million_output_tokens") is not None:
            cost += f", ${summary['usd_per_million_output_tokens']:,.2f} per million output tokens"
    batch = "" if summary.get("max_batch_size") is None else f", max batch {summary['max_batch_size']}"
    return (f"{_bold(summary['candidate'], markdown)} on {where(summary)} ({layout['profile']}{batch}): "
            f"{summary['replicas']} replica(s) x {summary['gpus_per_replica']} GPU(s) = {summary['gpus']} GPU(s)"
            f"{cost}")


def interval(term: Summary) -> str:
    """The verdict's replication interval (tripath/planning/decision.py); "n/a" for an end there is none of."""
    lo, hi = term["ci_low_ms"], term["ci_high_ms"]
    if lo is None and hi is None:
        return ""
    ends = ["n/a" if v is None else f"{v:,.0f}" for v in (lo, hi)]
    return f" [95% {ends[0]} to {ends[1]}]"


def verdict(term: Summary) -> str:
    """One SLA term's verdict: the rule's ("meets", "undecided ..."), "MISSES by N%" when it is over its target."""
    said = term.get("verdict") or ("meets" if term["over_by"] is None else "misses")
    if said == "misses" and term["over_by"] is not None:
        return f"MISSES by {term['over_by']:.0%}"
    return str(said)


def term_lines(summary: Summary) -> list[str]:
    """Per given SLA term: P99, interval, target, verdict and which term binds; then rejections, remarks, idle."""
    lines = []
    terms = summary["terms"]  # in the SLA's order whatever the dict's (a --json read back has its keys sorted)
    for name in sorted(terms, key=lambda n: (TERMS.index(n) if n in TERMS else len(TERMS), n)):
        t = terms[name]
        bind = "  <- binds" if name == summary["binding_term"] else ""
        lines.append(f"{name.upper():<5} P99 {ms(t['p99_ms'])} ms{interval(t)} vs target {ms(t['target_ms'])} ms: "
                     f"{verdict(t)}{bind}")
    rejected = summary.get("rejected_share")
    if rejected:
        lines.append(f"rejected: {rejected:.1%} of requests")
    for key in ("remark", "idle"):
        if summary.get(key):
            lines.append(f"({summary[key]})")
    return lines


def quality_line(summary: Summary) -> str | None:
    """A lossy row's published quality cost, None for a lossless one."""
    loss = summary.get("quality_loss")
    return None if not loss else f"Quality cost (lossy: {loss['source']}): {loss['value']:g} {loss['unit']}"


def below_line(summary: Summary) -> str | None:
    """Why one replica fewer does not meet the SLA (its own verdict), None when it was not decided."""
    below = summary.get("verdict_below")
    return None if not below else f"One replica fewer: {below['why']}"


def headroom_line(room: Summary | None, markdown: bool = False) -> str | None:
    """The winner's headroom (``Recommendation.headroom()``): the smaller of its load and step-cost factors, with a
    warning under 10 %."""
    if room is None:
        return None
    what = "load" if room["least"] == "arrival_rate" else "step costs"
    text = f"Headroom: {room['headroom']:+.0%} on {what} before a P99 reaches its SLA target"
    if room.get("confident") is not None and room["confident"] < room["headroom"]:
        text += f" ({room['confident']:+.0%} before a 95 % interval's top does)"
    if room["thin"]:
        text += f"; {_bold('WARNING', markdown)}: under 10 %, a small change in load or costs breaks the SLA"
    return text + "."


def runner_up_line(runner: Summary | None, markdown: bool = False) -> str:
    return f"{_bold(LABELS['runner_up'], markdown)} " + (
        sized(runner, markdown) if runner is not None else "none (no other candidate meets the SLA)")


def none_meets_line(max_replicas: int) -> str:
    return f"No candidate meets the SLA with 95 % confidence with up to {max_replicas} replicas."


def closest_line(closest: Summary, markdown: bool = False) -> str:
    return (f"{_bold(LABELS['closest'], markdown)} {_bold(closest['candidate'], markdown)} on {where(closest)} at "
            f"{closest['searched_replicas']} replica(s)")


def factor_line(bound: Summary, what: str, unit: str) -> str:
    """One headroom factor of ``robustness`` (tripath/planning/headroom.py): how far ``what`` can grow before a P99
    reaches its target, interpolated between the two grid probes around it."""
    met, missed = bound["meets_up_to"], bound["misses_at"]
    if missed is None:
        return f"every P99 stays under its target up to {what} x{met:g} ({unit}; searched no further)"
    if missed <= 1.0:
        return f"over the SLA at {what} x1 already at this sample ({unit})"
    term = bound.get("binding_term")
    if term is None:
        return (f"under the SLA at {what} x{met:.2f}, over it at x{missed:.2f} ({unit}; requests rejected or no "
                f"P99 there: nothing to interpolate)")
    return (f"the {term.upper()} P99 reaches its target at {what} {bound['estimate'] - 1.0:+.1%} ({unit}; "
            f"interpolated between x{met:.2f}, under, and x{missed:.2f}, over; a 95 % interval's top at "
            f"{bound['confident'] - 1.0:+.1%})")


def robustness_lines(result: Summary, markdown: bool = False) -> list[str]:
    """The headroom section: what was held fixed and the sample of each probe, then the step-cost and request-rate
    factors; [] without one."""
    robust = result.get("robustness")
    if robust is None:
        return []
    n = robust.get("requests_per_replication")
    sample = (f"{robust['replications']} x {n:,} requests" if n else
              f"{robust['replications']} replication(s) of the scenario's requests")
    return [f"{_bold('Headroom', markdown)} ({robust['candidate']} on {robust['replicas']} replica(s) held fixed; "
            f"factors probed in steps of {robust['grid_step']:.0%}, each over {sample}, the sample that decided it):",
            factor_line(robust["step_costs"], "step costs", "profiled"),
            factor_line(robust["arrival_rate"], "the request rate", f"{result['qps']:g} req/s")]


@dataclass(frozen=True)
class Sentence:
    """One line of the headline: what it says (``kind``), its text, and the row summary it speaks of, if any."""

    kind: Kind
    text: str
    summary: Summary | None = None
    warning: bool = False  # a thin headroom: the app shows it as a warning


def batch_search_line(result: Summary) -> str | None:
    """What the max batch phase searched (tripath/planning/recommend.py ``batch_ladder``), None when it did not run."""
    batch = result.get("batch_search")
    if not batch or not batch["sizes"]:
        return None
    return (f"Max batch sizes also searched: {', '.join(map(str, batch['sizes']))} (--batch-sizes), on the baselines "
            f"and every path that met, each below the cheapest bill found: {batch['searched']} search(es), "
            f"{batch['met_cheaper']} met cheaper.")


def headline(result: Summary, max_replicas: int, markdown: bool = False) -> list[Sentence]:
    """The answer's sentences in order: the recommended row with its verdict lines, quality cost, one replica fewer
    and headroom, then the runner-up and its lines; or, when none meets, that sentence and the closest with its
    lines. The CLI prints every one; the app shows the ``HEADLINES`` and notes and tabulates the term lines."""
    best, runner, closest = result["recommended"], result["runner_up"], result["closest"]
    out: list[Sentence] = []

    def row(summary: Summary, notes: bool) -> None:
        out.extend(Sentence("term", line, summary) for line in term_lines(summary))
        quality = quality_line(summary)
        if quality is not None:
            out.append(Sentence("quality", quality, summary))
        below = below_line(summary) if notes else None
        if below is not None:
            out.append(Sentence("below", below, summary))

    if best is not None:
        out.append(Sentence("recommended", f"{_bold(LABELS['recommended'], markdown)} {sized(best, markdown)}", best))
        row(best, True)
        room = headroom_line(result.get("headroom"), markdown)
        if room is not None:
            out.append(Sentence("headroom", room, best, bool(result["headroom"]["thin"])))
        out.append(Sentence("runner_up", runner_up_line(runner, markdown), runner))
        if runner is not None:
            row(runner, False)
    else:
        out.append(Sentence("none_meets", none_meets_line(max_replicas)))
        if closest is not None:
            out.append(Sentence("closest", closest_line(closest, markdown), closest))
            row(closest, False)
    return out


def headline_text(result: Summary, max_replicas: int) -> list[str]:
    """The headline as the CLI prints it: each chosen row's line indented two spaces, the lines under it four."""
    return [("  " if s.kind in HEADLINES else "    ") + s.text for s in headline(result, max_replicas)]
