"""Checking the values of profile fields: the ``check_*`` functions and the hooks built from them.

A hook is ``hook(field_name, value) -> value kept``, declared with a dataclass field
(``tripath/profile/codec.py`` ``json_field``) and run when the dataclass is built, so a profile built
in code (by calibrate or the seed script) is held to the same rules as one read from a file. Errors
name the field relative to the dataclass; the codec prefixes the dataclass's place in the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tripath.core.errors import InputError, shown
from tripath.core.limits import MAX_INT

Hook = Callable[[str, Any], Any]

# The provenance vocabulary of one number (a coefficient, a memory budget, an acceptance).
VALUE_SOURCES = ("measured", "fitted", "projected", "published", "seed", "derived")

# The physical range of a profile's cost numbers. Far outside it a number is a typo or a unit slip, and a run on
# it would print latencies of hundreds of digits or overflow to infinity (a --json report cannot hold those).
# No one kernel step (an iteration, a merge, a transfer's setup) takes more than an hour; a cost per token, per
# sequence or per query-key pair is held to the same hour. The shipped profiles' largest step is ~2 minutes.
MAX_STEP_MS = 3_600_000.0
# A link's bandwidth in GB/s is at least 1 KB/s (slower than any link a KV cache pages over): it divides a
# transfer's bytes, so the floor keeps a transfer's time finite. No ceiling: a fit over transfers too small to
# time has a slope near 0, a bandwidth far above any link's, and then prices a transfer at its setup (harmless).
MIN_LINK_GBPS = 1e-6
# A ratio of one cost to another (a draft step to a target step, a verify pass or a compressed step to a plain
# decode step, a sequence-parallel speedup): within a factor of 1000 either way (shipped: 0.007 .. 8).
MAX_COST_RATIO = 1000.0


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def check_number(field: str, value: object, *, low: float = 0.0, positive: bool = False,
                 high: float | None = None) -> float:
    """A finite number >= low (> low when ``positive``, <= high when given), returned as float; an integer past
    a float's range counts as infinite (refused, not an OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(None, field, f"must be a number, got {json_type(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    bad = not math.isfinite(number) or number < low or (positive and number <= low)
    bad = bad or (high is not None and number > high)
    if bad:
        bound = f"> {low:g}" if positive else f">= {low:g}"
        if high is not None:
            bound += f" and <= {high:g}"
        raise InputError(None, field, f"must be a finite number {bound}, got {shown(value)}")
    return number


def check_count(field: str, value: object, *, low: int = 0) -> int:
    """An integer in low..MAX_INT (2^53: exact as a float, and room for products in int64)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(None, field, f"must be an integer, got {json_type(value)} {shown(value)}")
    if value < low:
        raise InputError(None, field, f"must be an integer >= {low}, got {shown(value)}")
    if value > MAX_INT:
        raise InputError(None, field, f"must be an integer <= 2^53, got {shown(value)}")
    return value


def check_text(field: str, value: object, *, allowed: tuple[str, ...] | None = None,
               nonempty: bool = True) -> str:
    """A string, non-empty unless told otherwise, one of ``allowed`` when given."""
    if not isinstance(value, str):
        raise InputError(None, field, f"must be a string, got {json_type(value)}")
    if nonempty and not value:
        raise InputError(None, field, "must not be empty")
    if allowed is not None and value not in allowed:
        raise InputError(None, field, f"must be one of {', '.join(allowed)}; got {value!r}")
    return value


def number(*, low: float = 0.0, positive: bool = False, high: float | None = None) -> Hook:
    """Hook: ``check_number`` with these bounds (the value is kept as a float)."""
    return lambda field, value: check_number(field, value, low=low, positive=positive, high=high)


def count(low: int = 0) -> Hook:
    """Hook: ``check_count`` with this lower bound."""
    return lambda field, value: check_count(field, value, low=low)


def text(*, allowed: tuple[str, ...] | None = None, nonempty: bool = True) -> Hook:
    """Hook: ``check_text`` with these options."""
    return lambda field, value: check_text(field, value, allowed=allowed, nonempty=nonempty)


def each(check: Hook) -> Hook:
    """Hook: a sequence whose items each pass ``check`` (named ``field[i]``), kept as a tuple."""
    return lambda field, values: tuple(check(f"{field}[{i}]", value) for i, value in enumerate(values))


def entries(check: Hook, *, counted: bool = False) -> Hook:
    """Hook: a dict whose values each pass ``check`` (named ``field.key``); ``counted``: its keys are
    integers >= 1 and it is kept sorted by key."""

    def run(field: str, values: dict[Any, Any]) -> dict[Any, Any]:
        for key in values:
            if counted:
                check_count(f"{field}.{key}", key, low=1)
        out = {key: check(f"{field}.{key}", value) for key, value in values.items()}
        return dict(sorted(out.items())) if counted else out

    return run
