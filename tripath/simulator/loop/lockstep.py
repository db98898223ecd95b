"""A replica of attention data-parallel ranks stepping in lockstep (vLLM --data-parallel-size with a MoE model).

With attention data parallelism a replica is D ranks (tripath/profile/schema.py ``ProfileKey.attention_dp``). Each
rank has its own scheduler, batch and KV pool and runs attention for its own sequences; the MoE layers between
them run over every rank's GPUs at once (their tokens dispatched across ranks), so no rank can start its next
forward pass before every rank has finished this one. vLLM keeps the ranks in step while any of them has work:
an idle rank runs a dummy batch so that the collectives complete (vLLM docs, "Data Parallel Deployment").

Here each rank is a Stepper (tripath/simulator/loop/stepper.py) whose iterations the group runs, one SimPy event
per iteration of the whole group:

- At a boundary every rank starts its iteration on its own (``Stepper.begin``: admission by its policy into its
  own KV pool, its chunks, its model's cost of its own batch); a rank with nothing to run sits this one out.
- The iteration lasts as long as the slowest rank's (the step is as slow as its slowest rank); every rank that
  ran ends it at that instant (``Stepper.end``).
- With nothing running on any rank the group sleeps until a request is routed to one of them (the router
  routes to ranks, as vLLM's front end balances requests over its DP engines), or until the earliest wait window
  of a rank's policy ends.

A rank's cost is its profile's per-rank cost, which prices the MoE layers as if every rank carried a batch like
its own (aiconfigurator-core's convention for attention DP). The slowest rank's cost therefore counts the MoE
tokens of the largest batch times D, at least the true total: a busy rank beside idle ones is priced a little
high, never low. Time is busy for every rank while the group is (the idle ranks' dummy batches hold their GPUs).

Fast-forward (``fast``, as the Stepper's: tripath/simulator/loop/stepper.py): when no rank has a queue, every running
sequence on every rank decodes, and every rank could fast-forward alone (``Stepper.stretch``: a deterministic
BaselineStep, nothing evicted, no prefix cache, no finish listener, no time series), the next iterations up to the
first finish on any rank are known. Rank r's i-th costs its model's decode at its batch, its total context grown
by its batch per iteration (``Stretch.costs``); the group's costs the most over the ranks that run, and the
boundaries are their cumulative sum from the start (Run.add_costs: the same floats as ``start + seconds`` one
iteration at a time). The stretch (at least _MIN_RUN iterations, at most _HORIZON) is one SimPy event; a request
routed to any rank meanwhile cuts it at the first boundary at or after that instant (Run.cut), where the group
stepping every iteration admits it. Each rank that ran then books the iterations as one by one
(``Stepper.close_stretch``): records and replica stats are bit for bit the per-iteration group's
(tests/simulator/loop/test_lockstep.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

import numpy as np
import simpy

from tripath.simulator.loop.clock import Clock
from tripath.simulator.loop.run import Run
from tripath.simulator.loop.stepper import _HORIZON, _MIN_RUN, Iteration, Stepper


class Lockstep:
    """One replica's ranks (``ranks``, set once by ``start``); woken by ``wake`` (each rank's ``wake_group``);
    ``fast``: fast-forward decode-only stretches (module docstring; off, one event per iteration: the reference)."""

    def __init__(self, env: Clock, fast: bool = True) -> None:
        self.env = env
        self.fast = fast
        self.ranks: list[Stepper] = []
        self._wakeup: simpy.Event | None = None
        self._run: Run | None = None  # the stretch in progress, while a routed request may cut it
        self._process: simpy.Process | None = None

    def wake(self) -> None:
        """A request was routed to a rank: a sleeping group starts at this instant (after its arrivals); a stretch
        in progress stops at its first boundary at or after it."""
        if self._wakeup is not None:
            self._wakeup.succeed()
            self._wakeup = None
        elif self._run is not None:
            self._run = None
            assert self._process is not None
            self._process.interrupt()  # URGENT: the stretch stops at its first boundary at or after now

    def start(self, ranks: list[Stepper]) -> None:
        if not ranks:
            raise ValueError("a lockstep group needs at least one rank")
        self.ranks = ranks
        self._process = self.env.process(self._serve())

    def _serve(self) -> Generator[simpy.Event, None, None]:
        env, ranks = self.env, self.ranks
        while True:
            if not any(r.running or r.queue for r in ranks):
                yield from self._idle(math.inf)
            start = env.now
            if self.fast:
                stretch = min(r.stretch() for r in ranks)
                if stretch >= _MIN_RUN:
                    yield from self._fast_forward(start, stretch)
                    continue
            steps: list[tuple[Stepper, Iteration]] = []
            for rank in ranks:
                iteration = rank.begin(start)
                if iteration is not None:
                    steps.append((rank, iteration))
            if not steps:
                yield from self._idle(min(r.policy.next_look(r, start) for r in ranks))
                continue
            end = float(start + max(iteration.seconds for _, iteration in steps))
            yield env.at(end)
            for rank, iteration in steps:
                rank.end(iteration, end)

    def _fast_forward(self, start: float, stretch: int) -> Generator[simpy.Event, None, None]:
        """Advance the group's decode-only iterations up to the first finish on any rank (``stretch`` away) in one
        event, or fewer when a request is routed to a rank meanwhile; then each rank that ran books them."""
        count = min(stretch, _HORIZON)
        opened = [(rank, rank.open_stretch()) for rank in self.ranks if rank.running]
        costs = [s.costs(count) for _, s in opened]
        slowest = costs[0] if len(costs) == 1 else np.max(costs, axis=0)  # exact: max picks one of the floats
        run = Run(start, 0, 0)
        run.add_costs(slowest.tolist(), math.inf)
        self._run = run
        yield from run.wait(self.env)
        self._run = None
        for rank, s in opened:
            rank.close_stretch(s, run.iterations, run.end)

    def _idle(self, until: float) -> Generator[simpy.Event, None, None]:
        """Every rank rests until a request is routed to one of them, or until ``until``."""
        for rank in self.ranks:
            rank.rest()
        self._wakeup = wakeup = self.env.event()
        yield self.env.until(wakeup, until)
        self._wakeup = None  # (a wake-up already cleared it)
        for i, rank in enumerate(self.ranks):
            rank.resume(wakeup=i == 0)  # one wake-up event for the group


def grouped(env: Clock, replicas: int, ranks: int, build: Callable[[int, Callable[[], None] | None], Stepper],
            fast: bool = True) -> list[Stepper]:
    """``replicas`` x ``ranks`` Steppers, ``build(index, wake_group)`` each; with more than one rank per replica
    each replica's ranks (consecutive indexes) step in lockstep (fast-forwarding where ``fast``), else
    ``wake_group`` is None (a plain Stepper)."""
    if ranks == 1:
        return [build(i, None) for i in range(replicas)]
    steppers: list[Stepper] = []
    for replica in range(replicas):
        group = Lockstep(env, fast)
        members = [build(replica * ranks + r, group.wake) for r in range(ranks)]
        group.start(members)
        steppers += members
    return steppers
