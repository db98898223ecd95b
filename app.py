"""tripath's Streamlit app: `tripath app` (or `streamlit run app.py`).

One page per file in app_pages/; every page calls the same typed functions as the CLI.
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # app_pages lives beside this file; `streamlit run` from elsewhere still finds it
    sys.path.insert(0, str(ROOT))

PAGES = [
    st.Page("app_pages/explorer.py", title="Scenario explorer", icon=":material/tune:", default=True),
    st.Page("app_pages/matrix.py", title="Decision matrix", icon=":material/grid_on:"),
    st.Page("app_pages/capacity.py", title="Capacity planner", icon=":material/dns:"),
    st.Page("app_pages/whatif.py", title="SLA what-if", icon=":material/ssid_chart:"),
    st.Page("app_pages/calibration.py", title="Calibration", icon=":material/speed:"),
    st.Page("app_pages/fidelity.py", title="Fidelity", icon=":material/fact_check:"),
]


def main() -> None:
    st.set_page_config(page_title="tripath", layout="wide")
    page = st.navigation(PAGES)
    st.sidebar.caption("tripath: which long-context inference path meets your P99 SLA at the lowest GPU cost. "
                       "Every number says where it comes from: measured, published, projected or seed.")
    page.run()


main()
