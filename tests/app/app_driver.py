"""Driving the Streamlit app through AppTest (no browser, no server): shared by the page tests."""

from __future__ import annotations

import pandas as pd
from streamlit.testing.v1 import AppTest

from tripath.core.data_dirs import REPO_ROOT

TIMEOUT_S = 120  # the machine is shared: generous, never part of what is asserted


def app(page: str | None = None) -> AppTest:
    """app.py run once, switched to ``page`` (a file of tripath/app/pages/) when given; no exception raised."""
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=TIMEOUT_S).run()
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
