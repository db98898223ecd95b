"""Reading and checking profile fields, so every error names the file and the dotted field path.

Two layers. ``JsonObject`` checks structure while parsing JSON (is it an object, which keys are
required, which are unknown, is a value a number or a string). The ``check_*`` functions check
values and run in the dataclasses' ``__post_init__``, so a profile built in code (by calibrate or
the seed script) is held to the same rules as one read from a file; their errors name a field
relative to the dataclass, and ``build`` prefixes it with the dataclass's place in the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from tripath.core.errors import InputError

T = TypeVar("T")
_MISSING: Any = object()

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


def join(path: str, name: str) -> str:
    """Dotted path of ``name`` inside ``path`` (the top level has an empty path)."""
    return f"{path}.{name}" if path else name


class JsonObject:
    """One JSON object being read; every key must be read exactly once or ``finish`` rejects it."""

    def __init__(self, raw: object, source: str | None, path: str) -> None:
        if not isinstance(raw, dict):
            raise InputError(source, path or "(top level)", f"must be an object, got {json_type(raw)}")
        self.raw: dict[str, Any] = raw
        self.source = source
        self.path = path
        self._read: set[str] = set()

    def where(self, name: str) -> str:
        return join(self.path, name)

    def error(self, name: str, problem: str) -> InputError:
        return InputError(self.source, self.where(name), problem)

    def get(self, name: str, default: Any = _MISSING) -> Any:
        """The raw value of ``name``; missing is an error unless a default is given."""
        self._read.add(name)
        if name in self.raw:
            return self.raw[name]
        if default is _MISSING:
            raise self.error(name, "missing required field")
        return default

    def string(self, name: str, default: Any = _MISSING) -> Any:
        value = self.get(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            raise self.error(name, f"must be a string, got {json_type(value)}")
        return value

    def integer(self, name: str, default: Any = _MISSING) -> Any:
        value = self.get(name, default)
        if value is default and default is not _MISSING:
            return value
        # bool is an int in Python but not in JSON; 3.0 is a number but not a count.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(name, f"must be an integer, got {json_type(value)} {value!r}")
        return value

    def number(self, name: str, default: Any = _MISSING) -> Any:
        value = self.get(name, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(name, f"must be a number, got {json_type(value)}")
        return value

    def array(self, name: str, default: Any = _MISSING) -> Any:
        value = self.get(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list):
            raise self.error(name, f"must be an array, got {json_type(value)}")
        return value

    def child(self, name: str) -> JsonObject:
        """The nested object ``name`` (required)."""
        return JsonObject(self.get(name), self.source, self.where(name))

    def mapping(self, name: str, default: Any = _MISSING) -> Any:
        """The nested object ``name`` as a plain dict of raw values (for name -> item tables)."""
        value = self.get(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, dict):
            raise self.error(name, f"must be an object, got {json_type(value)}")
        return value

    def finish(self) -> None:
        """Reject fields this reader never asked for: a typo must not be silently ignored."""
        for name in self.raw:
            if name not in self._read:
                raise self.error(name, "unknown field")


def number_list(raw: object, source: str | None, path: str) -> list[float]:
    """A JSON array of numbers."""
    if not isinstance(raw, list):
        raise InputError(source, path, f"must be an array, got {json_type(raw)}")
    for i, item in enumerate(raw):
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise InputError(source, f"{path}[{i}]", f"must be a number, got {json_type(item)}")
    return [float(x) for x in raw]


def build(factory: Callable[..., T], file: str | None, path: str, /, **kwargs: Any) -> T:
    """Construct a dataclass, moving a value error from its ``__post_init__`` to its place in the file.

    Positional-only, because dataclass fields such as ``source`` travel in ``kwargs``.
    """
    try:
        return factory(**kwargs)
    except InputError as err:
        if getattr(err, "placed", False):  # a nested build already gave the full path
            raise
        placed = InputError(file, join(path, err.field or ""), err.problem)
        placed.placed = True
        raise placed from None


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
