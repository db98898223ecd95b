"""Inputs that hold across pages: the st.session_state keys the pages share, and widgets bound to them.

Streamlit forgets a widget's value when a run does not draw it (a page switch), and a widget's id
includes its page, so two pages never share a widget. A bound widget (``bind``) keeps its value in
a plain session_state slot instead, primes the widget from it on every run and writes a change back
from its on_change callback: the value survives page switches and is the same on every page bound
to the same slot.

Shared slots (plain Python values; any page, including the Recommendation page, may read them):

- ``PROFILE`` = "profile": the chosen profile's name (a shipped key, or "uploaded: FILE" for an upload of
  this session, whose JSON text is in tripath.app.widgets.profiles.UPLOADED).
- ``SCENARIO`` = "scenario": the shipped scenario a page starts from (a name under data/scenarios/).
- ``SEED`` = "seed", ``REPLICATIONS`` = "replications": the simulation's seed and replication count.
- ``SLA_MS`` = {"ttft": "sla_ttft_p99_ms", "tpot": "sla_tpot_p99_ms", "e2e": "sla_e2e_p99_ms"}: P99 targets
  in ms; 0 means no target for that term.
- ``PRICE`` = "gpu_price_usd_per_hour": the user's GPU price, USD per GPU-hour (0 = none given).
- ``QPS`` = "target_qps": the target load of the capacity planner, req/s.

A slot is absent until some page draws its widget; read it with ``st.session_state.get(KEY, default)``.
Page-own inputs (the explorer's scenario editor) are bound too, under ``KEPT`` by their widget key.

What the slots start with (the pages other than Recommendation): ``DEFAULT_PROFILE``, a measured-kernel GPU
profile (the default scenario's, data/scenarios/default.toml), and ``DEFAULT_SCENARIO``, a scenario on that
profile whose first run answers in seconds (data/scenarios/quickstart-gpu.toml). Because the profile slot is
shared, whichever page a user opens first, every page starts on the same profile, and each page's own defaults
are chosen to answer on it (docs/app.md lists what each page opens on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

PROFILE = "profile"
SCENARIO = "scenario"
SEED = "seed"
REPLICATIONS = "replications"
SLA_MS = {"ttft": "sla_ttft_p99_ms", "tpot": "sla_tpot_p99_ms", "e2e": "sla_e2e_p99_ms"}
PRICE = "gpu_price_usd_per_hour"
QPS = "target_qps"
KEPT = "kept_inputs"  # session_state: {widget key: value} for page-own inputs

DEFAULT_PROFILE = "aic-llama3.1-70b-tp4-a100"  # Llama-3.1-70B TP4 A100-80GB, aiconfigurator-core's measured kernels
DEFAULT_SCENARIO = "quickstart-gpu"  # Azure conversation lengths on one replica of DEFAULT_PROFILE, 1.5 req/s


def default_profile(choices: Sequence[str]) -> str:
    """DEFAULT_PROFILE when it is offered (it is shipped), else the first choice."""
    return DEFAULT_PROFILE if DEFAULT_PROFILE in choices else choices[0]


def _slot(key: str, shared: str | None) -> tuple[dict[str, Any], str]:
    """The dict and the name a widget's value is kept under (session_state itself for a shared slot)."""
    if shared is not None:
        return st.session_state, shared  # type: ignore[return-value]
    return st.session_state.setdefault(KEPT, {}), key


def _save(key: str, shared: str | None) -> None:
    store, name = _slot(key, shared)
    store[name] = st.session_state[key]


def bind(key: str, default: Any, shared: str | None = None, options: Sequence[Any] | None = None
         ) -> dict[str, Any]:
    """Keyword arguments for a widget keyed ``key`` whose value is kept in slot ``shared`` (or under KEPT).

    The kept value (``default`` the first time, or when ``options`` no longer holds it; for a list, the
    items ``options`` still holds) is written to
    the widget's key before it is drawn, so pass no ``value``/``index`` of its own. Returns key,
    on_change and args for the widget call.
    """
    store, name = _slot(key, shared)
    if name not in store:
        store[name] = default
    elif options is not None and isinstance(store[name], list):  # a multiselect: drop what is no longer offered
        store[name] = [v for v in store[name] if v in options]
    elif options is not None and store[name] not in options:
        store[name] = default
    st.session_state[key] = store[name]
    return {"key": key, "on_change": _save, "args": (key, shared)}


def kept(key: str, default: Any = None) -> Any:
    """The value a bound page-own widget keeps (``default`` before it was first drawn)."""
    return st.session_state.get(KEPT, {}).get(key, default)
