"""What the simulator emits: one immutable record per request, and per-replica statistics of a run.

Times are seconds from the start of the run. A rejected request never enters a replica, so its
admitted/first-token/finish times are NaN and its replica is -1; only arrival_s is meaningful.
Metrics (tripath/core/metrics.py) are pure functions over these records, testable without SimPy.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any

COMPLETED = "completed"
REJECTED = "rejected"
# The columns of records.csv (write_records writes it whole, tripath/simulator/loop/streaming.py as a run goes,
# tripath/engine/serving.py for a served run): a replication number, then a RequestRecord's fields in order.
RECORD_COLUMNS = ("replication", "request_id", "task", "arrival_s", "prompt_tokens", "output_tokens",
                  "replica", "admitted_s", "first_token_s", "finish_s", "status", "reject_reason",
                  "draft_rounds", "accepted_tokens", "paging_s", "merge_s", "preemptions")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """The fate of one request: its RequestSpec fields plus where and when it was served."""

    request_id: int
    task: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    replica: int
    admitted_s: float
    first_token_s: float
    finish_s: float
    status: str
    reject_reason: str = ""
    # Per-path sums over the iterations the request was in (tripath/simulator/loop/stepper.py); 0 on the baseline.
    draft_rounds: int = 0  # speculative rounds it took part in
    accepted_tokens: int = 0  # draft tokens accepted over those rounds
    paging_s: float = 0.0  # seconds of paging stall in its iterations (tiering, swap preemption)
    merge_s: float = 0.0  # seconds of sequence-parallel merge in its iterations
    preemptions: int = 0  # times it was evicted when KV ran out

    @property
    def queueing_s(self) -> float:
        """Time spent waiting in the replica's FCFS queue before admission (admitted - arrival)."""
        return self.admitted_s - self.arrival_s

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """What one replica reports after a run: its busy time, iterations, runs and KV peak.

    busy_s sums the intervals during which an iteration was in progress (from waking with work
    to going idle), so busy_s / makespan is the replica's utilisation.
    """

    index: int
    busy_s: float
    iterations: int
    runs: int  # events that advanced time: one per iteration (reference) or per run (fast path)
    peak_kv_bytes: int
    kv_capacity_bytes: int


@dataclass(frozen=True)
class Extrapolations:
    """How many cost-model queries fell outside the measured domain (counted, never hidden)."""

    prefill_queries: int = 0
    prefill_outside: int = 0
    decode_queries: int = 0
    decode_outside: int = 0
    # sequence parallelism: prefill chunks priced on the profile's SP rows, and those outside them or
    # the merge model's domain (tripath/simulator/paths/seqpar.py); the same chunks are also counted above
    sp_prefill_queries: int = 0
    sp_prefill_outside: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "prefill_queries": self.prefill_queries,
            "prefill_outside_domain": self.prefill_outside,
            "decode_queries": self.decode_queries,
            "decode_outside_domain": self.decode_outside,
            "sp_prefill_queries": self.sp_prefill_queries,
            "sp_prefill_outside_domain": self.sp_prefill_outside,
        }

    def with_sp(self, queries: int, outside: int) -> Extrapolations:
        """These counts plus sequence parallelism's (added to any already held)."""
        return Extrapolations(self.prefill_queries, self.prefill_outside, self.decode_queries, self.decode_outside,
                              self.sp_prefill_queries + queries, self.sp_prefill_outside + outside)


@dataclass(frozen=True)
class RunResult:
    """One replication: every request's record (in request order) and each replica's statistics."""

    records: tuple[RequestRecord, ...]
    replicas: tuple[ReplicaStats, ...]
    extrapolations: Extrapolations
    events: int
    timeseries: object | None = None  # tripath/simulator/loop/timeseries.py TimeSeries, when an interval was asked for
    prefix: object | None = None  # tripath/simulator/paths/prefix.py PrefixRun, with prefix caching on

    @property
    def iterations(self) -> int:
        return sum(r.iterations for r in self.replicas)


def rejected_record(request_id: int, task: str, arrival_s: float, prompt_tokens: int, output_tokens: int,
                    reason: str) -> RequestRecord:
    """A request turned away at arrival: NaN times except arrival, no replica."""
    nan = math.nan
    return RequestRecord(request_id, task, arrival_s, prompt_tokens, output_tokens, -1, nan, nan, nan,
                         REJECTED, reason)


def record_row(replication: int, r: RequestRecord) -> tuple[object, ...]:
    """One records.csv row (RECORD_COLUMNS): floats in repr form, so they read back exactly."""
    return (replication, r.request_id, r.task, repr(r.arrival_s), r.prompt_tokens, r.output_tokens, r.replica,
            repr(r.admitted_s), repr(r.first_token_s), repr(r.finish_s), r.status, r.reject_reason, r.draft_rounds,
            r.accepted_tokens, repr(r.paging_s), repr(r.merge_s), r.preemptions)


def record_csv_writer(handle: IO[str]) -> Any:
    """A csv writer onto ``handle`` in records.csv's dialect (``\\n`` line ends), the header already written: the
    one place the simulator's and the engine's record files get their format, so they compare column by column."""
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(RECORD_COLUMNS)
    return writer


def write_records(handle: IO[str], runs_records: Iterable[Sequence[RequestRecord]]) -> None:
    """All replications' records as records.csv (a header, then record_row per record) onto an open text handle;
    the replication column counts the runs from 0."""
    writer = record_csv_writer(handle)
    for replication, records in enumerate(runs_records):
        writer.writerows(record_row(replication, r) for r in records)
