"""Where each number on a page comes from, in words the user reads next to it.

The labels are tripath.profile.inspect's (the CLI's `tripath profile show` prints the same ones), so
the app and the CLI never disagree about what a "projected" or "seed" profile means.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from tripath.profile.inspect import SOURCE_LABELS
from tripath.profile.profile import Profile

KIND_BADGES = {"measured": "green", "fitted": "green", "published": "blue", "projected": "orange",
               "seed": "violet"}


def profile_badge(profile: Profile) -> None:
    """One line: the profile's key and the kind of its numbers, coloured by kind."""
    colour = KIND_BADGES.get(profile.source, "gray")
    st.markdown(f":{colour}-badge[{profile.source}] `{profile.key_str()}` — {SOURCE_LABELS[profile.source]}")


def simulated_caption(report: dict[str, Any]) -> str:
    """What a simulated result stands on: the summary's own `numbers_from`, profile, seed, rate source."""
    rate = report["arrival_rate_per_s"]
    rate_text = "trace timestamps" if rate["value"] is None else f"{rate['value']:.4g} req/s ({rate['source']})"
    return (f"{report['numbers_from']}; profile `{report['profile']['key']}`; seed {report['seed']}, "
            f"{report['replications']} replication(s); arrival rate {rate_text}; latency interval: "
            f"{report['latency_interval']['method']} over the pooled requests (tripath/core/metrics.py).")
