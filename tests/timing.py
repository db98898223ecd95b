"""Time bounds in tests that still pass on a busy machine.

A bound in a test is either a hang guard (a timeout, a deadline, a wait for a server) or nothing: no test asserts
how fast a run went. A hang guard is written as ``slack(seconds)``, where ``seconds`` is enough on a quiet
machine; it is multiplied by TRIPATH_TEST_SLACK when set, else by 3 times the machine's load per core when that
is above 1 (the load at the time the bound is computed: module import for constants). A test that waits for
something to happen waits for the event itself (a process exiting, a file appearing), with a slack() guard.

Imports nothing from tripath: spawned ranks and subprocesses import it cheaply.
"""

from __future__ import annotations

import os

DEFAULT_FACTOR = 3.0


def slack_factor() -> float:
    """TRIPATH_TEST_SLACK, else 3 x max(1, 1-minute load average / cores)."""
    given = os.environ.get("TRIPATH_TEST_SLACK")
    if given:
        factor = float(given)
        if not factor > 0:
            raise ValueError(f"TRIPATH_TEST_SLACK: must be > 0, got {given!r}")
        return factor
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        per_core = 1.0
    return DEFAULT_FACTOR * max(1.0, per_core)


def slack(seconds: float) -> float:
    """A hang guard of ``seconds`` on a quiet machine, scaled for this one (module docstring)."""
    return seconds * slack_factor()
