"""Page 6 — Fidelity: how far the simulator is from the real engine, from the latest `tripath validate` report.

Reads the report folder (tripath/app/widgets/validation.py); runs nothing. With no report on disk the page
says so and how to make one. It opens on the newest report shipped (data/validation/latest/); a value a report
does not hold reads "—" (tripath/app/widgets/display.py).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from tripath.app.widgets import display, validation
from tripath.core.errors import InputError


def _shown(path: Path) -> str:
    """A path relative to the repository when inside it (the shipped layout), else as is."""
    return str(path.relative_to(validation.REPO_ROOT)) if path.is_relative_to(validation.REPO_ROOT) else str(path)


def main() -> None:
    st.title("Fidelity")
    st.caption("Simulated against measured records of the same requests (`tripath validate`). "
               "Relative error = (sim - real) / real, in words: above measured = the simulator is pessimistic, "
               "below = optimistic.")
    folders = validation.report_folders()
    if not folders:
        roots = ", ".join(f"`{_shown(r)}/`" for r in validation.SEARCH_ROOTS)
        st.info(f"No validation run yet: no error_table.json under {roots}. Run `tripath validate` "
                "(see docs/fidelity.md) and reload this page.")
        return
    labels = [_shown(f) for f in folders]
    choice = st.selectbox("report (newest first)", labels, key="fidelity_report")
    try:
        report = validation.read_report(folders[labels.index(choice)])
    except InputError as err:
        st.error(str(err))
        return
    table = report.table
    st.markdown(f"**Measured:** {table.get('numbers_from', 'not stated')}  \n"
                f"**Simulated:** on profile `{table.get('profile')}` (source kind `{table.get('profile_source')}`), "
                f"seed {table.get('seed')}; report written {report.created}"
                + (" (quick mode)" if table.get("quick") else ""))
    bars = table.get("bars", {})
    if bars:
        st.caption("Bars: " + "; ".join(f"{name}: |error| <= {b.get('p50', 0):.0%} at P50, <= {b.get('tail', 0):.0%} "
                                        "at P90/P99" for name, b in bars.items()))
    status = [{k: v for k, v in r.items() if k != "worst error"} for r in validation.status_rows(report)]
    st.dataframe(display.frame(status), hide_index=True, key="fidelity_status")
    rows = [{k: v for k, v in r.items() if k != "error"} for r in validation.error_rows(report)]
    if rows:
        st.markdown("**Error table** (relative error of the simulator against the measurement; \"—\" where the "
                    "report holds no value: a quantity not compared, or an older report without a measured "
                    "interval)")
        st.dataframe(display.frame(rows, {"simulated": ",.4g", "measured": ",.4g"}), hide_index=True,
                     key="fidelity_errors")
    for scenario in table["scenarios"]:
        png = scenario.get("cdf_png")
        if png and (report.folder / png).is_file():
            st.markdown(f"**{scenario.get('name')}**: latency CDFs, measured (engine) vs simulated")
            st.image(str(report.folder / png))
        for side, name in (scenario.get("records") or {}).items():
            path = report.folder / name
            if path.is_file():
                st.download_button(f"{scenario.get('name')}: {side} records (CSV)", path.read_bytes(), name,
                                   "text/csv", key=f"fid_{side}_{name}")
    markdown = report.folder / "error_table.md"
    if markdown.is_file():
        with st.expander("error_table.md (as written by tripath validate)"):
            st.markdown(markdown.read_text(encoding="utf-8"))


main()
