"""The bounds every user-given size is checked against before it is used (docs/cli_contract.md lists them).

Each limit stops one input from making memory grow without bound or a run hang: a scenario's request count,
the requests a duration implies, time-series samples, trace rows and bytes, token counts, and how deeply a
TOML or JSON file may nest. They are far above any shipped scenario, trace or profile.
"""

from __future__ import annotations

import os

from tripath.core.errors import InputError

# Requests one replication may hold (a scenario's `requests`, the arrivals a `duration_s` implies, a trace's
# rows). Drawn arrays take ~32 bytes a request and records a few hundred: 10 million fit a laptop.
MAX_REQUESTS = 10_000_000
# Tokens in one request's prompt or output: an int64 sum over MAX_REQUESTS such requests cannot overflow.
MAX_TOKENS = 100_000_000
# Rows (samples x replicas) of one replication's time series (--timeseries-interval): ~40 MB.
MAX_TIMESERIES_ROWS = 200_000
# Bytes of a trace file (read row by row) and of one of its lines.
MAX_TRACE_BYTES = 4 << 30
MAX_LINE_BYTES = 1 << 20
# Bytes of a scenario TOML file (read whole).
MAX_SCENARIO_BYTES = 1 << 20
# Bytes of a profile JSON: the CLI's reading limit and the app's upload limit (the largest shipped is ~90 KB).
MAX_PROFILE_BYTES = 1 << 20
# Nesting of tables and arrays in a scenario TOML, a profile JSON or a trace line.
MAX_NESTING_DEPTH = 32
# Any other integer in a scenario (batch sizes, GPUs, windows): within int64 with room for products.
MAX_INT = 1 << 53
# Replications of one command (--replications), and the largest --seed (numpy seeds are non-negative).
MAX_REPLICATIONS = 1000
MAX_SEED = (1 << 63) - 1
# What the records of all replications may take, as a fraction of the machine's physical memory.
MEMORY_FRACTION = 0.5
# An estimate of the memory one simulated request takes through a run (arrays, record, summary rows).
BYTES_PER_REQUEST = 1024


def physical_memory_bytes() -> int | None:
    """This machine's physical memory, or None where the OS does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def check_fits(requests: int, source: str | None, field: str) -> None:
    """Refuse a run whose ``requests`` (over all replications) would not fit this machine's memory."""
    memory = physical_memory_bytes()
    if memory is None:
        return
    budget = int(memory * MEMORY_FRACTION)
    if requests * BYTES_PER_REQUEST > budget:
        raise InputError(source, field, f"{requests:,} requests need about {requests * BYTES_PER_REQUEST >> 20:,} "
                                        f"MiB, more than {MEMORY_FRACTION:.0%} of this machine's "
                                        f"{memory >> 20:,} MiB; use fewer requests or replications")


def nesting_depth(value: object) -> int:
    """How deeply dicts and lists nest in ``value`` (a scalar is 0), walked without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            deepest = max(deepest, depth)
            continue
        deepest = max(deepest, depth + 1)
        if depth + 1 > MAX_NESTING_DEPTH:
            return depth + 1
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_depth(value: object, source: str | None, field: str | None = None) -> None:
    """An InputError when ``value`` nests deeper than MAX_NESTING_DEPTH."""
    if nesting_depth(value) > MAX_NESTING_DEPTH:
        raise InputError(source, field, f"nested more than {MAX_NESTING_DEPTH} levels deep")
