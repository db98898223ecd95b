"""Time series of a run: each replica's state sampled every ``interval_s`` simulated seconds.

A sampler process wakes at t = 0, interval, 2 x interval, ... with a priority after every other
event of that instant (arrivals and iteration boundaries first), so a sample shows the state
once the instant is settled. It only reads state, so the records are the same with or without
it. It stops at the first sample after every request has finished or was rejected.

Columns (one row per sample per replica):
  t_s               simulated time
  replica           replica index
  queue             requests waiting (including preempted ones)
  running           sequences admitted and not finished
  batch             sequences in the iteration in progress (or the last one, when idle)
  busy              1 from waking with work until the replica goes idle (ReplicaStats.busy_s's intervals)
  kv_<tier>_bytes   KV bytes resident per tier (the StepModel's tier_bytes(): device, host, ssd)
  paging_<link>_bytes  cumulative bytes moved over each paging link (tiering and swap preemption)
  preemptions       cumulative evictions on this replica
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import simpy

from tripath.core.errors import InputError
from tripath.core.limits import MAX_TIMESERIES_ROWS
from tripath.simulator.loop.clock import Clock
from tripath.simulator.loop.stepper import Stepper

AFTER_ALL = 2  # SimPy priority after NORMAL (1) and URGENT (0): the instant is settled when we read
TIERS = ("device", "host", "ssd")
LINKS = ("device_host", "host_ssd", "device_ssd")
COLUMNS = ("t_s", "replica", "queue", "running", "batch", "busy", *(f"kv_{t}_bytes" for t in TIERS),
           *(f"paging_{link}_bytes" for link in LINKS), "preemptions")


@dataclass(frozen=True)
class TimeSeries:
    """Samples of one replication: rows aligned with COLUMNS."""

    interval_s: float
    rows: tuple[tuple[float | int, ...], ...]

    def column(self, name: str, replica: int | None = None) -> list[float | int]:
        i = COLUMNS.index(name)
        return [row[i] for row in self.rows if replica is None or row[1] == replica]


class Sampler:
    """The sampling process; ``result()`` after the run."""

    def __init__(self, env: Clock, replicas: Sequence[Stepper], interval_s: float, done: Callable[[], bool]) -> None:
        self.env = env
        self.replicas = replicas
        self.interval_s = interval_s
        self._done = done
        self._rows: list[tuple[float | int, ...]] = []
        env.process(self._sample())

    def _sample(self) -> Generator[simpy.Event, None, None]:
        k = 0
        while True:
            when = k * self.interval_s  # multiples, not repeated sums: no drift over long runs
            yield self.env.at(when, AFTER_ALL)
            if len(self._rows) + len(self.replicas) > MAX_TIMESERIES_ROWS:
                raise InputError(None, "--timeseries-interval", f"{self.interval_s:g} s gives more than "
                                 f"{MAX_TIMESERIES_ROWS:,} samples before the run ends; use a larger interval")
            for replica in self.replicas:
                self._rows.append(self._row(when, replica))
            if self._done():
                return
            k += 1

    @staticmethod
    def _row(when: float, r: Stepper) -> tuple[float | int, ...]:
        tiers, paging = r.model.tier_bytes(), r.paging_bytes
        return (when, r.index, len(r.queue), len(r.running), r.batch_size, int(r.busy),
                *(int(tiers.get(t, 0)) for t in TIERS), *(int(paging.get(link, 0)) for link in LINKS),
                r.preempted)

    def result(self) -> TimeSeries:
        return TimeSeries(self.interval_s, tuple(self._rows))


def timeseries_csv(series: Sequence[TimeSeries | None]) -> str:
    """Every replication's samples as CSV text, with a replication column first."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(("replication", *COLUMNS))
    for replication, ts in enumerate(series):
        for row in ts.rows if ts is not None else ():
            writer.writerow((replication, *(repr(v) if isinstance(v, float) else v for v in row)))
    return buffer.getvalue()
