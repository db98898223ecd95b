"""Page 2 — Decision matrix: per scenario cell, the cheapest candidate path meeting the SLA.

Calls tripath.planning.matrix.decision_matrix, the function behind `tripath matrix`, over the seed's
Section 4 cells; shows the best candidate per cell with its margin, a table and a heatmap of SLA margins
(candidates as rows, filterable) with the recommendation marked, and on selecting a cell its numbers
and the runner-up. Colours and labels follow tripath/app/widgets/display.py: a candidate rejecting more than
1 % of its requests is a miss (red, "rejects N %"), whatever the margin of the requests it served.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from tripath.app.widgets import charts, display, planning_runs, profiles, state
from tripath.core.errors import InputError
from tripath.planning.matrix import SEED_MATRIX, decision_matrix
from tripath.planning.sweep import MAX_REJECTED

RESULT = "matrix_result"
# Per cell and candidate one simulation of this many requests: the whole matrix (5 cells x 13-15 candidates, 67
# simulations, each step by step: the cells' batch size is 1) in about 15 s on 2 idle cores with the default profile
# (docs/app.md). The P99 of 20 requests is their largest, which the page says; the seed cells' targets are met
# with 75-90 % to spare on a measured GPU profile, and the answer per cell is the same over 40 requests.
DEFAULT_REQUESTS = 20


def main() -> None:
    st.title("Decision matrix")
    st.caption("Every candidate path simulated in every cell of the seed's decision matrix; per cell, the "
               "cheapest candidate meeting the SLA (fewest GPUs, then the largest margin) — `tripath matrix`. "
               f"A candidate that rejects more than {MAX_REJECTED:.0%} of its requests misses the SLA, whatever the "
               "P99 of the requests it served.")
    choices = profiles.choices()
    cols = st.columns([2, 1])
    name = cols[0].selectbox("profile", choices, **state.bind("matrix_profile", state.default_profile(choices),
                                                              state.PROFILE, choices))
    requests = int(cols[1].number_input("requests per cell", 10, 100_000,
                                        help="the CLI's --requests: each candidate in each cell is one simulation "
                                             "of this many requests; more gives a steadier P99 and takes longer",
                                        **state.bind("matrix_requests", DEFAULT_REQUESTS)))
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
        st.session_state[RESULT] = {**result, "requests_per_cell": requests, "replications": settings.replications}
    result = st.session_state.get(RESULT)
    if result is None:
        st.info("Pick a profile and **Build the matrix** (five cells x every candidate).")
        return
    _show(result)


def _marks(cell: dict[str, Any], candidate: str, row: dict[str, Any]) -> str:
    """The mark in a heatmap square: "n/a", "x" (refused), "rej N%" (a miss by rejection: never a star), ★, 2."""
    if "not_applicable" in row:
        return "n/a"
    if row.get("meets_sla") is None:
        return "x"
    share = display.rejected_share(row)
    if share > MAX_REJECTED:
        return f"rej {share:.0%}"
    if candidate == cell["recommended"]:
        return "★"
    if candidate == cell["runner_up"]:
        return "2"
    return ""


def _candidate_row(cell: dict[str, Any], name: str | None) -> dict[str, Any] | None:
    return next((r for r in cell["candidates"] if r["candidate"] == name), None)


def best_rows(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell: the recommended candidate, its SLA margin and rejected share, the runner-up and its margin, and
    the cell's setting."""
    rows = []
    for c in cells:
        best, runner = _candidate_row(c, c["recommended"]), _candidate_row(c, c["runner_up"])
        rate = c["rate_per_s"]
        rows.append({"cell": c["scenario"], "GPUs": c["gpus"],
                     "scenario's GPUs": c["sized"]["scenario_gpus"] if "sized" in c else c["gpus"],
                     "rate (req/s)": "trace timestamps" if rate is None else f"{rate:.4g}",
                     "recommended": c["recommended"] or "none meets the SLA",
                     "its SLA margin": display.margin_text(best) if best else f"{display.DASH} none meets",
                     "its rejected": display.pct(display.rejected_share(best), digits=1) if best
                     else f"{display.DASH} none meets",
                     "runner-up": c["runner_up"] or f"{display.DASH} no second candidate meets",
                     "runner-up margin": display.margin_text(runner) if runner else display.DASH,
                     "seed recommends": c["seed_recommends"], "seed agrees": c["seed_agrees"]})
    return rows


def margin_rows(cells: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Candidates x cells: SLA margin (min over the terms; >= 0 meets) with ★ / (2), "rejects N %" for a candidate
    rejecting more than MAX_REJECTED (a miss, whatever its margin), "n/a" where not applicable."""
    rows = []
    for name in names:
        row: dict[str, Any] = {"candidate": name}
        for c in cells:
            r = _candidate_row(c, name) or {"not_applicable": "not a candidate here"}
            mark = " ★" if name == c["recommended"] else " (2)" if name == c["runner_up"] else ""
            row[c["scenario"]] = display.margin_text(r) + mark
        rows.append(row)
    return rows


def _show(result: dict[str, Any]) -> None:
    cells = result["cells"]
    names = [row["candidate"] for row in cells[0]["candidates"]]
    requests, reps = result.get("requests_per_cell"), result.get("replications", 1)
    sample = "" if requests is None else (f" Each number is over {requests} requests per cell x {reps} "
                                          "replication(s): a quick look (the P99 of so few requests is near their "
                                          "largest); raise the requests per cell for a steadier tail.")
    st.caption(f"{result['numbers_from']}. SLA margin = (target - P99) / target, the smallest over the terms: "
               "0 % or more meets the SLA, if at most "
               f"{MAX_REJECTED:.0%} of the requests were rejected. ★ recommended, (2) runner-up, n/a not "
               f"applicable, rejects N % a miss by rejection.{sample}")
    st.markdown("**Best candidate per cell**")
    st.dataframe(display.frame(best_rows(cells)), hide_index=True, key="matrix_summary")
    applicable = [n for n in names if any("not_applicable" not in (_candidate_row(c, n) or {}) for c in cells)]
    shown = st.multiselect("candidates shown below (those the profile can run, by default)", names,
                           **state.bind("matrix_shown", applicable, options=names))
    shown = [n for n in names if n in shown]  # the matrix's own order
    if shown:
        st.dataframe(display.frame(margin_rows(cells, shown)), hide_index=True, key="matrix_margins")
        colours = [[display.colour_margin(_candidate_row(cell, n) or {"not_applicable": "-"}) for cell in cells]
                   for n in shown]
        marks = [[_marks(cell, n, _candidate_row(cell, n) or {"not_applicable": "-"}) for cell in cells]
                 for n in shown]
        fig = charts.matrix_heatmap(shown, [c["scenario"] for c in cells], colours, marks,
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
    right.metric("runner-up", cell["runner_up"] or f"{display.DASH} none",
                 help=None if cell["runner_up"] else "no second candidate meets the SLA in this cell")
    sla = ", ".join(f"{display.TERM_NAMES.get(t, t)} {display.ms(v)}" for t, v in cell["sla_ms"].items()
                    if v is not None)
    rate = "trace timestamps" if cell["rate_per_s"] is None else f"{cell['rate_per_s']:.4g} req/s"
    st.caption(f"SLA P99: {sla}; {cell['gpus']} GPU(s); arrivals {rate} (the baseline's, for every candidate). "
               f"Best single path: {cell['best_single_path'] or 'none meets'} "
               f"(closest: {cell['closest_single_path'] or 'none ran'}).")
    if "sized" in cell:
        note = cell["sized"]["note"]
        st.info(note[:1].upper() + note[1:])
    if cell["why_not_seed"]:
        st.warning(f"Differs from the seed's row: {cell['why_not_seed']}")
    st.dataframe(display.frame([_row(r) for r in cell["candidates"]],
                               {**{f"{t} P99 (ms)": ",.1f" for t in ("TTFT", "TPOT", "end-to-end")},
                                "peak KV (GiB)": ",.2f"}),
                 hide_index=True, key="matrix_cell_table")
    st.download_button("matrix (JSON)", json.dumps(result, indent=2), "decision_matrix.json", "application/json",
                       key="matrix_json")


def _row(r: dict[str, Any]) -> dict[str, Any]:
    """One candidate of the selected cell: its verdict (a rejecting one is a miss), P99s (ms), margin, rejected."""
    p99 = r.get("p99_ms") or {}
    peak = r.get("peak_kv_bytes")
    ran = "not_applicable" not in r
    return {"candidate": r["candidate"], "verdict": display.verdict(r),
            "TTFT P99 (ms)": (p99.get("ttft") or {}).get("mean"), "TPOT P99 (ms)": (p99.get("tpot") or {}).get("mean"),
            "end-to-end P99 (ms)": (p99.get("e2e") or {}).get("mean"), "SLA margin": display.margin_text(r),
            "GPUs": r.get("gpus"), "rejected": display.pct(display.rejected_share(r), digits=1) if ran else None,
            "peak KV (GiB)": None if peak is None else peak / 2**30,
            "not applicable / refused": r.get("not_applicable", ""),
            "note": "; ".join(n for n in (r.get("note"), r.get("remark")) if n)}


main()
