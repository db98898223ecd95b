"""Finding and reading the latest fidelity report that `tripath validate` wrote.

A report is a folder holding error_table.json (tripath/fidelity/report.py documents its fields),
error_table.md, cdf_<scenario>.png and records_{real,sim}_<scenario>.csv. The report writer
swaps whole folders in by rename, so a folder either has a complete error_table.json or none.
This module only reads: it never imports the fidelity package (which loads torch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tripath.app.widgets import display
from tripath.core.data_dirs import DATA_DIR, REPO_ROOT
from tripath.core.errors import InputError

# where `tripath validate` writes by default (data/validation/), and its documented alternatives
SEARCH_ROOTS = (DATA_DIR / "validation", REPO_ROOT / "docs" / "fidelity", DATA_DIR / "fidelity")
TABLE = "error_table.json"


@dataclass(frozen=True)
class Report:
    folder: Path
    table: dict[str, Any]

    @property
    def created(self) -> str:
        return str(self.table.get("created_utc", "unknown time"))


def report_folders(roots: tuple[Path, ...] | None = None) -> list[Path]:
    """Folders holding an error_table.json under the roots (the root itself or one level down), newest first."""
    found: list[Path] = []
    for root in SEARCH_ROOTS if roots is None else roots:
        if not root.is_dir():
            continue
        for folder in (root, *sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))):
            if (folder / TABLE).is_file():
                found.append(folder)
    return sorted(found, key=lambda f: (f / TABLE).stat().st_mtime, reverse=True)


def read_report(folder: Path) -> Report:
    path = folder / TABLE
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(str(path), None, f"cannot read: {err}") from None
    except json.JSONDecodeError as err:
        raise InputError(str(path), f"line {err.lineno}", f"malformed JSON: {err.msg}") from None
    if not isinstance(table, dict) or not isinstance(table.get("scenarios"), list):
        raise InputError(str(path), "scenarios", "missing list of scenarios: not a tripath validate report")
    return Report(folder, table)


def error_words(error: float | None) -> str | None:
    """A signed relative error (sim - real) / real in words, so no bare negative number is shown:
    "10.0 % above measured (pessimistic)", "20.0 % below measured (optimistic)"; None when there is none."""
    if error is None:
        return None
    if error == 0:
        return "equal to measured"
    side = "above measured (pessimistic)" if error > 0 else "below measured (optimistic)"
    return f"{display.pct(abs(error), digits=1)} {side}"


def error_rows(report: Report) -> list[dict[str, Any]]:
    """One row per compared quantity per scenario: the signed fraction (sim - real) / real as ``error`` (for
    sorting and tests) and in words as ``simulated vs measured`` (what the page shows)."""
    rows = []
    for scenario in report.table["scenarios"]:
        for row in scenario.get("rows", []):
            ci = row.get("real_ci")
            rows.append({"scenario": scenario.get("name"), "quantity": f"{row.get('metric')} {row.get('stat')}",
                         "unit": row.get("unit"), "simulated": row.get("sim"), "measured": row.get("real"),
                         "error": row.get("error"), "simulated vs measured": error_words(row.get("error")),
                         "within first bar": row.get("within_first_bar"),
                         "within second bar": row.get("within_second_bar"),
                         # older reports have no bootstrap interval: None ("—"), not False
                         "measured 95% CI": None if not ci else f"[{ci[0]:,.4g}, {ci[1]:,.4g}]",
                         "within noise": row.get("within_noise")})
    return rows


def status_rows(report: Report) -> list[dict[str, Any]]:
    out = []
    for scenario in report.table["scenarios"]:
        worst = scenario.get("worst") or {}
        out.append({"scenario": scenario.get("name"), "status": scenario.get("status"),
                    "reason": scenario.get("reason") or "", "requests": scenario.get("requests"),
                    "worst quantity": f"{worst.get('metric', '')} {worst.get('stat', '')}".strip(),
                    "worst error": worst.get("error"), "worst error, in words": error_words(worst.get("error"))})
    return out
