"""The fidelity report: error_table.json, error_table.md, cdf_<scenario>.png and the records, written as one folder.

The folder is built beside the destination and swapped in (rename), so a reader such as the app
never sees a half-written report: it sees the old folder or the new one.

error_table.json: {"numbers_from", "profile", "profile_source", "seed", "quick", "created_utc",
"bars", "scenarios": [{"name", "description", "path", "status" ("compared" | "not run"),
"reason" (what is missing, or null), "requests", "real" / "sim" (counts, wall time, or null),
"rows": [ErrorRow.to_dict()] (sim vs wall clock), "worst", "real_cpu", "cpu_rows" (sim vs the
CPU-time replay), "cdf_png", "records": {"real" | "sim" | "cpu": CSV name}}], "noise": [{"name", "rows"}]}.
A row with a measured 95 % interval also has "real_ci", "error_band" and "within_noise"
(tripath.fidelity.compare.ErrorRow); in the tables an error inside the noise is marked NOISE_MARK.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tripath.core.atomic import replacing_dir
from tripath.core.records import RequestRecord
from tripath.engine.serving import write_records_csv
from tripath.fidelity.compare import FIRST_BAR, LATENCY_METRICS, LEVELS, SECOND_BAR, ErrorRow, latency_ms


@dataclass
class ScenarioResult:
    """One validation scenario's outcome: the rows of either side that ran, and why a side did not."""

    name: str
    description: str
    path: str
    requests: int
    reason: str | None = None  # what is missing ("engine: ...; simulator: ..."), None when compared
    rows: list[ErrorRow] = field(default_factory=list)
    real: dict[str, Any] | None = None
    sim: dict[str, Any] | None = None
    real_records: list[RequestRecord] | None = None
    sim_records: list[RequestRecord] | None = None
    cpu_rows: list[ErrorRow] = field(default_factory=list)  # sim vs the engine replayed in CPU time
    cpu_records: list[RequestRecord] | None = None
    real_cpu: dict[str, Any] | None = None

    def sides(self) -> tuple[tuple[str, list[RequestRecord] | None], ...]:
        return (("real", self.real_records), ("sim", self.sim_records), ("cpu", self.cpu_records))

    @property
    def status(self) -> str:
        return "compared" if self.reason is None else "not run"

    def to_dict(self) -> dict[str, Any]:
        worst = max((r for r in self.rows if r.error is not None), key=lambda r: abs(r.error or 0.0), default=None)
        return {"name": self.name, "description": self.description, "path": self.path, "status": self.status,
                "reason": self.reason, "requests": self.requests, "real": self.real, "sim": self.sim,
                "real_cpu": self.real_cpu, "rows": [r.to_dict() for r in self.rows],
                "worst": worst.to_dict() if worst else None, "cpu_rows": [r.to_dict() for r in self.cpu_rows],
                "cdf_png": f"cdf_{self.name}.png" if any(recs for _, recs in self.sides()) else None,
                "records": {side: f"records_{side}_{self.name}.csv" for side, recs in self.sides() if recs}}


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pct(error: float | None) -> str:
    return "—" if error is None else f"{error:+.1%}"


NOISE_MARK = "*"
NOISE_NOTE = (f"`{NOISE_MARK}` after an error: the simulated value lies inside the measured value's 95 % bootstrap "
              "interval over requests (tripath/fidelity/bootstrap.py), i.e. the error is within the measurement's own "
              "sampling noise. This is information, not a pass: a marked error still fails a bar it exceeds.")


def _err(r: ErrorRow | None) -> str:
    """The signed error, marked when the simulated value is inside the measured interval."""
    if r is None:
        return "—"
    return _pct(r.error) + (NOISE_MARK if r.within_noise and r.error is not None else "")


def _band(pair: tuple[float, float] | None, fmt: Callable[[float | None], str]) -> str:
    return "—" if pair is None else f"{fmt(pair[0])} … {fmt(pair[1])}"


def _yes(ok: bool | None) -> str:
    return "—" if ok is None else "yes" if ok else "no"


def markdown(meta: dict[str, Any], results: Sequence[ScenarioResult],
             noise: Sequence[tuple[str, list[ErrorRow]]]) -> str:
    lines = [f"# Fidelity: simulated vs measured ({meta['profile']}, {meta['created_utc']})", "",
             f"Measured: {meta['numbers_from']}. Simulated: runner.simulate on profile `{meta['profile']}` "
             f"(source kind `{meta['profile_source']}`), the same request list (seed {meta['seed']}).", "",
             "Signed relative error = (sim − real) / real. First bar: |error| ≤ 10 % at P50, ≤ 15 % at P90/P99.", "",
             "## Simulated vs measured in wall-clock time (what users see on this shared machine)", ""]
    lines += _summary(results, lambda res: res.rows)
    lines += ["", NOISE_NOTE]
    shares = [f"{res.name} {res.real['core_share']:.2f}" for res in results
              if res.real and res.real.get("core_share") is not None]
    if shares:
        lines += ["", "Share of a core the engine's thread got while stepping (thread CPU s / step wall s; "
                  "1.00 on an idle core; sequence parallelism: each rank's outside its collectives, where it "
                  "blocks by design, the fewest rank): " + ", ".join(shares) + "."]
    lines += ["", "## Simulated vs the engine replayed in CPU time (an idle core: the machine's contention removed)",
              "", "The same requests served again with the engine's clock = its thread's CPU time while it works, "
              "plus the idle gaps (tripath.fidelity.engine_side.CpuClock), the clock the profile was measured "
              "with.", ""]
    lines += _summary(results, lambda res: res.cpu_rows)
    lines += ["", NOISE_NOTE]
    lines += ["", "## Values per scenario (sim / real, wall clock)", "",
              "real 95 % CI: the measured value's bootstrap interval; error band: the errors its ends imply, "
              "(sim − hi) / real … (sim − lo) / real.", ""]
    for res in results:
        lines += [f"### {res.name}", "", res.description, ""]
        if res.reason:
            lines += [f"**not run: {res.reason}**", ""]
        if not res.rows:
            continue
        lines += ["| quantity | unit | sim | real | real 95 % CI | error | error band | within noise | ≤ first bar "
                  "| ≤ second bar |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in res.rows:
            lines.append(f"| {r.metric} {r.stat} | {r.unit} | {_fmt(r.sim, 3)} | {_fmt(r.real, 3)} | "
                         f"{_band(r.real_ci, lambda v: _fmt(v, 3))} | {_err(r)} | {_band(r.error_band, _pct)} | "
                         f"{_yes(r.within_noise)} | {_yes(r.within(FIRST_BAR))} | {_yes(r.within(SECOND_BAR))} |")
        lines.append("")
    if noise:
        lines += ["## Machine noise: the engine side run twice, (run 2 − run 1) / run 1", ""]
        for name, rows in noise:
            lines.append(f"- {name}: " + ", ".join(f"{r.metric} {r.stat} {_err(r)}" for r in rows
                                                   if r.metric in LATENCY_METRICS or r.metric == "throughput"))
        lines += ["", f"`{NOISE_MARK}`: run 2's value lies inside run 1's 95 % bootstrap interval. The requests are "
                  "the same, so an unmarked change is the machine's (contention, stalls), which resampling requests "
                  "cannot see: the part of the noise only serving twice measures.", ""]
    return "\n".join(lines)


def _summary(results: Sequence[ScenarioResult], rows_of: Callable[[ScenarioResult], list[ErrorRow]]) -> list[str]:
    lines = ["| scenario | status | TTFT P50 | TTFT P90 | TTFT P99 | TPOT P50 | TPOT P90 | TPOT P99 | E2E P50 | "
             "E2E P90 | E2E P99 | req/s |", "|" + "---|" * 12]
    for res in results:
        t = {(r.metric, r.stat): r for r in rows_of(res)}
        cells = [_err(t.get((m, lv))) for m in LATENCY_METRICS for lv in LEVELS]
        thr = t.get(("throughput", "requests_per_s"))
        status = res.status if res.reason is None else f"not run: {res.reason}"
        lines.append(f"| {res.name} | {status} | " + " | ".join(cells) + f" | {_err(thr)} |")
    return lines


def dkw_epsilon(n: int, level: float = 0.95) -> float:
    """Half-width of the Dvoretzky-Kiefer-Wolfowitz band: sup |F_n - F| <= eps with probability ``level``.

    eps = sqrt(ln(2 / alpha) / (2 n)) (Massart 1990's tight constant), alpha = 1 - level: a band around the
    whole measured CDF, distribution-free (0.124 at n = 120, 0.078 at n = 300).
    """
    return float(np.sqrt(np.log(2.0 / (1.0 - level)) / (2.0 * n)))


def cdf_figure(res: ScenarioResult, path: Path) -> None:
    """Empirical CDFs of TTFT, TPOT and end-to-end latency, simulated over measured, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, metric in zip(axes, LATENCY_METRICS, strict=True):
        for label, recs, style in (("measured, wall clock", res.real_records, "-"),
                                   ("measured, CPU-time replay", res.cpu_records, ":"),
                                   ("simulated", res.sim_records, "--")):
            if not recs:
                continue
            values = np.sort(latency_ms(recs, metric))
            if not values.size:
                continue
            ecdf = np.arange(1, values.size + 1) / values.size
            (line,) = ax.step(values, ecdf, style, where="post", label=label)
            if recs is res.real_records:  # where the measured CDF could lie: the DKW 95 % band
                eps = dkw_epsilon(values.size)
                ax.fill_between(values, np.clip(ecdf - eps, 0, 1), np.clip(ecdf + eps, 0, 1), step="post",
                                color=line.get_color(), alpha=0.15, linewidth=0, label="measured 95 % band (DKW)")
        ax.set_xscale("log")  # wall clock on a contended machine can sit 10x right of the other two curves
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{metric.upper()} (ms, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(f"{res.name}: {res.status}" + (f" ({res.reason[:90]})" if res.reason else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_report(out: str | os.PathLike, meta: dict[str, Any], results: Sequence[ScenarioResult],
                 noise: Sequence[tuple[str, list[ErrorRow]]] = (), replace: bool = True) -> Path:
    """Build the report folder beside ``out`` and swap it in; returns the folder. Without ``replace`` a folder
    another command filled while this one ran is refused (core.atomic.replacing_dir), not replaced."""
    dest = Path(out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with replacing_dir(dest, replace) as tmp:
        doc = {**meta, "bars": {"first": {"p50": FIRST_BAR[0], "tail": FIRST_BAR[1]},
                                "second": {"p50": SECOND_BAR[0], "tail": SECOND_BAR[1]}},
               "scenarios": [r.to_dict() for r in results],
               "noise": [{"name": n, "rows": [r.to_dict() for r in rows]} for n, rows in noise]}
        (tmp / "error_table.json").write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        (tmp / "error_table.md").write_text(markdown(meta, results, noise) + "\n", encoding="utf-8")
        for res in results:
            if any(recs for _, recs in res.sides()):
                cdf_figure(res, tmp / f"cdf_{res.name}.png")
            for side, recs in res.sides():
                if recs:
                    write_records_csv(recs, tmp / f"records_{side}_{res.name}.csv")
    return dest
