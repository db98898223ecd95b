"""Page 5 — Calibration: a profile's coefficients, fits against raw samples, fit errors, provenance;
upload a profile (JSON, size-capped, validated by tripath.profile.profile) or compare two.

The tables are tripath.profile.inspect's describe / compare (`tripath profile show|compare --json`),
the fit figures are `tripath profile plot`'s (tripath/calibrate/plots.py) as shipped beside each profile.
Opens on the shared default GPU profile (a measured-kernel one: its step costs are tables, shown as such).
Missing values read "—" (tripath/app/widgets/display.py), with the reason in the row.
"""

from __future__ import annotations

import streamlit as st

from tripath.app.widgets import display, profiles, state
from tripath.app.widgets.profile_tables import (
    coefficient_rows,
    compare_rows,
    fit_rows,
    hardware_rows,
    path_rows,
    table_grid,
    table_rows,
)
from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError
from tripath.profile.inspect import compare, describe
from tripath.profile.profile import MAX_PROFILE_BYTES, Profile, load_samples

SELECTED = "calibration_profile"  # the picker's widget key; its value is the shared state.PROFILE
SEEN = "calibration_seen_uploads"  # upload file ids already handled, so a rerun does not re-process one
UPLOAD_ERROR = "calibration_upload_error"


def _handle_upload() -> None:
    """Validate a new upload before anything keeps it; on success select it, on failure change nothing."""
    file = st.file_uploader(f"upload a profile (JSON, at most {MAX_PROFILE_BYTES >> 20} MB)",
                            type=["json"], key="profile_upload",
                            help="validated by tripath.profile.profile, the parser every tripath command uses")
    if file is None:
        st.session_state.pop(UPLOAD_ERROR, None)
        return
    seen = st.session_state.setdefault(SEEN, set())
    if file.file_id not in seen:
        seen.add(file.file_id)
        st.session_state.pop(UPLOAD_ERROR, None)
        try:
            if file.size > MAX_PROFILE_BYTES:  # refuse before reading the bytes
                raise InputError(file.name, None, f"{file.size:,} bytes is over the "
                                                  f"{MAX_PROFILE_BYTES:,}-byte limit for an uploaded profile")
            name = profiles.keep_upload(file.name, file.getvalue())
        except InputError as err:
            st.session_state[UPLOAD_ERROR] = str(err)
        else:
            st.session_state[state.PROFILE] = name  # the chosen profile, on every page
            st.toast(f"added {name}")
    if UPLOAD_ERROR in st.session_state:
        st.error(f"upload refused, nothing changed: {st.session_state[UPLOAD_ERROR]}")


def main() -> None:
    st.title("Calibration")
    st.caption("What a profile holds and where each number comes from (`tripath profile show` / `compare`).")
    _handle_upload()
    choices = profiles.choices()
    name = st.selectbox("profile", choices, **state.bind(SELECTED, state.default_profile(choices), state.PROFILE,
                                                          choices))
    profile = profiles.load_shown(name)
    if profile is None:
        return
    d = describe(profile)
    tabs = st.tabs(["Coefficients", "Fits", "Paths", "Hardware and model", "Provenance", "Compare"])
    with tabs[0]:
        coefficients, tables = coefficient_rows(d), table_rows(d)
        if coefficients:
            st.dataframe(display.frame(coefficients), hide_index=True, key="coefficients")
        if tables:
            st.markdown("**Measured tables** (step costs read from a grid of measured kernel times, not fitted: "
                        "docs/aic_profiles.md)")
            st.dataframe(display.frame(tables), hide_index=True, key="cost_tables")
            cost = st.selectbox("show the grid of", [r["cost"] for r in tables], key="cost_grid")
            columns, grid = table_grid(d, cost)
            st.caption(f"costs.{cost}: ms per iteration at each point, as the profile stores them (between points "
                       "the simulator interpolates linearly; beyond the grid it extends the last segment and counts "
                       "the query as extrapolated)")
            st.dataframe(display.frame(grid, dict.fromkeys(columns[1:], ",.2f")), hide_index=True,
                         key="cost_grid_table")
        st.download_button("profile (JSON)", profile.to_json(), f"{name.removeprefix(profiles.UPLOAD_PREFIX)}",
                           "application/json", key="profile_json")
    with tabs[1]:
        fits = fit_rows(d)
        st.dataframe(display.frame(fits, dict.fromkeys(("train MAPE", "worst APE", "holdout MAPE"), ".1%")),
                     hide_index=True, key="fits",
                     column_config={c: st.column_config.NumberColumn(format="percent")
                                    for c in ("train MAPE", "worst APE", "holdout MAPE")
                                    if all(not display.missing(r[c]) for r in fits)})
        _fit_figures(name, list(d["costs"]))
    with tabs[2]:
        rows = path_rows(d)
        if rows:
            st.dataframe(display.frame(rows), hide_index=True, key="paths")
        absent = [k for k, present in d["sections"].items() if not present]
        if absent:
            st.caption(f"absent sections (the simulator cannot model these paths on this profile): {', '.join(absent)}")
    with tabs[3]:
        st.dataframe(display.frame(hardware_rows(d)), hide_index=True, key="hardware")
    with tabs[4]:
        st.json(d["provenance"])
        for note in d["notes"]:
            st.markdown(f"- {note}")
    with tabs[5]:
        _compare(profile, choices, name)


def _fit_figures(name: str, costs: list[str]) -> None:
    shown = False
    for cost in costs:
        png = PROFILES_DIR / f"{name}.fit-{cost}.png"
        if name in profiles.available_profiles() and png.is_file():
            st.image(str(png), caption=f"costs.{cost}: raw samples (points) against the fit (lines), and residuals; "
                                       f"written by `tripath profile plot {name}`")
            shown = True
    if not shown:
        st.caption("No samples-vs-fit figures for this profile (a profile of measured tables is read from its grid, "
                   "not fitted; an upload carries no samples; a seed profile's samples are the seed tables' rows, "
                   "listed below).")
    samples = PROFILES_DIR / f"{name}.samples.csv"
    if name in profiles.available_profiles() and samples.is_file():
        rows = load_samples(samples)
        with st.expander(f"raw samples: {samples.name} ({len(rows):,} rows, the data the fits were made from)"):
            st.dataframe(display.frame(rows[:2000]), hide_index=True, key="samples")
            st.download_button("raw samples (CSV)", samples.read_bytes(), samples.name, "text/csv", key="samples_csv")


def _compare(profile: Profile, choices: list[str], name: str) -> None:
    others = [c for c in choices if c != name]
    if not others:
        st.caption("Only one profile available.")
        return
    other = st.selectbox("compare with (B; A is the profile above)", others, key="compare_with")
    try:
        b = profiles.load(other)
    except InputError as err:
        st.error(str(err))
        return
    coefficients, examples = compare_rows(compare(profile, b))
    if coefficients:
        st.dataframe(display.frame(coefficients), hide_index=True, key="compare_coefficients")
    else:
        st.caption("No fitted coefficients to set side by side (measured tables have none): compare the example "
                   "costs.")
    if examples:
        st.markdown("**Example costs** (each profile's own formula at the same inputs, ms)")
        st.dataframe(display.frame(examples, {"A ms": ",.3f", "B ms": ",.3f", "B / A": ".3f"}), hide_index=True,
                     key="compare_examples")


main()
