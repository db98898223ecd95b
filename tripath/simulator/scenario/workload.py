"""The workload generator: a scenario's WorkloadSpec and a seeded rng become a list of RequestSpecs.

Arrivals, prompt lengths, output lengths and tasks each draw from their own child generator
(spawned from the caller's rng), so changing one distribution leaves the others' draws unchanged:
two scenario variants run on the same seed see the same arrival times (common random numbers).
"""

from __future__ import annotations

import math

import numpy as np

from tripath.core.errors import InputError
from tripath.core.limits import MAX_REQUESTS, MAX_SIMULATED_S, MAX_TOKENS
from tripath.core.request import RequestSpec
from tripath.simulator.scenario.prefix_workload import (
    RequestPrefixes,
    cycle_prompt_lengths,
    request_prefixes,
    shared_prompt_lengths,
)
from tripath.simulator.scenario.scenario import ArrivalSpec, LengthSpec, WorkloadSpec
from tripath.simulator.scenario.traces import Trace, load_trace

# Poisson/gamma inter-arrivals are drawn in chunks; the stream is the same as one at a time.
_CHUNK = 4096
CLOSED_LOOP_REFUSED = ("'closed' (a closed loop of users) has no arrival times before the run, only "
                       "`tripath simulate` (and what runs it) can send it; use poisson, gamma, constant or trace")


def generate_requests(
    workload: WorkloadSpec, rng: np.random.Generator, rate_per_s: float | None, closed_loop: bool = False
) -> list[RequestSpec]:
    """Requests sorted by arrival. rate_per_s is the resolved rate for poisson/gamma; ignored for traces.
    ``closed_loop``: see generate_arrays."""
    arrivals, prompts, outputs, names, picks = generate_arrays(workload, rng, rate_per_s, closed_loop)
    return [
        RequestSpec(i, float(arrivals[i]), int(prompts[i]), int(outputs[i]), names[picks[i]])
        for i in range(arrivals.shape[0])
    ]


def generate_with_prefixes(workload: WorkloadSpec, rng: np.random.Generator, rate_per_s: float | None,
                           block_tokens: int, closed_loop: bool = False
                           ) -> tuple[list[RequestSpec], RequestPrefixes]:
    """generate_requests' requests (the same draws) and each one's prompt block keys for prefix caching; the
    keys draw from a fifth child of ``rng``, after the four generate_arrays spawns, so the requests stay the same."""
    arrivals, prompts, outputs, names, picks = generate_arrays(workload, rng, rate_per_s, closed_loop)
    requests = [RequestSpec(i, float(arrivals[i]), int(prompts[i]), int(outputs[i]), names[picks[i]])
                for i in range(arrivals.shape[0])]
    trace_ids, trace_name = None, None
    if workload.arrival.kind == "trace":
        trace = _arrival_trace(workload.arrival)
        trace_name = workload.arrival.trace
        if trace.hash_ids is not None:
            rows = _replayed_rows(workload, trace, trace_time_scale(workload, trace))
            trace_ids = tuple(trace.hash_ids[int(row)] for row in rows)
    prefixes = request_prefixes(workload.prefix, prompts, picks, names, trace_ids, trace_name, block_tokens,
                                rng.spawn(1)[0])
    return requests, prefixes


def generate_arrays(
    workload: WorkloadSpec, rng: np.random.Generator, rate_per_s: float | None, closed_loop: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The same draws as generate_requests as arrays (arrival_s, prompt, output, task names, task index):
    a million requests as arrays take ~32 MB instead of a list of objects (tripath/simulator/loop/streaming.py).

    A closed loop's arrival times are decided during the run (tripath/simulator/loop/cluster.py ClosedLoop): its
    arrival_s are all 0, and only a caller that sends them itself may ask for them (``closed_loop``); any other
    is refused with one InputError, never handed those zeros as times."""
    arrival_rng, prompt_rng, output_rng, task_rng = rng.spawn(4)
    arrival = workload.arrival
    rows: np.ndarray | None = None  # trace row of each request (trace replay only)
    if arrival.kind == "closed":
        if not closed_loop:
            raise InputError(None, "workload.arrival.kind", CLOSED_LOOP_REFUSED)
        assert workload.requests is not None  # WorkloadSpec requires it for a closed loop
        arrivals = np.zeros(workload.requests)
    elif arrival.kind == "trace":
        trace = _arrival_trace(arrival)
        scale = trace_time_scale(workload, trace)
        rows = _replayed_rows(workload, trace, scale)
        arrivals = trace.arrival_s[rows] * scale
        if arrivals.shape[0] and arrivals[-1] > MAX_SIMULATED_S:  # rows are in time order
            field = "time_scale" if arrival.rate_per_s is None else "rate_per_s"
            raise InputError(trace.source_path, f"workload.arrival.{field}",
                             f"the replayed rows span {arrivals[-1]:.3g} s at time scale {scale:.3g}, more than the "
                             f"{MAX_SIMULATED_S:g} s a simulated clock keeps to the ms")
    else:
        if rate_per_s is None or not (math.isfinite(rate_per_s) and rate_per_s > 0):
            raise InputError(None, "workload.arrival.rate_per_s", f"must be > 0, got {rate_per_s}")
        arrivals = _renewal_arrivals(workload, arrival, rate_per_s, arrival_rng)
    n = arrivals.shape[0]
    prompts = _lengths(workload.prompt_tokens, "prompt", n, prompt_rng, workload, rows)
    outputs = _lengths(workload.output_tokens, "output", n, output_rng, workload, rows)
    if workload.prefix is not None and workload.prefix.kind == "shared":  # the drawn lengths: question, answer
        prompts = shared_prompt_lengths(workload.prefix, prompts, outputs)
    if workload.prefix is not None and workload.prefix.kind == "cycle":  # the first N draws are the N prompts
        prompts = cycle_prompt_lengths(workload.prefix, prompts)
    names = [task for task, _ in workload.tasks]
    weights = np.array([weight for _, weight in workload.tasks])
    picks = np.zeros(n, dtype=np.int64)
    if len(names) > 1:  # a single task draws nothing, so adding a task mix changes only task_rng's stream
        picks = task_rng.choice(len(names), size=n, p=weights / weights.sum())
    return arrivals, prompts, outputs, names, picks


def mean_lengths(workload: WorkloadSpec) -> tuple[float, float]:
    """(mean prompt tokens, mean output tokens) of the requests generate_requests would make.

    Exact for fixed, uniform, empirical and trace lengths (sums over the integer support or the
    trace column, after the min/max clamp). Lognormal uses the closed form of a clamped continuous
    lognormal; rounding to whole tokens changes that by well under one token.
    """
    rows = None
    if workload.arrival.kind == "trace":
        trace = _arrival_trace(workload.arrival)
        rows = _replayed_rows(workload, trace, trace_time_scale(workload, trace))
    prompt = _mean_length(workload.prompt_tokens, "prompt", workload, rows)
    output = _mean_length(workload.output_tokens, "output", workload, rows)
    shared = workload.prefix
    if shared is not None and shared.kind == "shared":  # turns equally often: (turns - 1) / 2 earlier turns each
        assert shared.system_tokens is not None and shared.turns is not None
        prompt = shared.system_tokens + prompt + (shared.turns - 1) / 2.0 * (prompt + output)
    if shared is not None and shared.kind == "cycle":  # the N prompts are draws of the same distribution
        prompt += shared.system_tokens or 0
    return prompt, output


def _arrival_trace(arrival: ArrivalSpec) -> Trace:
    assert arrival.trace is not None  # ArrivalSpec guarantees it for kind = "trace"
    trace = load_trace(arrival.trace)
    if not trace.timed:
        raise InputError(trace.source_path, "workload.arrival.trace", "a length-only trace has no arrival times to "
                                                                       "replay: bootstrap its lengths (empirical) "
                                                                       "with poisson, gamma or constant arrivals")
    return trace


def _trace_column(workload: WorkloadSpec, column: str, rows: np.ndarray | None) -> np.ndarray:
    """The replayed rows' own lengths; WorkloadSpec allows kind = "trace" only with trace arrivals."""
    if rows is None:
        raise InputError(None, f"workload.{column}_tokens.kind", "'trace' needs arrival kind = 'trace'")
    return _arrival_trace(workload.arrival).column(column)[rows]


def _replayed_rows(workload: WorkloadSpec, trace: Trace, scale: float) -> np.ndarray:
    """Trace rows in replay order: the first N, those before duration_s (at ``scale``), or all of them."""
    if workload.requests is not None:
        if workload.requests > len(trace):
            problem = f"asks for {workload.requests} requests, the trace has {len(trace)}"
            raise InputError(trace.source_path, "workload.requests", problem)
        return np.arange(workload.requests)
    if workload.duration_s is not None:
        scaled = trace.arrival_s * scale
        return np.arange(int(np.searchsorted(scaled, workload.duration_s, side="left")))
    return np.arange(len(trace))


def trace_time_scale(workload: WorkloadSpec, trace: Trace) -> float:
    """The factor on a trace's arrival times: ``time_scale``, or, with ``rate_per_s``, the one at which the
    replayed rows' mean inter-arrival time is 1 / rate_per_s (their burstiness kept, only the pace changed).

    Rows are the first ``requests`` (or all); with ``duration_s`` the window holds round(rate x duration) rows,
    so the scale puts that row's arrival at the window's end."""
    arrival = workload.arrival
    if arrival.rate_per_s is None:
        return arrival.time_scale
    rate, times = arrival.rate_per_s, trace.arrival_s
    if workload.requests is None and workload.duration_s is not None:
        k = max(2, round(rate * workload.duration_s))
        if k >= len(trace) or times[k] <= times[0]:
            problem = (f"{rate} req/s over duration_s {workload.duration_s} needs {k} rows, the trace has "
                       f"{len(trace)}")
            raise InputError(trace.source_path, "workload.arrival.rate_per_s", problem)
        return workload.duration_s / float(times[k])
    n = len(trace) if workload.requests is None else workload.requests
    span = float(times[n - 1] - times[0]) if 2 <= n <= len(trace) else 0.0
    if span <= 0.0:
        raise InputError(trace.source_path, "workload.arrival.rate_per_s",
                         f"the replayed rows ({n}) span no time: a rate cannot be set")
    return (n - 1) / (span * rate)


def _renewal_arrivals(
    workload: WorkloadSpec, arrival: ArrivalSpec, rate_per_s: float, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times of a renewal process: exponential (poisson), gamma or constant inter-arrivals, mean 1/rate.

    constant: every gap 1/rate, the fixed-rate load of benchmark clients (inference-perf's "constant"); it
    draws nothing from ``rng``."""

    def gaps(size: int) -> np.ndarray:
        if arrival.kind == "constant":
            return np.full(size, 1.0 / rate_per_s)
        if arrival.kind == "poisson":
            return rng.exponential(1.0 / rate_per_s, size)
        # gamma with shape k = 1/cv^2 and scale 1/(rate k): mean 1/rate, std cv/rate
        shape = 1.0 / (arrival.cv * arrival.cv)
        return rng.gamma(shape, 1.0 / (rate_per_s * shape), size)

    if workload.requests is not None:
        return np.cumsum(gaps(workload.requests))
    assert workload.duration_s is not None
    times: list[np.ndarray] = []
    last = 0.0
    while last < workload.duration_s:
        if len(times) * _CHUNK > MAX_REQUESTS:
            raise InputError(None, "workload.duration_s", f"{workload.duration_s:g} s at {rate_per_s:g} req/s "
                                                          f"is more than {MAX_REQUESTS:,} requests")
        chunk = last + np.cumsum(gaps(_CHUNK))
        times.append(chunk)
        last = float(chunk[-1])
    all_times = np.concatenate(times)
    return all_times[all_times < workload.duration_s]


def _lengths(
    spec: LengthSpec,
    column: str,
    n: int,
    rng: np.random.Generator,
    workload: WorkloadSpec,
    rows: np.ndarray | None,
) -> np.ndarray:
    """n token counts from spec, clamped to [min, max]. column names the trace column for kind = trace."""
    if spec.kind == "fixed":
        raw = np.full(n, spec.value, dtype=np.int64)
    elif spec.kind == "uniform":
        raw = rng.integers(spec.low, spec.high, size=n, endpoint=True)
    elif spec.kind == "lognormal":
        # median m of a lognormal is exp(mu): mu = ln m
        # capped at MAX_TOKENS before the cast: a huge sigma's draws (even inf) never wrap around int64
        draws = rng.lognormal(math.log(spec.median), spec.sigma, size=n)
        raw = np.rint(np.minimum(draws, MAX_TOKENS)).astype(np.int64)
    elif spec.kind == "empirical":
        values = load_trace(spec.trace).column(spec.column)
        raw = values[rng.integers(0, values.shape[0], size=n)]
    else:  # "trace": row-aligned with the replayed arrivals
        raw = _trace_column(workload, column, rows)
    return np.clip(raw, spec.min, spec.max if spec.max is not None else None)


def _mean_length(spec: LengthSpec, column: str, workload: WorkloadSpec, rows: np.ndarray | None) -> float:
    hi = spec.max if spec.max is not None else np.iinfo(np.int64).max
    if spec.kind == "fixed":
        return float(min(max(spec.value, spec.min), hi))
    if spec.kind == "uniform":
        return _clamped_uniform_mean(spec.low, spec.high, spec.min, hi)
    if spec.kind == "empirical":
        return float(np.clip(load_trace(spec.trace).column(spec.column), spec.min, hi).mean())
    if spec.kind == "trace":
        return float(np.clip(_trace_column(workload, column, rows), spec.min, hi).mean())
    return _clamped_lognormal_mean(math.log(spec.median), spec.sigma, spec.min, spec.max)


def _clamped_uniform_mean(low: int, high: int, lo: int, hi: int) -> float:
    """Mean of clip(K, lo, hi) for K uniform on the integers low..high, without enumerating them."""
    below = max(0, min(high, lo - 1) - low + 1)  # values raised to lo
    above = max(0, high - max(low, hi + 1) + 1)  # values lowered to hi
    first, last = max(low, lo), min(high, hi)
    inside = (first + last) * (last - first + 1) // 2 if last >= first else 0  # arithmetic series
    return (lo * below + hi * above + inside) / (high - low + 1)


def _clamped_lognormal_mean(mu: float, sigma: float, lo: float, hi: float | None) -> float:
    """E[clip(X, lo, hi)] for X ~ LogNormal(mu, sigma).

    E = lo P(X<lo) + hi P(X>hi) + E[X; lo<=X<=hi], and the partial expectation of a lognormal is
    exp(mu + sigma^2/2) (Phi((ln hi - mu - sigma^2)/sigma) - Phi((ln lo - mu - sigma^2)/sigma)).
    """
    if sigma == 0.0:
        return float(min(max(math.exp(mu), lo), hi if hi is not None else math.inf))

    def phi(z: float) -> float:
        return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))

    z_lo = (math.log(lo) - mu) / sigma
    z_hi = (math.log(hi) - mu) / sigma if hi is not None else math.inf
    partial = math.exp(mu + sigma * sigma / 2.0) * (phi(z_hi - sigma) - phi(z_lo - sigma))
    upper = hi * (1.0 - phi(z_hi)) if hi is not None else 0.0
    return lo * phi(z_lo) + partial + upper
