"""How the planning pages run tripath/planning/'s sweeps: the CLI's functions, with a progress bar and caches.

Two caches, as the CLI has one: planning's own on-disk ResultCache (``.tripath-cache/``, keyed by a
hash of scenario + profile + seed + replications + code version; what `tripath matrix|plan|whatif`
use by default) and, per browser session, the last answers by their full inputs, so moving between
pages never re-runs a sweep. ``ProgressExecutor`` wraps planning's executor and moves an
st.progress bar as jobs finish (the CLI's tqdm bar still ticks: it is passed along).

A run can be stopped: the **Stop** button beside the bar makes Streamlit rerun the page, which ends the running
script at its next Streamlit call (the bar's next tick, after the job in hand). Nothing half-done is kept: the
session's memo and the page's result are written only after the whole run returned, planning's disk cache holds
only whole simulations (written atomically, tripath/planning/cache.py), and a process pool drops the jobs it had
not started (tripath/planning/executor.py). The page keeps its previous answer and says the run was stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

from tripath.app.widgets import state
from tripath.planning.cache import DEFAULT_CACHE_DIR, ResultCache
from tripath.planning.executor import LocalPoolExecutor

MEMO = "planning_memo"  # session_state: {inputs as canonical JSON: JSON-ready result}
STOPPED = "planning_stopped"  # session_state: the label of the run the Stop button ended (shown once)


class _Ticker:
    """Anything with update(n): counts finished jobs onto the page's bar and the CLI's tqdm bar."""

    def __init__(self, bar: Any, total: int, label: str, inner: Any, unit: str = "simulations") -> None:
        self.bar, self.total, self.label, self.inner, self.unit, self.done = bar, max(total, 1), label, inner, unit, 0
        self.bar.progress(0.0, text=f"{label}: 0/{total} {unit} done")

    def update(self, n: int = 1) -> None:
        self.done += n
        self.bar.progress(min(self.done / self.total, 1.0),
                          text=f"{self.label}: {self.done}/{self.total} {self.unit} done")
        if self.inner is not None:
            self.inner.update(n)


@dataclass
class ProgressExecutor:
    """tripath.planning.executor's interface (name, map) around another executor, with a visible bar."""

    inner: Any
    bar: Any
    label: str
    unit: str = "simulations"  # what one mapped job is: a simulation (matrix, what-if), a candidate's search (plan)

    @property
    def name(self) -> str:
        return self.inner.name

    def map(self, fn: Callable[[Any], Any], specs: Sequence[Any], progress: Any = None) -> list[Any]:
        return self.inner.map(fn, specs, _Ticker(self.bar, len(specs), self.label, progress, self.unit))


@dataclass(frozen=True)
class SweepSettings:
    seed: int
    replications: int
    workers: int
    disk_cache: bool


def controls(prefix: str, replications: int = 1) -> SweepSettings:
    """The sweep options every planning page offers (the CLI's --seed --replications --workers --no-cache)."""
    with st.expander("sweep options (seed, replications, workers, cache)"):
        cols = st.columns(4)
        seed = int(cols[0].number_input("seed", 0, 2**31 - 1, **state.bind(f"{prefix}.seed", 0, state.SEED)))
        reps = int(cols[1].number_input("replications", 1, 50, help="more replications narrow the intervals",
                                        **state.bind(f"{prefix}.replications", replications)))
        workers = int(cols[2].number_input("local workers (processes)", 1, 256,
                                           help="processes in planning's local pool (the CLI's --workers)",
                                           **state.bind(f"{prefix}.workers", 1)))
        disk = cols[3].checkbox("use the result cache",
                                help=f"planning's on-disk cache ({DEFAULT_CACHE_DIR}/), as the CLI uses it",
                                **state.bind(f"{prefix}.cache", True))
    stopped = st.session_state.pop(STOPPED, None)
    if stopped is not None:
        st.info(f"Stopped: the {stopped} was not finished, so nothing of it is shown or kept (whole simulations "
                "it had finished stay in the result cache and are reused next time).")
    return SweepSettings(seed, reps, workers, disk)


def _stop(label: str) -> None:
    st.session_state[STOPPED] = label


def run(label: str, inputs: dict[str, Any], settings: SweepSettings,
        call: Callable[[Any, ResultCache | None], dict[str, Any]], unit: str = "simulations") -> dict[str, Any]:
    """``call(executor, cache)`` once per distinct inputs this session; while it runs, a bar counts ``unit``
    done out of the total and a Stop button ends it (see the module doc)."""
    key = json.dumps({"label": label, **inputs, "seed": settings.seed, "replications": settings.replications},
                     sort_keys=True, default=str)
    memo = st.session_state.setdefault(MEMO, {})
    if key in memo:
        return memo[key]
    box = st.empty()
    with box.container():
        bar = st.progress(0.0, text=f"{label}: starting (simulations already in the result cache are read, "
                                    "not run again)")
        st.button("Stop", key=f"stop {label}", on_click=_stop, args=(label,),
                  help="ends the run after the job in hand; the page keeps its last answer")
    executor = ProgressExecutor(LocalPoolExecutor(settings.workers), bar, label, unit)
    cache = ResultCache(DEFAULT_CACHE_DIR) if settings.disk_cache else None
    try:
        result = call(executor, cache)
    finally:
        box.empty()
    memo[key] = result
    return result
