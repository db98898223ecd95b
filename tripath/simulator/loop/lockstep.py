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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

import simpy

from tripath.simulator.loop.clock import Clock
from tripath.simulator.loop.stepper import Iteration, Stepper


class Lockstep:
    """One replica's ranks (``ranks``, set once by ``start``); woken by ``wake`` (each rank's ``wake_group``)."""

    def __init__(self, env: Clock) -> None:
        self.env = env
        self.ranks: list[Stepper] = []
        self._wakeup: simpy.Event | None = None

    def wake(self) -> None:
        """A request was routed to a rank: a sleeping group starts at this instant (after its arrivals)."""
        if self._wakeup is not None:
            self._wakeup.succeed()
            self._wakeup = None

    def start(self, ranks: list[Stepper]) -> None:
        if not ranks:
            raise ValueError("a lockstep group needs at least one rank")
        self.ranks = ranks
        self.env.process(self._serve())

    def _serve(self) -> Generator[simpy.Event, None, None]:
        env, ranks = self.env, self.ranks
        while True:
            if not any(r.running or r.queue for r in ranks):
                yield from self._idle(math.inf)
            start = env.now
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

    def _idle(self, until: float) -> Generator[simpy.Event, None, None]:
        """Every rank rests until a request is routed to one of them, or until ``until``."""
        for rank in self.ranks:
            rank.rest()
        self._wakeup = wakeup = self.env.event()
        yield self.env.until(wakeup, until)
        self._wakeup = None  # (a wake-up already cleared it)
        for i, rank in enumerate(self.ranks):
            rank.resume(wakeup=i == 0)  # one wake-up event for the group


def grouped(env: Clock, replicas: int, ranks: int, build: Callable[[int, Callable[[], None] | None], Stepper]
            ) -> list[Stepper]:
    """``replicas`` x ``ranks`` Steppers, ``build(index, wake_group)`` each; with more than one rank per replica
    each replica's ranks (consecutive indexes) step in lockstep, else ``wake_group`` is None (a plain Stepper)."""
    if ranks == 1:
        return [build(i, None) for i in range(replicas)]
    steppers: list[Stepper] = []
    for replica in range(replicas):
        group = Lockstep(env)
        members = [build(replica * ranks + r, group.wake) for r in range(ranks)]
        group.start(members)
        steppers += members
    return steppers
