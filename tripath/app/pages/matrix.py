"""Page 2 — Decision matrix: per scenario cell, the cheapest candidate path meeting the SLA.

Calls tripath.planning.matrix.decision_matrix, the function behind `tripath matrix`, over the seed's
Section 4 cells; shows the best candidate per cell with its margin, a table and a heatmap of SLA margins
(candidates as rows, filterable) with the recommendation marked, and on selecting a cell its numbers
and the runner-up.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from tripath.app.widgets import charts, planning_runs, profiles, state
from tripath.core.errors import InputError
from tripath.planning.matrix import SEED_MATRIX, decision_matrix
from tripath.planning.sweep import MAX_REJECTED

RESULT = "matrix_result"


def main() -> None:
    st.title("Decision matrix")
    st.caption("Every candidate path simulated in every cell of the seed's decision matrix; per cell, the "
               "cheapest candidate meeting the SLA (fewest GPUs, then the largest margin) — `tripath matrix`.")
    choices = profiles.choices()
    cols = st.columns([2, 1])
    default = "seed-llama2-70b-a100" if "seed-llama2-70b-a100" in choices else choices[0]
    name = cols[0].selectbox("profile", choices, **state.bind("matrix_profile", default, state.PROFILE, choices))
    requests = int(cols[1].number_input("requests per cell", 10, 100_000, help="the CLI's --requests: fewer for a "
                                                                              "quick look",
                                        **state.bind("matrix_requests", 60)))
    settings = planning_runs.controls("matrix")
    profile = profiles.load_shown(name)
    if profile is None:
        return
    if st.button("Build the matrix", type="primary", key="matrix_run"):
        text = profiles.profile_text(name)
        try:
            result = planning_runs.run(
                "decision matrix", {"profile": text, "requests": requests}, settings,
                lambda executor, cache: decision_matrix(profile, SEED_MATRIX, settings.seed, settings.replications,
                                                        executor, cache, requests).to_dict())
        except (InputError, ValueError) as err:
            st.error(str(err))
            return
        st.session_state[RESULT] = result
    result = st.session_state.get(RESULT)
    if result is None:
        st.info("Pick a profile and **Build the matrix** (five cells x every candidate).")
        return
    _show(result)


def _marks(cell: dict[str, Any], candidate: str, row: dict[str, Any]) -> str:
    if "not_applicable" in row:
        return "n/a"
    if row.get("meets_sla") is None:
        return "x"
    if candidate == cell["recommended"]:
        return "★"
    if candidate == cell["runner_up"]:
        return "2"
    share = row.get("rejected_share") or 0.0
    return f"rej {share:.0%}" if share > MAX_REJECTED else ""  # grey squares: nothing completed to measure


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def _candidate_row(cell: dict[str, Any], name: str | None) -> dict[str, Any] | None:
    return next((r for r in cell["candidates"] if r["candidate"] == name), None)


def best_rows(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell: the recommended candidate and its SLA margin, the runner-up and its margin, and the cell's setting."""
    rows = []
    for c in cells:
        best, runner = _candidate_row(c, c["recommended"]), _candidate_row(c, c["runner_up"])
        rows.append({"cell": c["scenario"], "GPUs": c["gpus"],
                     "scenario's GPUs": c["sized"]["scenario_gpus"] if "sized" in c else c["gpus"],
                     "rate (req/s)": c["rate_per_s"],
                     "recommended": c["recommended"] or "none meets the SLA",
                     "its SLA margin (%)": _pct((best or {}).get("sla_margin")),
                     "runner-up": c["runner_up"] or "-", "runner-up margin (%)": _pct((runner or {}).get("sla_margin")),
                     "seed recommends": c["seed_recommends"], "seed agrees": c["seed_agrees"]})
    return rows


def margin_rows(cells: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Candidates x cells: SLA margin in % (min over the terms; >= 0 meets), "n/a" where not applicable."""
    rows = []
    for name in names:
        row: dict[str, Any] = {"candidate": name}
        for c in cells:
            r = _candidate_row(c, name) or {}
            mark = "n/a" if "not_applicable" in r else None
            margin = _pct(r.get("sla_margin"))
            row[c["scenario"]] = mark or ("-" if margin is None else f"{margin:+.0f} %"
                                          + (" ★" if name == c["recommended"] else
                                             " (2)" if name == c["runner_up"] else ""))
        rows.append(row)
    return rows


def _show(result: dict[str, Any]) -> None:
    cells = result["cells"]
    names = [row["candidate"] for row in cells[0]["candidates"]]
    st.caption(f"{result['numbers_from']}. SLA margin = (target - P99) / target, the smallest over the terms: "
               "0 % or more meets the SLA. ★ recommended, (2) runner-up, n/a not applicable.")
    st.markdown("**Best candidate per cell**")
    st.dataframe(pd.DataFrame(best_rows(cells)), hide_index=True, key="matrix_summary",
                 column_config={c: st.column_config.NumberColumn(format="%.1f")
                                for c in ("its SLA margin (%)", "runner-up margin (%)")})
    applicable = [n for n in names if any("not_applicable" not in (_candidate_row(c, n) or {}) for c in cells)]
    shown = st.multiselect("candidates shown below (those the profile can run, by default)", names,
                           **state.bind("matrix_shown", applicable, options=names))
    shown = [n for n in names if n in shown]  # the matrix's own order
    if shown:
        st.dataframe(pd.DataFrame(margin_rows(cells, shown)), hide_index=True, key="matrix_margins")
        margins = [[(_candidate_row(cell, n) or {}).get("sla_margin") for cell in cells] for n in shown]
        marks = [[_marks(cell, n, _candidate_row(cell, n) or {}) for cell in cells] for n in shown]
        fig = charts.matrix_heatmap(shown, [c["scenario"] for c in cells], margins, marks,
                                    f"decision matrix — {result['numbers_from']}")
        st.pyplot(fig)
        st.download_button("heatmap (PNG)", charts.png_bytes(fig), "decision_matrix.png", "image/png",
                           key="matrix_png")
    else:
        st.info("Pick at least one candidate to show the margins.")
    chosen = st.selectbox("cell", [c["scenario"] for c in cells], key="matrix_cell")
    cell = next(c for c in cells if c["scenario"] == chosen)
    left, right = st.columns(2)
    left.metric("recommended", cell["recommended"] or "none meets the SLA")
    right.metric("runner-up", cell["runner_up"] or "-")
    names = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end"}
    sla = ", ".join(f"{names.get(t, t)} {v:g} ms" for t, v in cell["sla_ms"].items() if v is not None)
    rate = "trace timestamps" if cell["rate_per_s"] is None else f"{cell['rate_per_s']:.4g} req/s"
    st.caption(f"SLA P99: {sla}; {cell['gpus']} GPU(s); arrivals {rate} (the baseline's, for every candidate). "
               "Best single path: "
               f"{cell['best_single_path'] or '-'} (closest: {cell['closest_single_path'] or '-'}).")
    if "sized" in cell:
        note = cell["sized"]["note"]
        st.info(note[:1].upper() + note[1:])
    if cell["why_not_seed"]:
        st.warning(f"Differs from the seed's row: {cell['why_not_seed']}")
    st.dataframe(pd.DataFrame([_row(r) for r in cell["candidates"]]), hide_index=True, key="matrix_cell_table")
    st.download_button("matrix (JSON)", json.dumps(result, indent=2), "decision_matrix.json", "application/json",
                       key="matrix_json")


def _row(r: dict[str, Any]) -> dict[str, Any]:
    p99 = r.get("p99_ms") or {}
    peak = r.get("peak_kv_bytes")
    rejected = r.get("rejected_share")
    return {"candidate": r["candidate"], "meets SLA": r.get("meets_sla"),
            "TTFT P99 (ms)": (p99.get("ttft") or {}).get("mean"), "TPOT P99 (ms)": (p99.get("tpot") or {}).get("mean"),
            "end-to-end P99 (ms)": (p99.get("e2e") or {}).get("mean"), "SLA margin (%)": _pct(r.get("sla_margin")),
            "GPUs": r.get("gpus"), "rejected (%)": _pct(rejected),
            "peak KV (GiB)": None if peak is None else peak / 2**30,
            "not applicable / refused": r.get("not_applicable", ""),
            "note": "; ".join(n for n in (r.get("note"), r.get("remark")) if n)}


main()
