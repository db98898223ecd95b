"""What the summary needs of one replication's records, folded one record at a time in request order.

tripath/simulator/summary.py builds every number from these tallies, whether the records were held in memory
(a RunResult's records, folded after the run) or streamed to disk as the run went
(tripath/simulator/loop/streaming.py, put back in request order by ``InOrder``): one code path, so both give
the same summary bit for bit. The arithmetic is the one tripath/core/metrics.py does over a list of records
(the same float operations in the same order); tests/simulator/test_tally.py checks the two against each other.

Memory: the latencies are kept exactly, as float64 arrays (TTFT, TPOT, end-to-end and queueing: 32 bytes a
completed request), so the percentiles and their order-statistic intervals are numpy's own; everything else is
counters, except the admission times of the requests still waiting at the latest arrival (the waiting queue
below: 8 bytes each, plus a float). Nothing else grows with the number of requests.

The waiting queue (``peak_waiting``, ``overloaded``): right after request i arrives, the requests that have
arrived and are not yet admitted are W(i) = #{j <= i completed: admitted_j > arrival_i}. A run is *overloaded*
when its queue grew over the second half of its arrivals by more than OVERLOAD_GROWTH of them:
g = (W(last) - W(middle)) / (arrivals after the middle one) > 10 %, with at least OVERLOAD_MIN_ARRIVALS arrivals
after the middle one. g estimates 1 - 1/rho (rho: arrival rate over service rate), so 10 % is arrivals about 11 %
faster than the service; such a queue grows without bound with the run's length, and so do its latencies: they
describe this run's length, not a steady state. Measured on the quickstart scenario (seed profile, 3
replications): 4,000 requests at 0.6-0.95 x the saturation estimate give g <= 0.043, at 1.05 x 0.11-0.13, at 1.5 x
0.36-0.39; 1,000 requests at 0.8 x give up to 0.082 (a short run's queue wanders). Arrivals out of order (none in
a run of tripath's; a closed loop sends in request order) leave the queue unmeasured.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from heapq import heappop, heappush

import numpy as np

from tripath.core.metrics import LATENCY_METRICS, meets
from tripath.core.records import COMPLETED, REJECTED, ReplicaStats, RequestRecord

# Per-path record fields averaged over completed requests in the summary: (field, summary key, scale)
PATH_FIELDS = (("draft_rounds", "draft_rounds", 1.0), ("accepted_tokens", "accepted_tokens", 1.0),
               ("paging_s", "paging_ms", 1000.0), ("merge_s", "merge_ms", 1000.0), ("preemptions", "preemptions", 1.0))
# Growth of the waiting queue over the second half of the arrivals, per arrival, beyond which a run is overloaded.
OVERLOAD_GROWTH = 0.10
# Fewer arrivals in a half than this say nothing about a trend (a few requests waiting for the next boundary).
OVERLOAD_MIN_ARRIVALS = 100


class RunTally:
    """One replication's counts, SLA attainment, makespan, latencies and waiting queue, fed by ``add``.

    ``requests``: how many records will come (the middle one is where the queue's growth is measured from);
    ``ttft_ms``/``tpot_ms``/``e2e_ms``: the SLA's P99 targets (None: no such term), as metrics.sla_attainment.
    """

    def __init__(self, requests: int, ttft_ms: float | None = None, tpot_ms: float | None = None,
                 e2e_ms: float | None = None) -> None:
        self.requests = requests
        self._middle = (requests - 1) // 2
        self.targets_s = {term: None if ms is None else ms / 1000.0
                          for term, ms in (("ttft", ttft_ms), ("tpot", tpot_ms), ("e2e", e2e_ms))}
        self.arrived = self.completed = self.rejected = 0
        self.output_tokens = 0  # of completed requests
        self.first_arrival: float | None = None
        self.last_finish: float | None = None  # of completed requests
        self._given = tuple((term, target) for term, target in self.targets_s.items() if target is not None)
        self.met = dict.fromkeys((term for term, _ in self._given), 0)
        self.met_all = 0
        self.reasons: Counter[str] = Counter()
        # per-path sums over completed requests, in PATH_FIELDS' order (ints stay ints, as sum() keeps them)
        self._rounds = self._accepted = self._preemptions = 0
        self._paging: float = 0
        self._merge: float = 0
        self._ttft, self._tpot, self._e2e, self._queueing = array("d"), array("d"), array("d"), array("d")
        self._admissions: list[float] = []  # heap: admission times of requests still waiting
        self._last_arrival = -math.inf
        self.queue_measured = True
        self.peak_waiting = 0
        self._waiting_middle = 0
        self._waiting_last = 0

    def add(self, r: RequestRecord) -> None:
        """Fold one record in (records come in request order). Written out flat: it runs once per request."""
        arrival = r.arrival_s
        done = r.status == COMPLETED
        # the waiting queue W(i): drop the waiting requests admitted by now, add this one if it waits
        if arrival < self._last_arrival:
            self.queue_measured = False
            self._admissions.clear()
        self._last_arrival = arrival
        if self.queue_measured:
            heap = self._admissions
            while heap and heap[0] <= arrival:
                heappop(heap)
            if done and r.admitted_s > arrival:
                heappush(heap, r.admitted_s)
            waiting = len(heap)
            if waiting > self.peak_waiting:
                self.peak_waiting = waiting
            if self.arrived == self._middle:
                self._waiting_middle = waiting
            self._waiting_last = waiting
        self.arrived += 1
        if self.first_arrival is None or arrival < self.first_arrival:  # min(): the first of equal values
            self.first_arrival = arrival
        if r.reject_reason:
            self.reasons[r.reject_reason] += 1
        met_all = done
        for term, target in self._given:
            if meets(r, term, target):
                self.met[term] += 1
            else:
                met_all = False
        self.met_all += met_all
        if not done:
            self.rejected += r.status == REJECTED
            return
        self.completed += 1
        output = r.output_tokens
        self.output_tokens += output
        finish, first = r.finish_s, r.first_token_s
        if self.last_finish is None or finish > self.last_finish:  # max(): the first of equal values
            self.last_finish = finish
        self._ttft.append(first - arrival)
        if output >= 2:
            self._tpot.append((finish - first) / (float(output) - 1.0))
        self._e2e.append(finish - arrival)
        self._queueing.append(r.admitted_s - arrival)
        self._rounds += r.draft_rounds
        self._accepted += r.accepted_tokens
        self._paging += r.paging_s
        self._merge += r.merge_s
        self._preemptions += r.preemptions

    # -- what the summary reads ------------------------------------------------------------------------------

    def latencies(self, metric: str) -> np.ndarray:
        """The completed requests' values of one latency metric, seconds, request order (metrics.latencies)."""
        if metric not in LATENCY_METRICS:
            raise ValueError(f"unknown metric {metric!r}; known: {', '.join(LATENCY_METRICS)}")
        values = getattr(self, f"_{metric}")
        return np.frombuffer(values, dtype=float) if len(values) else np.empty(0)

    def counts(self) -> dict[str, int]:
        return {"arrived": self.arrived, "completed": self.completed, "rejected": self.rejected}

    def attainment(self) -> dict[str, float | None]:
        """metrics.sla_attainment: the fraction of arrived requests meeting each given term, and all of them."""
        n = self.arrived
        result: dict[str, float | None] = {}
        for term, target in self.targets_s.items():
            result[term] = None if target is None else (self.met[term] / n if n else math.nan)
        result["all"] = (self.met_all / n if n else math.nan) if self.met else None
        return result

    def makespan(self) -> float:
        """metrics.makespan: first arrival to last finish (0 when nothing completed)."""
        if self.last_finish is None or self.first_arrival is None:
            return 0.0
        return self.last_finish - self.first_arrival

    def throughput(self) -> dict[str, float]:
        span = self.makespan()
        if span <= 0.0:
            return {"requests_per_s": math.nan, "output_tokens_per_s": math.nan}
        return {"requests_per_s": self.completed / span, "output_tokens_per_s": self.output_tokens / span}

    def utilisation(self, replicas: tuple[ReplicaStats, ...]) -> list[float]:
        span = self.makespan()
        return [r.busy_s / span if span > 0.0 else math.nan for r in replicas]

    @property
    def path_sums(self) -> dict[str, float]:
        """Sums over completed requests of the per-path record fields (PATH_FIELDS' fields)."""
        return {"draft_rounds": self._rounds, "accepted_tokens": self._accepted, "paging_s": self._paging,
                "merge_s": self._merge, "preemptions": self._preemptions}

    def path_means(self) -> dict[str, float]:
        """Means per completed request of the per-path record fields (summary key -> value)."""
        n, sums = self.completed, self.path_sums
        return {key: scale * sums[field] / n if n else 0.0 for field, key, scale in PATH_FIELDS}

    @property
    def queue_growth(self) -> float:
        """Requests the waiting queue gained per arrival over the second half of the arrivals (0 if unmeasured)."""
        after = self.arrived - 1 - self._middle
        if not self.queue_measured or after < OVERLOAD_MIN_ARRIVALS:
            return 0.0
        return (self._waiting_last - self._waiting_middle) / after

    @property
    def overloaded(self) -> bool:
        return self.queue_growth > OVERLOAD_GROWTH


def tally_records(records: tuple[RequestRecord, ...] | list[RequestRecord], ttft_ms: float | None = None,
                  tpot_ms: float | None = None, e2e_ms: float | None = None) -> RunTally:
    """A RunTally of records held in memory (request order)."""
    tally = RunTally(len(records), ttft_ms, tpot_ms, e2e_ms)
    for record in records:
        tally.add(record)
    return tally
