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

from tripath.core.errors import InputError

Hook = Callable[[str, Any], Any]

# The provenance vocabulary of one number (a coefficient, a memory budget, an acceptance).
VALUE_SOURCES = ("measured", "fitted", "projected", "published", "seed", "derived")


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
    """A finite number >= low (> low when ``positive``, <= high when given), returned as float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(None, field, f"must be a number, got {json_type(value)}")
    bad = not math.isfinite(value) or value < low or (positive and value <= low)
    bad = bad or (high is not None and value > high)
    if bad:
        bound = f"> {low:g}" if positive else f">= {low:g}"
        if high is not None:
            bound += f" and <= {high:g}"
        raise InputError(None, field, f"must be a finite number {bound}, got {value!r}")
    return float(value)


def check_count(field: str, value: object, *, low: int = 0) -> int:
    """An integer >= low."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(None, field, f"must be an integer, got {json_type(value)} {value!r}")
    if value < low:
        raise InputError(None, field, f"must be an integer >= {low}, got {value!r}")
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
