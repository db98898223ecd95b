"""Driving the Streamlit app through AppTest (no browser, no server): shared by the page tests."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from streamlit.testing.v1 import AppTest

from tests.timing import slack
from tripath.app.widgets import display, state
from tripath.core.data_dirs import REPO_ROOT

TIMEOUT_S = slack(40)  # a hang guard (tests/timing.py), never part of what is asserted
# The seed profile on the quickstart scenario: what the pages opened on before they opened on a measured GPU
# profile (tripath/app/widgets/state.py's defaults). The checks that compare a page with the CLI's functions on a
# small, fast case start there: app(page, **SEED).
SEED = {"profile": "seed-llama2-70b-a100", "scenario": "quickstart"}


def app(page: str | None = None, profile: str | None = None, scenario: str | None = None) -> AppTest:
    """app.py run once, switched to ``page`` (a file of tripath/app/pages/) when given; no exception raised.

    ``profile`` / ``scenario`` preset the shared slots (as if another page had chosen them), so the page opens on
    them instead of its defaults."""
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=TIMEOUT_S).run()
    if profile is not None:
        at.session_state[state.PROFILE] = profile
    if scenario is not None:
        at.session_state[state.SCENARIO] = scenario
    if page:
        at.switch_page(f"tripath/app/pages/{page}.py").run()
    assert not at.exception, at.exception
    return at


def frame(at: AppTest, column: str) -> pd.DataFrame:
    """The (first) dataframe on the page holding ``column``."""
    for element in at.dataframe:
        if column in element.value.columns:
            return element.value
    raise AssertionError(f"no table with column {column!r}; tables: {[list(e.value.columns) for e in at.dataframe]}")


def num(value: Any) -> float:
    """A table value as a number: a formatted one ("1,234.5", "+55 %", "12.0 %") read back, NaN for "—" (a value
    the page shows as missing, tripath/app/widgets/display.py)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    if text.startswith(display.DASH):
        return math.nan
    return float(text.replace(",", "").replace("%", "").strip())
