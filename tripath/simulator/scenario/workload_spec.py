"""A scenario's workload: how requests arrive, how long their prompts and outputs are, the task mix.

Frozen dataclasses that validate themselves when built (tripath/simulator/scenario/checks.py); re-exported by
tripath/simulator/scenario/scenario.py. tripath/simulator/scenario/workload.py draws requests from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tripath.core.limits import MAX_REQUESTS, MAX_SIMULATED_S, MAX_TIME_SCALE, MAX_TOKENS, MIN_TIME_SCALE
from tripath.simulator.scenario.checks import at_least, at_most, check_kind, fail, only_for, positive
from tripath.simulator.scenario.prefix_workload import PrefixWorkloadSpec

ARRIVAL_KINDS = ("poisson", "gamma", "constant", "trace", "closed")
LENGTH_KINDS = ("fixed", "uniform", "lognormal", "empirical", "trace")
LENGTH_COLUMNS = ("prompt", "output")
# the parameters each length kind requires (and no other kind accepts); "trace" takes none
LENGTH_PARAMS = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("median", "sigma"),
                 "empirical": ("trace", "column")}

@dataclass(frozen=True)
class ArrivalSpec:
    kind: str  # "poisson" | "gamma" | "constant" (fixed gaps 1/rate, as load generators send) | "trace" | "closed"
    # exactly one of rate_per_s / load_fraction for poisson, gamma, constant; for a trace, optional: the replayed
    # rows' mean rate, their inter-arrival times scaled to it (workload.trace_time_scale), instead of time_scale
    rate_per_s: float | None = None
    load_fraction: float | None = None  # fraction of the replicas' saturation throughput (capacity.py)
    cv: float | None = None  # gamma only: coefficient of variation of inter-arrival times (1 = poisson)
    trace: str | None = None  # trace only: a shipped trace name (e.g. "azure-conv-2023") or a path
    time_scale: float = 1.0  # trace only: inter-arrival times are multiplied by this
    # closed only: concurrent users, each sending its next request think_s (default 0) after its previous one
    # ends (completed or rejected), as benchmark clients with a concurrency limit do (vLLM bench serve
    # --max-concurrency); arrival times are then decided during the run (tripath/simulator/loop/cluster.py)
    users: int | None = None
    think_s: float | None = None

    def __post_init__(self) -> None:
        check_kind(self.kind, ARRIVAL_KINDS)
        rated = ("poisson", "gamma", "constant")
        only_for(self, {"rate_per_s": (*rated, "trace"), "load_fraction": rated, "cv": ("gamma",),
                        "trace": ("trace",), "users": ("closed",), "think_s": ("closed",)})
        if self.kind == "closed" and self.users is None:
            fail("users", "required for kind = 'closed' (the number of concurrent users)")
        at_least("users", self.users, 1)
        at_most("users", self.users, MAX_REQUESTS)
        if self.think_s is not None and not (math.isfinite(self.think_s) and 0 <= self.think_s <= MAX_SIMULATED_S):
            fail("think_s", f"must be >= 0 and <= {MAX_SIMULATED_S:g} seconds, got {self.think_s}")
        positive("rate_per_s", self.rate_per_s)
        if self.load_fraction is not None and not (0.0 < self.load_fraction <= 2.0):
            fail("load_fraction", f"must be in (0, 2], got {self.load_fraction}")
        positive("cv", self.cv)
        positive("time_scale", self.time_scale)
        if not MIN_TIME_SCALE <= self.time_scale <= MAX_TIME_SCALE:  # past these a float clock loses the ms
            fail("time_scale", f"must be >= {MIN_TIME_SCALE:g} and <= {MAX_TIME_SCALE:g}, got {self.time_scale:g}")
        if self.kind in rated and (self.rate_per_s is None) == (self.load_fraction is None):
            fail("rate_per_s", "give exactly one of rate_per_s or load_fraction")
        if self.kind == "gamma" and self.cv is None:
            fail("cv", "required for kind = 'gamma'")
        if self.kind == "trace" and not self.trace:
            fail("trace", "required for kind = 'trace' (a shipped trace name or a file path)")
        if self.kind != "trace" and self.time_scale != 1.0:
            fail("time_scale", f"only valid for kind = trace, not {self.kind!r}")
        if self.kind == "trace" and self.rate_per_s is not None and self.time_scale != 1.0:
            fail("rate_per_s", "give a trace either rate_per_s (its pace scaled to that rate) or time_scale, not both")


@dataclass(frozen=True)
class LengthSpec:
    kind: str  # "fixed" | "uniform" | "lognormal" | "empirical" | "trace"
    value: int | None = None  # fixed
    low: int | None = None  # uniform (inclusive)
    high: int | None = None
    median: float | None = None  # lognormal: median and sigma of log
    sigma: float | None = None
    trace: str | None = None  # empirical: bootstrap from this trace's column
    column: str | None = None  # "prompt" | "output"
    min: int = 1  # clamp after sampling
    max: int | None = None

    def __post_init__(self) -> None:
        check_kind(self.kind, LENGTH_KINDS)
        only_for(self, {field: (kind,) for kind, params in LENGTH_PARAMS.items() for field in params})
        if self.min < 1:
            fail("min", f"must be >= 1 (every request has a token), got {self.min}")
        if self.max is not None and self.max < self.min:
            fail("max", f"must be >= min ({self.min}), got {self.max}")
        for field in LENGTH_PARAMS.get(self.kind, ()):
            if getattr(self, field) is None:
                fail(field, f"required for kind = {self.kind!r}")
        at_least("value", self.value, 1)
        at_least("low", self.low, 1)
        if self.low is not None and self.high is not None and self.high < self.low:
            fail("high", f"must be >= low ({self.low}), got {self.high}")
        positive("median", self.median)
        if self.sigma is not None and not (math.isfinite(self.sigma) and self.sigma >= 0):
            fail("sigma", f"must be >= 0, got {self.sigma}")
        for field in ("value", "low", "high", "min", "max"):
            at_most(field, getattr(self, field), MAX_TOKENS)
        if self.median is not None and self.median > MAX_TOKENS:
            fail("median", f"must be <= {MAX_TOKENS:,} tokens, got {self.median}")
        if self.column is not None and self.column not in LENGTH_COLUMNS:
            fail("column", f"must be one of {', '.join(LENGTH_COLUMNS)}, got {self.column!r}")


@dataclass(frozen=True)
class WorkloadSpec:
    arrival: ArrivalSpec
    prompt_tokens: LengthSpec
    output_tokens: LengthSpec
    tasks: tuple[tuple[str, float], ...] = (("default", 1.0),)  # task mix, weights sum to 1
    requests: int | None = None  # exactly one of requests / duration_s (a trace may give neither: all rows)
    duration_s: float | None = None
    prefix: PrefixWorkloadSpec | None = None  # [workload.prefix]: which prompt blocks requests share

    def __post_init__(self) -> None:
        if not self.tasks:
            fail("tasks", "needs at least one task")
        for task, weight in self.tasks:
            if not task:
                fail("tasks", "task names must be non-empty")
            if not (math.isfinite(weight) and weight > 0):
                fail(f"tasks.{task}", f"weight must be > 0, got {weight}")
        total = sum(weight for _, weight in self.tasks)
        if abs(total - 1.0) > 1e-9:  # normalise here so every producer gets a proper mix
            object.__setattr__(self, "tasks", tuple((t, w / total) for t, w in self.tasks))
        at_least("requests", self.requests, 1)
        at_most("requests", self.requests, MAX_REQUESTS)
        positive("duration_s", self.duration_s)
        if self.duration_s is not None and self.duration_s > MAX_SIMULATED_S:
            fail("duration_s", f"must be <= {MAX_SIMULATED_S:g} s of simulated time, got {self.duration_s:g}")
        rate = self.arrival.rate_per_s
        if (rate is not None and self.requests is not None and self.arrival.kind != "trace"
                and self.requests / rate > MAX_SIMULATED_S):
            fail("arrival.rate_per_s", f"{self.requests:,} requests at {rate:g} req/s span ~{self.requests / rate:.3g} "
                                       f"s, more than the {MAX_SIMULATED_S:g} s a simulated clock keeps to the ms")
        if rate is not None and self.duration_s is not None and rate * self.duration_s > MAX_REQUESTS:
            fail("duration_s", f"{self.duration_s:g} s at {rate:g} req/s is more than {MAX_REQUESTS:,} requests")
        if self.requests is not None and self.duration_s is not None:
            fail("requests", "give requests or duration_s, not both")
        if self.arrival.kind == "closed" and self.requests is None:
            fail("requests", "a closed loop needs requests = N (how many requests its users send in a duration "
                             "depends on the simulated latencies, so duration_s is not supported)")
        if self.arrival.kind != "trace" and self.requests is None and self.duration_s is None:
            fail("requests", "give requests or duration_s (only a trace replay may give neither)")
        for name, spec in (("prompt_tokens", self.prompt_tokens), ("output_tokens", self.output_tokens)):
            if spec.kind == "trace" and self.arrival.kind != "trace":
                fail(f"{name}.kind", "'trace' lengths need arrival kind = 'trace' (use 'empirical' instead)")
        if self.prefix is not None and self.prefix.kind == "trace" and self.arrival.kind != "trace":
            fail("prefix.kind", "'trace' block ids need arrival kind = 'trace' (a Mooncake trace)")

    @property
    def planned_requests(self) -> int | None:
        """The requests one replication draws when the scenario fixes them up front (``requests``, or rate x
        ``duration_s``); None when only the run knows (a load fraction's rate, a trace's rows)."""
        if self.requests is not None:
            return self.requests
        rate = self.arrival.rate_per_s
        if rate is not None and self.duration_s is not None and self.arrival.kind != "trace":
            return math.ceil(rate * self.duration_s)
        return None
