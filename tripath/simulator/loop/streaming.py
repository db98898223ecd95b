"""The fast-path cluster with records streamed out as requests finish: memory flat in the number of requests.

tripath/simulator/loop/cluster.py keeps every request's times in lists and builds all records at the end,
which for a million requests means a million objects. Here the workload stays as numpy arrays
(tripath/simulator/scenario/workload.py: generate_arrays, ~32 bytes a request), the ledger reads lengths from
them and holds times only for admitted requests in flight, and each record goes to a sink as soon as the
request has finished. The replicas are the same fast-path Steppers (tripath/simulator/loop/cluster.py:
``fast_steppers``), which use the ledger only by request index; the router applies the same rule as
Cluster._route, so the records are the same bit for bit (in finish order rather than request order:
tests/simulator/loop/test_streaming.py; ``InOrder`` puts them back in request order). It serves what the fast
path serves: the baseline, and compression and/or sequence parallelism as a transformed cost model (``sp``: the
SP physics that books merge time to the records).

Memory: the ledger's lengths and KV reservations are the workload's own arrays read through memoryviews
(Python ints, as the in-memory Ledger's lists give), plus 4 bytes a request for the replica it was routed to,
all allocated before the run; a request waiting in a queue costs only its queue entry (~40 bytes), and the
times of admitted requests in flight are dicts emptied when their records are written. An overloaded run's
queue still grows (requests wait), at that ~40 bytes a waiting request (tripath/simulator/tally.py reports it).

A record is written the moment its request finishes (``Ledger.finished``): everything in it is final by then, and
the replica reads only the arrays of a request after that (its length and reservation, as it frees its KV).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from tripath.core.atomic import AtomicFile
from tripath.core.records import (
    COMPLETED,
    Extrapolations,
    ReplicaStats,
    RequestRecord,
    record_csv_writer,
    record_row,
    rejected_record,
)
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.clock import URGENT, Clock
from tripath.simulator.loop.cluster import ClusterConfig, fast_steppers
from tripath.simulator.loop.router import expects, least_outstanding, too_big_reason
from tripath.simulator.paths.seqpar import SpPhysics

_CHUNK = 4096  # arrivals converted to Python numbers at a time


@dataclass(frozen=True)
class RequestArrays:
    """A workload as arrays (sorted by arrival): what generate_arrays returns."""

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    names: list[str]
    task: np.ndarray  # index into names

    def __post_init__(self) -> None:
        n = self.arrival_s.shape[0]
        if not (self.prompt.shape[0] == self.output.shape[0] == self.task.shape[0] == n):
            raise ValueError("arrival_s, prompt, output and task must have the same length")
        if n > 1 and bool(np.any(np.diff(self.arrival_s) < 0)):
            raise ValueError("requests must be sorted by arrival_s")

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])


class StreamLedger:
    """The ledger's interface (tripath/simulator/loop/stepper.py's PathLedger, as the fast path uses it): lengths
    and reservations from arrays, times of the admitted requests in flight in dicts.

    ``prompt``, ``output`` and ``reserve`` are memoryviews of int64 arrays (indexing gives Python ints, as the
    Ledger's lists do); ``replica`` an int32 one. ``arrival``, ``admitted`` and ``first_token`` are filled by the
    replicas at admission (``arrival`` when routed), ``merge_s`` (SP only) as they book merge time; ``finished``
    hands a request to ``on_finish``, which ``drop``s its entries.
    """

    def __init__(self, prompt: np.ndarray, output: np.ndarray, kv_bytes_per_token: int,
                 on_finish: Callable[[int, float], None], merge: bool = False) -> None:
        prompt = np.ascontiguousarray(prompt, dtype=np.int64)
        output = np.ascontiguousarray(output, dtype=np.int64)
        tokens = prompt + output
        if tokens.size and int(tokens.max()) * kv_bytes_per_token >= 1 << 63:
            raise ValueError("a KV reservation of (prompt + output) tokens overflows int64 bytes")
        self.prompt = memoryview(prompt)
        self.output = memoryview(output)
        self.reserve = memoryview(tokens * kv_bytes_per_token)
        self.replica = memoryview(np.full(prompt.shape[0], -1, dtype=np.int32))
        self.task = _NoTask()  # the Stepper's SeqState carries a task index; the baseline ignores it
        self.arrival: dict[int, float] = {}
        self.admitted: defaultdict[int, float] = defaultdict(_nan)  # NaN until admitted (the Stepper checks)
        self.first_token: defaultdict[int, float] = defaultdict(_nan)  # NaN until its first token
        self.merge_s: defaultdict[int, float] | None = defaultdict(float) if merge else None
        self.on_finish = on_finish
        self.in_flight = 0  # routed and not yet finished

    def __len__(self) -> int:
        return self.in_flight

    def finished(self, request: int, end: float) -> None:
        """Ledger.finished: ``request`` emitted its last token at ``end``; its record is final."""
        self.in_flight -= 1
        self.on_finish(request, end)

    def drop(self, request: int) -> tuple[int, float, float, float]:
        """(replica, admitted, first token, merge seconds) of a finished request, forgetting it."""
        merge = 0.0 if self.merge_s is None else self.merge_s.pop(request, 0.0)
        del self.arrival[request]
        return self.replica[request], self.admitted.pop(request), self.first_token.pop(request), merge


def _nan() -> float:
    return math.nan


class _NoTask:
    """``task[request]``: 0 for every request (the records read the task from the workload's arrays)."""

    def __getitem__(self, request: int) -> int:
        return 0


@dataclass(frozen=True)
class StreamResult:
    """What a streamed run reports (its records went to the sink)."""

    completed: int
    rejected: int
    replicas: tuple[ReplicaStats, ...]
    extrapolations: Extrapolations
    events: int
    peak_in_flight: int  # most requests routed and not finished (waiting or running) at once

    @property
    def iterations(self) -> int:
        return sum(r.iterations for r in self.replicas)


class StreamingCluster:
    """Replicas, router and arrivals as in tripath/simulator/loop/cluster.py; ``run()`` streams records to ``sink``.

    ``sp``: with fast replicas on an SP-transformed ``cost`` (tripath/simulator/paths/step.py: fast_transforms),
    the SP physics inside it, as simulate_requests takes it: records carry merge time, the run counts SP
    extrapolations."""

    def __init__(self, requests: RequestArrays, config: ClusterConfig, cost: IterationCost,
                 sink: Callable[[RequestRecord], None], sp: SpPhysics | None = None) -> None:
        self.requests = requests
        self.config = config
        self.cost = cost
        self.sink = sink
        self.sp = sp
        self.env = Clock()
        self.ledger = StreamLedger(requests.prompt, requests.output, config.replica.kv_bytes_per_token,
                                   self._finished, merge=sp is not None)
        # what a record reads by index, as Python numbers (numpy's scalar indexing is several times slower)
        self._arrival_s = memoryview(np.ascontiguousarray(requests.arrival_s, dtype=np.float64))
        self._task_index = memoryview(np.ascontiguousarray(requests.task, dtype=np.int64))
        self.completed = self.rejected = self.peak_in_flight = 0
        self.next_arrival_s = float(requests.arrival_s[0]) if len(requests) else float("inf")
        # the Replicas read and write the ledger by request index, as they do a Ledger
        self.replicas = fast_steppers(self.env, config, cost, self.ledger, self._next_arrival, self._expects, True, sp)
        self.env.process(self._arrivals())

    def _next_arrival(self) -> float:
        return self.next_arrival_s

    def _expects(self, index: int) -> bool:
        return expects(self.replicas, index)

    def _arrivals(self) -> Generator[simpy.Event, None, None]:
        r, n = self.requests, len(self.requests)
        for start in range(0, n, _CHUNK):
            # Python floats (the values Cluster reads from RequestSpecs), a chunk at a time: flat memory
            times = r.arrival_s[start:start + _CHUNK + 1].tolist()  # one more: the next arrival
            prompts = r.prompt[start:start + _CHUNK].tolist()
            outputs = r.output[start:start + _CHUNK].tolist()
            for offset, (prompt, output) in enumerate(zip(prompts, outputs, strict=True)):
                yield self.env.at(times[offset], URGENT)
                self.next_arrival_s = times[offset + 1] if offset + 1 < len(times) else float("inf")
                self._route(start + offset, prompt, output)

    def _route(self, index: int, prompt: int, output: int) -> None:
        replica = self.config.replica
        need = (prompt + output) * replica.kv_bytes_per_token
        if need > replica.kv_capacity_bytes:  # Cluster._route's rule and text (tripath/simulator/loop/router.py)
            reason = too_big_reason(replica.kv_capacity_bytes, replica.kv_capacity_bytes // replica.kv_bytes_per_token)
            self.sink(rejected_record(index, self._task(index), self._arrival_s[index], prompt, output, reason))
            self.rejected += 1
            return
        ledger = self.ledger
        best = least_outstanding(self.replicas)
        ledger.replica[index] = best.index
        ledger.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, ledger.in_flight)
        best.enqueue(index)

    def _task(self, index: int) -> str:
        return self.requests.names[self._task_index[index]]

    def _finished(self, index: int, end: float) -> None:
        """Write the record of a request that has just finished, and forget it."""
        ledger = self.ledger
        replica, admitted, first, merge = ledger.drop(index)
        self.sink(RequestRecord(index, self._task(index), self._arrival_s[index], ledger.prompt[index],
                                ledger.output[index], replica, admitted, first, end, COMPLETED, merge_s=merge))
        self.completed += 1

    def run(self) -> StreamResult:
        self.env.run()
        if len(self.ledger) or any(r.queue or r.outstanding for r in self.replicas):
            raise AssertionError("a streamed run ended with unfinished requests")
        events = len(self.requests) + sum(r.wakeups + r.runs for r in self.replicas)
        capacity = self.config.replica.kv_capacity_bytes
        stats = tuple(ReplicaStats(r.index, r.busy_s, r.iterations, r.runs, r.peak_kv, capacity)
                      for r in self.replicas)
        extrapolations = self.cost.extrapolations()
        if self.sp is not None:
            extrapolations = extrapolations.with_sp(self.sp.queries, self.sp.outside)
        return StreamResult(self.completed, self.rejected, stats, extrapolations, events, self.peak_in_flight)


class InOrder:
    """A sink that passes records on in request order (request_id 0, 1, 2, ...), whatever order they come in.

    A record that finished before an earlier request is held until that one comes: at most the requests that
    finished while an earlier one was still in flight (``peak_held``), bounded by the service time of the longest
    request in flight, not by how long requests wait."""

    def __init__(self, sink: Callable[[RequestRecord], None]) -> None:
        self.sink = sink
        self.next = 0
        self.held: dict[int, RequestRecord] = {}
        self.peak_held = 0

    def __call__(self, record: RequestRecord) -> None:
        if record.request_id != self.next:
            self.held[record.request_id] = record
            self.peak_held = max(self.peak_held, len(self.held))
            return
        self.sink(record)
        self.next += 1
        held = self.held
        while self.next in held:
            self.sink(held.pop(self.next))
            self.next += 1

    def close(self, requests: int) -> None:
        """Check that all ``requests`` records came and went on."""
        if self.held or self.next != requests:
            raise AssertionError(f"records passed on: {self.next} of {requests}, {len(self.held)} still held")


class RecordWriter:
    """A CSV sink for records (RECORD_COLUMNS, rows as summary.write_outputs writes them): a temp file, renamed on
    close. ``replication`` is the number written in the rows' first column (set it before each replication)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file = AtomicFile(path)
        self._writer = record_csv_writer(self._file.handle)
        self.replication = 0
        self.rows = 0

    def __call__(self, r: RequestRecord) -> None:
        self._writer.writerow(record_row(self.replication, r))
        self.rows += 1

    def writing(self) -> AbstractContextManager[Any]:
        """The context the rows are written in: on any exception (Ctrl-C, a full disk) the temp file is removed, and
        an OSError names the records file, never the temp one (AtomicFile.writing)."""
        return self._file.writing()

    def close(self, keep: bool = True) -> None:
        """Finish the file (renamed onto the path) or, with keep=False, remove it."""
        if keep:
            self._file.commit()
        else:
            self._file.discard()


def stream_requests(requests: RequestArrays, config: ClusterConfig, cost: IterationCost,
                    path: str | os.PathLike[str]) -> StreamResult:
    """Serve ``requests`` and write their records to ``path`` (CSV) as they finish; nothing half-written."""
    writer = RecordWriter(path)
    with writer.writing():
        result = StreamingCluster(requests, config, cost, writer).run()
    writer.close()
    return result
