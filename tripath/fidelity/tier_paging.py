"""The tiered engine's paging per request as the simulator books it: the stall of page moves, not of the read.

the engine's ``StepRecord.paging_stall_s`` is the main thread's whole time in the tiered cache: appending
the new K/V, copying every page of every layer into the attention buffer (which the paged engine also does,
as one vectorized gather inside its forward) and, once the pool overflows, moving pages and waiting for the
fetch-ahead thread. The simulator books the read's extra over the paged engine as the step's compute and only
the page moves as paging (tripath/simulator/paths/step.py, tiered_engine_rule.py), so the engine's stall is compared
only beyond what a step that moves nothing stalls.

That baseline is measured in the same run, from the same engine's steps that moved no page:
least squares (coefficients >= 0) of their stall on (sequences in the step, tokens attended to), i.e. a
per-sequence and a per-token part of the copy; a step that moved pages counts max(0, stall − baseline).
Every request in a step is stalled by that step's paging (the simulator's booking), so the per-request mean
is Σ_steps counted stall x batch size / completed requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

LINKS = ("device_host", "host_device", "host_ssd", "ssd_host")


def moved(step: Any) -> bool:
    """Whether the step moved any page over any link."""
    return any(getattr(step, f"paging_bytes_{link}", 0) for link in LINKS)


def resident_baseline(steps: Sequence[Any]) -> tuple[float, float]:
    """(s per sequence, s per token attended) of the stall of steps that moved nothing; (0, 0) without any."""
    rows = [(s.batch_size, s.total_context, s.paging_stall_s) for s in steps
            if not moved(s) and s.batch_size > 0]
    if len(rows) < 2:
        return 0.0, 0.0
    x = np.array([[b, t] for b, t, _ in rows], dtype=float)
    y = np.array([v for _, _, v in rows], dtype=float)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    if coef.min() < 0:  # one part negative: refit the other alone (non-negative least squares in 2-D)
        alone = [float(max(0.0, x[:, i] @ y / (x[:, i] @ x[:, i]))) for i in (0, 1)]
        errors = [float(np.sum((x[:, i] * alone[i] - y) ** 2)) for i in (0, 1)]
        coef = np.array([alone[0], 0.0]) if errors[0] <= errors[1] else np.array([0.0, alone[1]])
    return float(coef[0]), float(coef[1])


def move_stall_ms_per_request(steps: Sequence[Any], completed: int) -> float | None:
    """Mean stall of page moves per completed request, ms (module docstring); None without completions."""
    if not completed:
        return None
    per_seq, per_token = resident_baseline(steps)
    stalled = sum(max(0.0, s.paging_stall_s - per_seq * s.batch_size - per_token * s.total_context) * s.batch_size
                  for s in steps if moved(s))
    return stalled / completed * 1000.0
