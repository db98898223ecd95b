"""The baseline cluster with records streamed out as requests finish: memory flat in the number of requests.

tripath/simulator/loop/cluster.py keeps every request's times in lists and builds all records at the end,
which for a million requests means a million objects. Here the workload stays as numpy arrays
(tripath/simulator/scenario/workload.py: generate_arrays, ~32 bytes a request), the ledger holds only requests in
flight (dicts, filled when a request is routed and emptied when its record is written), and each
record goes to a sink as soon as the request has finished. The replicas are the same fast
Replicas (tripath/simulator/loop/replica.py), which use the ledger only by request index; the router applies
the same rule as Cluster._route, so the records are the same bit for bit (in finish order rather
than request order: tests/simulator/loop/test_streaming.py).

Records are flushed at each arrival (after the replicas' events of earlier instants) and at the
end: a finished request's entries are read by its replica until its iteration completes, so
they are dropped only after that.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from tripath.core.atomic import AtomicFile
from tripath.core.records import COMPLETED, Extrapolations, ReplicaStats, RequestRecord, rejected_record
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.clock import URGENT, Clock
from tripath.simulator.loop.cluster import ClusterConfig
from tripath.simulator.loop.replica import Replica

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


class FinishLog(dict):
    """``ledger.finish``: a dict that also remembers the order in which requests finished."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[int] = []

    def __setitem__(self, request: int, when: float) -> None:
        super().__setitem__(request, when)
        self.order.append(request)


class StreamLedger:
    """The Ledger's interface (tripath/simulator/loop/replica.py) over dicts of the requests in flight."""

    def __init__(self) -> None:
        self.prompt: dict[int, int] = {}
        self.output: dict[int, int] = {}
        self.reserve: dict[int, int] = {}
        self.replica: dict[int, int] = {}
        self.admitted: dict[int, float] = {}
        self.first_token: dict[int, float] = {}
        self.finish = FinishLog()

    def __len__(self) -> int:
        return len(self.prompt)

    def finished(self, request: int, end: float) -> None:
        """Ledger.finished: record the finish (logged in finish order for the flush)."""
        self.finish[request] = end

    def drop(self, request: int) -> tuple[int, float, float, float]:
        """(replica, admitted, first token, finish) of a finished request, forgetting it."""
        for table in (self.prompt, self.output, self.reserve):
            del table[request]
        return (self.replica.pop(request), self.admitted.pop(request), self.first_token.pop(request),
                dict.pop(self.finish, request))


@dataclass(frozen=True)
class StreamResult:
    """What a streamed run reports (its records went to the sink)."""

    completed: int
    rejected: int
    replicas: tuple[ReplicaStats, ...]
    extrapolations: Extrapolations
    events: int
    peak_in_flight: int  # most requests held in the ledger at once: the memory that scales

    @property
    def iterations(self) -> int:
        return sum(r.iterations for r in self.replicas)


class StreamingCluster:
    """Replicas, router and arrivals as in tripath/simulator/loop/cluster.py; ``run()`` streams records to ``sink``."""

    def __init__(self, requests: RequestArrays, config: ClusterConfig, cost: IterationCost,
                 sink: Callable[[RequestRecord], None]) -> None:
        self.requests = requests
        self.config = config
        self.cost = cost
        self.sink = sink
        self.env = Clock()
        self.ledger = StreamLedger()
        self.completed = self.rejected = self.peak_in_flight = 0
        self.next_arrival_s = float(requests.arrival_s[0]) if len(requests) else float("inf")
        ledger: Any = self.ledger  # the Replica reads and writes it by request index, as it does a Ledger
        self.replicas = [Replica(self.env, i, config.replica, cost, ledger, self._next_arrival, self._expects)
                         for i in range(config.replicas)]
        self.env.process(self._arrivals())

    def _next_arrival(self) -> float:
        return self.next_arrival_s

    def _choice(self) -> Replica:
        best = self.replicas[0]
        for replica in self.replicas[1:]:
            if replica.outstanding < best.outstanding:  # strict: ties stay with the lower index
                best = replica
        return best

    def _expects(self, index: int) -> bool:
        return len(self.replicas) == 1 or self._choice().index == index

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
                self._flush()
                self._route(start + offset, prompt, output)

    def _route(self, index: int, prompt: int, output: int) -> None:
        replica = self.config.replica
        need = (prompt + output) * replica.kv_bytes_per_token
        if need > replica.kv_capacity_bytes:  # Cluster._route's rule and text
            tokens = replica.kv_capacity_bytes // replica.kv_bytes_per_token
            reason = (f"KV reservation of (prompt + output) tokens exceeds the replica's KV capacity of "
                      f"{replica.kv_capacity_bytes} bytes ({tokens} tokens)")
            self.sink(rejected_record(index, self._task(index), float(self.requests.arrival_s[index]), prompt,
                                      output, reason))
            self.rejected += 1
            return
        ledger = self.ledger
        ledger.prompt[index], ledger.output[index], ledger.reserve[index] = prompt, output, need
        ledger.admitted[index] = ledger.first_token[index] = float("nan")
        best = self._choice()
        ledger.replica[index] = best.index
        self.peak_in_flight = max(self.peak_in_flight, len(ledger))
        best.enqueue(index)

    def _task(self, index: int) -> str:
        return self.requests.names[int(self.requests.task[index])]

    def _flush(self) -> None:
        """Write the records of requests whose finishing iteration has completed, and forget them."""
        order = self.ledger.finish.order
        r = self.requests
        for index in order:
            replica, admitted, first, finish = self.ledger.drop(index)
            self.sink(RequestRecord(index, self._task(index), float(r.arrival_s[index]), int(r.prompt[index]),
                                    int(r.output[index]), replica, admitted, first, finish, COMPLETED))
        self.completed += len(order)
        order.clear()

    def run(self) -> StreamResult:
        self.env.run()
        self._flush()
        if len(self.ledger) or any(r.queue or r.outstanding for r in self.replicas):
            raise AssertionError("a streamed run ended with unfinished requests")
        events = len(self.requests) + sum(r.wakeups + r.runs for r in self.replicas)
        capacity = self.config.replica.kv_capacity_bytes
        stats = tuple(ReplicaStats(r.index, r.busy_s, r.iterations, r.runs, r.peak_kv, capacity)
                      for r in self.replicas)
        return StreamResult(self.completed, self.rejected, stats, self.cost.extrapolations(), events,
                            self.peak_in_flight)


class RecordWriter:
    """A CSV sink for records (summary.RECORD_COLUMNS, replication 0): a temp file, renamed on close."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from tripath.simulator.summary import RECORD_COLUMNS

        self.path = Path(path)
        self._file = AtomicFile(path)
        self._writer = csv.writer(self._file.handle, lineterminator="\n")
        self._writer.writerow(RECORD_COLUMNS)
        self.rows = 0

    def __call__(self, r: RequestRecord) -> None:
        self._writer.writerow((0, r.request_id, r.task, repr(r.arrival_s), r.prompt_tokens, r.output_tokens,
                               r.replica, repr(r.admitted_s), repr(r.first_token_s), repr(r.finish_s), r.status,
                               r.reject_reason, r.draft_rounds, r.accepted_tokens, repr(r.paging_s),
                               repr(r.merge_s), r.preemptions))
        self.rows += 1

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
    try:
        result = StreamingCluster(requests, config, cost, writer).run()
    except BaseException:
        writer.close(keep=False)
        raise
    writer.close()
    return result
