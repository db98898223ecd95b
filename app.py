"""tripath's Streamlit app: `tripath app` (or `streamlit run app.py`).

One page per file in tripath/app/pages/; every page calls the same typed functions as the CLI.
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
# the tripath package lives beside this file; `streamlit run` from elsewhere still finds it
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PAGES = [
    st.Page("tripath/app/pages/recommendation.py", title="Recommendation", icon=":material/recommend:", default=True),
    st.Page("tripath/app/pages/explorer.py", title="Scenario explorer", icon=":material/tune:"),
    st.Page("tripath/app/pages/matrix.py", title="Decision matrix", icon=":material/grid_on:"),
    st.Page("tripath/app/pages/capacity.py", title="Capacity planner", icon=":material/dns:"),
    st.Page("tripath/app/pages/whatif.py", title="SLA what-if", icon=":material/ssid_chart:"),
    st.Page("tripath/app/pages/calibration.py", title="Calibration", icon=":material/speed:"),
    st.Page("tripath/app/pages/fidelity.py", title="Fidelity", icon=":material/fact_check:"),
]


def main() -> None:
    st.set_page_config(page_title="tripath", layout="wide")
    page = st.navigation(PAGES)
    st.sidebar.caption("tripath: which long-context inference path meets your P99 SLA at the lowest GPU cost. "
                       "Every number says where it comes from: measured, published, projected or seed.")
    page.run()


main()
