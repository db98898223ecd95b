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
# A model's shapes in an HF config.json (vocabulary, widths, heads, layers, context window): no published
# LLaMA-family model comes near (the largest: a 256K vocabulary, 53K-wide MLP, 126 layers, a 10M-token window),
# and past it the engine's RoPE tables and weights exhaust memory before the first forward.
MAX_MODEL_SIZE = 1 << 24
# Replications of one command (--replications), and the largest --seed (numpy seeds are non-negative).
MAX_REPLICATIONS = 1000
MAX_SEED = (1 << 63) - 1
# What the records of all replications may take, as a fraction of the machine's physical memory.
MEMORY_FRACTION = 0.5
# An estimate of the memory one simulated request takes through a run (arrays, record, summary rows).
BYTES_PER_REQUEST = 1024
# Simulated seconds an input may span (a trace's arrivals x time_scale, requests at a rate, duration_s, think and
# wait times): a float64 clock at 1e9 s (~32 years) still resolves 0.2 us; at 1e17 s it resolves 16 s, and every
# millisecond latency would print as 0.0.
MAX_SIMULATED_S = 1e9
# A trace's time_scale (the factor on its inter-arrival times): a day of arrivals in 0.09 s up to a million-fold
# slower; past either end the replay is no longer the trace's load.
MIN_TIME_SCALE = 1e-6
MAX_TIME_SCALE = 1e6
# An arrival rate given on the command line (--qps, serve --rate), requests per second: a request every ~3 hours
# up to a million a second (far past any fleet one simulation sizes).
MIN_RATE_PER_S = 1e-4
MAX_RATE_PER_S = 1e6
# GPUs of one simulated cluster (cluster.gpus): MAX_REPLICAS replicas of TP 8 x sequence-parallel degree 8. Every
# replica is simulated at every step (~60 us each), so a billion would run for days.
MAX_GPUS = 65_536
# Replicas a capacity search may try (recommend / plan --max-replicas).
MAX_REPLICAS = 1024
# Scenario variants one sweep simulates (whatif's --vary cross product): each is a whole simulation.
MAX_SWEEP_POINTS = 1000
# Requests one sweep simulates in all (points x replications x requests): ~1.5 hours on one core at ~20,000
# simulated requests a second, minutes on a pool.
MAX_SWEEP_REQUESTS = 100_000_000
# Windows of a load step's P99-per-window series (whatif --load-step --window-s); each pools its requests again.
MAX_WINDOWS = 10_000
# Draft tokens per speculative round (a scenario's speculative.k, breakeven --k): verify costs are measured up to
# K ~ 8; 64 is far past any deployed proposer.
MAX_SPECULATIVE_K = 64
# USD per GPU-hour (a price file, --gpu-price): list prices are ~$1-10; past $10,000 it is a typo, and costs
# computed from it could overflow to infinity.
MAX_USD_PER_GPU_HOUR = 10_000.0
# Worker processes of a local pool (--workers): a fork each, so a huge count is a fork bomb.
MAX_WORKERS = 1024
# CPU threads of torch (serve, calibrate --threads).
MAX_THREADS = 1024


def physical_memory_bytes() -> int | None:
    """This machine's physical memory, or None where the OS does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def check_memory(nbytes: int, source: str | None, field: str, what: str, advice: str) -> None:
    """Refuse ``what`` (taking ``nbytes``) when it would not fit MEMORY_FRACTION of this machine's memory."""
    memory = physical_memory_bytes()
    if memory is None:
        return
    if nbytes > int(memory * MEMORY_FRACTION):
        raise InputError(source, field, f"{what} need about {nbytes >> 20:,} MiB, more than {MEMORY_FRACTION:.0%} "
                                        f"of this machine's {memory >> 20:,} MiB; {advice}")


def check_fits(requests: int, source: str | None, field: str) -> None:
    """Refuse a run whose ``requests`` (over all replications) would not fit this machine's memory."""
    check_memory(requests * BYTES_PER_REQUEST, source, field, f"{requests:,} requests",
                 "use fewer requests or replications")


def check_count(count: int, limit: int, source: str | None, field: str, what: str) -> None:
    """Refuse a product of user-given counts (``count`` of ``what``) past its ``limit``, before any of the work
    it counts starts, with the limit in the message."""
    if count > limit:
        raise InputError(source, field, f"{count:,} {what}: more than the limit of {limit:,} "
                                        "(docs/cli_contract.md)")


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
