"""Shared pieces of the path sections' tables (tripath/profile/sections.py, tripath/profile/speculative.py):
integer keys written as JSON text, piecewise-linear lookup between measured points, coefficient checks."""

from __future__ import annotations

from typing import Any

from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient


def need_coefficient(name: str, value: object) -> None:
    if not isinstance(value, Coefficient):
        raise InputError(None, name, "must be a Coefficient")


def int_keyed(raw: dict[str, Any], source: str | None, path: str, what: str) -> dict[int, Any]:
    """A JSON object keyed by integers written as text (JSON keys are strings): {"4": x} -> {4: x}."""
    out = {}
    for text, value in raw.items():
        if not text.isdigit() or int(text) < 1:
            raise InputError(source, f"{path}.{text}", f"key must be {what} (an integer >= 1)")
        out[int(text)] = value
    return dict(sorted(out.items()))


def interpolate(points: dict[int, float], k: int, anchor: tuple[float, float] | None) -> float:
    """Piecewise-linear value at ``k`` through the measured ``points`` (and ``anchor``, a known point
    below them); beyond the largest point, the last segment's line, never below the largest point."""
    xs = sorted(points)
    pts = ([anchor] if anchor is not None and anchor[0] < xs[0] else []) + [(float(x), points[x]) for x in xs]
    if k in points:
        return points[k]
    if len(pts) == 1:
        return pts[0][1]
    if k <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if k <= x1:
            return y0 + (y1 - y0) * (k - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    return max(y1, y0 + (y1 - y0) * (k - x0) / (x1 - x0))
