"""Reading TOML tables into the scenario dataclasses: names and scalar types checked against the
dataclass fields, a hint for a misspelt name, trace references resolved, errors prefixed with the file
and the dotted section (tripath/simulator/scenario/scenario.py's ``scenario_from_dict`` drives it)."""

from __future__ import annotations

import difflib
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from tripath.core.errors import InputError, check_regular_file
from tripath.core.limits import MAX_INT
from tripath.simulator.scenario.traces import SHIPPED_TRACES, resolve_trace_path


def dotted(prefix: str, field: str | None) -> str:
    return ".".join(part for part in (prefix, field) if part)


def subtable(data: dict[str, Any], key: str, source: str | None, required: bool = False,
           prefix: str = "") -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        if required:
            raise InputError(source, dotted(prefix, key), "missing section")
        return {}
    if not isinstance(value, dict):
        raise InputError(source, dotted(prefix, key), f"must be a table, got {type(value).__name__}")
    return value


def check_keys(table: dict[str, Any], allowed: set[str], source: str | None, prefix: str) -> None:
    for key in table:
        if key not in allowed:
            # a shortened name ("rate" for "rate_per_s") beats a near spelling ("trace")
            near = [a for a in sorted(allowed) if a.startswith(key)] or difflib.get_close_matches(
                key, sorted(allowed), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; valid: {', '.join(sorted(allowed))}"
            raise InputError(source, dotted(prefix, key), f"unknown field{hint}")


def typed(value: object, kind: type, source: str | None, field: str) -> object:
    """TOML values against the dataclass annotation: ints for int, int or float for float (never bool)."""
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok:
        raise InputError(source, field, f"must be {'a number' if kind is float else kind.__name__}, "
                                        f"got {type(value).__name__} {_short(value)}")
    if isinstance(value, int) and abs(value) > MAX_INT:  # also keeps float(value) from overflowing
        raise InputError(source, field, f"must be at most {MAX_INT:,} in size, got {_short(value)}")
    return float(value) if kind is float else value  # type: ignore[arg-type]


def _short(value: object, limit: int = 60) -> str:
    """repr(value), cut to ``limit`` characters so a huge value cannot flood the one-line error."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's int-to-text digit limit
        return "an integer of more than 4,300 digits"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def build(cls: type, table: dict[str, Any], source: str | None, prefix: str) -> Any:
    """Check names and scalar types from cls's annotations, construct, and prefix any error."""
    names = {f.name: str(f.type) for f in fields(cls)}
    check_keys(table, set(names), source, prefix)
    for f in fields(cls):
        if f.name not in table and f.default is MISSING and f.default_factory is MISSING:
            raise InputError(source, dotted(prefix, f.name), "missing required field")
    kwargs = {}
    for key, value in table.items():
        annotation = names[key]
        scalar = next((t for t in (int, float, str) if annotation.split(" |")[0] == t.__name__), None)
        kwargs[key] = value if scalar is None or value is None else typed(value, scalar, source,
                                                                           dotted(prefix, key))
    try:
        return cls(**kwargs)
    except InputError as exc:
        raise InputError(source, dotted(prefix, exc.field), exc.problem) from None


def traced(table: dict[str, Any], source: str | None, prefix: str, base_dir: Path | None) -> dict[str, Any]:
    """A trace reference must name a shipped trace or an existing .csv/.jsonl file; paths become absolute."""
    ref = table.get("trace")
    if not isinstance(ref, str) or ref in SHIPPED_TRACES:
        return table
    path = resolve_trace_path(ref, base_dir)
    check_regular_file(path, f"{prefix}.trace")
    if not path.is_file():
        raise InputError(source, f"{prefix}.trace", f"trace file not found: {ref!r} (shipped traces: "
                                                    f"{', '.join(sorted(SHIPPED_TRACES))})")
    if path.suffix.lower() not in (".csv", ".jsonl"):
        raise InputError(source, f"{prefix}.trace", "trace must be a .csv (Azure) or .jsonl (Mooncake) file")
    return {**table, "trace": str(path)}
