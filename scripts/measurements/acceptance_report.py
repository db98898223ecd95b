"""The outputs of scripts/measurements/measure_acceptance.py: summary rows per (task, proposer, K), the findings
against the seed documents' claims, docs/speculative.md's markdown, and the CSV files (written whole).

Lives beside the measuring script, which imports it (the measurements themselves stay there).
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tripath.core.atomic import AtomicFile
from tripath.core.speculative import SpecCosts, breakeven_acceptance, predicted_speedup

if TYPE_CHECKING:
    from measure_acceptance import Run, TaskCosts


@dataclass(frozen=True)
class Row:
    task: str
    proposer: str
    k: str
    acceptance_rate: float  # vLLM: accepted / draft tokens
    per_token_a: float  # accepted / (accepted + rejections)
    mean_acceptance_length: float
    speedup: float  # measured: target-only decode time / this config's, summed over prompts
    predicted: float  # E(K, a) / (K c + v(K)) from measured a, c, v(K)
    break_even_a: float
    lossless: bool


def summarize(runs: list[Run], costs: dict[str, TaskCosts]) -> list[Row]:
    rows = []
    for task in dict.fromkeys(r.task for r in runs):
        base = {
            ph: sum(r.decode_s for r in runs if (r.task, r.proposer, r.phase) == (task, "none", ph)) for ph in (1, 2)
        }
        c, v = costs[task].costs()
        for name, k in dict.fromkeys((r.proposer, r.k) for r in runs if r.task == task and r.proposer != "none"):
            sel = [r for r in runs if (r.task, r.proposer, r.k) == (task, name, k)]
            dt, acc = sum(r.draft_tokens for r in sel), sum(r.accepted for r in sel)
            drafts, rej = sum(r.drafts for r in sel), sum(r.rejections for r in sel)
            a = acc / (acc + rej) if acc + rej else float("nan")
            pred = be = float("nan")
            if name == "draft" and k.isdigit() and int(k) in v:
                kk = int(k)
                sc = SpecCosts(c=c, verify_base=v[kk])
                pred, star = predicted_speedup(kk, a, sc), breakeven_acceptance(kk, sc)
                be = 1.0 if star is None else star  # never pays: every a < 1 is below break-even
            rows.append(Row(
                task, name, k, acc / dt if dt else float("nan"), a, 1 + acc / drafts if drafts else float("nan"),
                base[sel[0].phase] / sum(r.decode_s for r in sel), pred, be, all(r.lossless for r in sel),
            ))
    return rows


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with AtomicFile(path) as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _fmt(x: float) -> str:
    return "—" if x != x else f"{x:.2f}"


def findings(rows: list[Row]) -> list[str]:
    """Per task: the best fixed K, the worst, the adaptive controller, prompt lookup (all measured)."""
    out = []
    for task in dict.fromkeys(r.task for r in rows):
        fixed = [r for r in rows if r.task == task and r.proposer == "draft" and r.k.isdigit()]
        best, worst = max(fixed, key=lambda r: r.speedup), min(fixed, key=lambda r: r.speedup)
        ada = next(r for r in rows if r.task == task and r.k == "adaptive")
        pld = next(r for r in rows if r.task == task and r.proposer == "lookup")
        a1 = next(r for r in fixed if r.k == "1").per_token_a
        out.append(
            f"- {task}: a at K=1 {a1:.2f}; best fixed K = {best.k} ({best.speedup:.2f}x), worst K = {worst.k} "
            f"({worst.speedup:.2f}x); adaptive {ada.speedup:.2f}x; prompt lookup K=4 {pld.speedup:.2f}x "
            f"(acceptance rate {pld.acceptance_rate:.2f})."
        )
    k1 = {r.task: r.per_token_a for r in rows if r.proposer == "draft" and r.k == "1"}
    order = sorted(k1, key=k1.get, reverse=True)
    fixed = [r for r in rows if r.break_even_a == r.break_even_a]
    be = [r.break_even_a for r in fixed]
    below = [r for r in fixed if r.per_token_a < r.break_even_a]
    slower = [r for r in fixed if r.speedup < 1.0]
    agree = sum((r.per_token_a < r.break_even_a) == (r.speedup < 1.0) for r in fixed)
    ada = {r.task: r.speedup for r in rows if r.k == "adaptive"}
    out += [
        "",
        "Against the seed documents' claims (SEEDS.md):",
        "",
        f"- acceptance by task (a at K=1, highest first): {', '.join(f'{t} {k1[t]:.2f}' for t in order)}; "
        "the seeds order dialogue 0.75 > summarization 0.72 > code 0.68 > math 0.55 (K=5, LLaMA-2 7B/70B).",
        f"- break-even a from the measured costs: {min(be):.2f} to {max(be):.2f} over tasks and K "
        f"(the seeds: ~0.5 to ~0.6); {len(below)} of {len(fixed)} (task, K) cells have a below it, "
        f"{len(slower)} were measured slower than target-only; the two verdicts agree in {agree} of {len(fixed)}.",
        f"- adaptive K with fallback: {', '.join(f'{t} {x:.2f}x' for t, x in ada.items())} "
        f"({'never below' if min(ada.values()) >= 1.0 else 'NOT always at or above'} target-only decoding).",
    ]
    return out


def markdown(rows: list[Row], costs: dict[str, TaskCosts], command: str, meta: dict[str, str]) -> str:
    lines = [
        "# Speculative decoding with the shipped tiny pair (measured)",
        "",
        "Produced by:",
        "",
        f"    {command}",
        "",
        "Target `data/models/tiny-target` (6 layers, 256 wide), draft `data/models/tiny-draft` (2 layers,",
        "128 wide), byte-level, fp32, batch 1, greedy, held-out prompts of `data/models/eval_prompts.jsonl`.",
        "Every number is **measured** on this machine in one run, except *predicted*, which is the formula",
        "E(K, a) / (K c + v(K)) with E = (1 - a^(K+1)) / (1 - a) applied to the measured a, c and v(K),",
        "and *break-even a*, the a at which that prediction equals 1.",
        "",
        "- acceptance rate: vLLM's accepted / draft tokens; a: per-token acceptance given the earlier",
        "  ones were accepted, accepted / (accepted + rejections) (the a of the formula);",
        "  mean acceptance length: vLLM's 1 + accepted / drafts.",
        "- speedup: target-only decode time / speculative decode time (all steps after the prefill).",
        "- c: draft step / target step (batch 1); v(K): target pass over K+1 tokens / target step. Means",
        "  (stalls of the shared CPU included, as in the measured totals); the median c is listed too.",
        "- lossless: every output equals the target-only greedy output token for token.",
        "- lookup: prompt-lookup drafting (no draft model), n-grams of 4..12 bytes, K = 4.",
        "",
        "## Costs (measured, per task)",
        "",
        "| task | target step ms (mean) | c (mean) | c (median) | " + " | ".join(f"v({k})" for k in range(1, 9)) + " |",
        "|---|---|---|---|" + "---|" * 8,
    ]
    for task, tc in costs.items():
        c, v = tc.costs()
        unit = statistics.mean(tc.target_step_s) * 1e3
        c_med = tc.costs(mean=False)[0]
        vs = " | ".join(_fmt(v.get(k, float("nan"))) for k in range(1, 9))
        lines.append(f"| {task} | {unit:.2f} | {c:.3f} | {c_med:.3f} | {vs} |")
    lines += [
        "",
        "## Acceptance and speedup by task and K",
        "",
        "| task | proposer | K | acceptance rate | a | mean acc. length | speedup (measured) | predicted "
        "| break-even a | lossless |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.task} | {r.proposer} | {r.k} | {_fmt(r.acceptance_rate)} | {_fmt(r.per_token_a)} | "
            f"{_fmt(r.mean_acceptance_length)} | {_fmt(r.speedup)} | {_fmt(r.predicted)} | {_fmt(r.break_even_a)} | "
            f"{'yes' if r.lossless else 'NO'} |"
        )
    lines += ["", "## Per task (measured)", "", *findings(rows)]
    lines += ["", "## Provenance", ""] + [f"- {k}: {v}" for k, v in meta.items()] + [""]
    return "\n".join(lines)
