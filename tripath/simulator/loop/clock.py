"""The simulation clock: a SimPy Environment that can schedule an event at an exact time.

Why not ``env.timeout(when - env.now)``: SimPy places a timeout at ``now + delay``, and in floating
point ``now + (when - now)`` is not always ``when``. The fast path computes a whole run of iteration
boundaries ahead of time and must wake at exactly the boundary the one-event-per-iteration
reference reaches by repeated ``now + cost``; arrivals must happen at exactly their arrival_s.

Priorities order simultaneous events: arrivals are URGENT, so at any instant every arrival is
routed before any replica processes an iteration boundary at that instant (a request arriving
exactly at a boundary can be admitted there), whichever order the events were scheduled in.
"""

from __future__ import annotations

import math
from heapq import heappush

import simpy
from simpy.core import NORMAL, URGENT

__all__ = ["Clock", "NORMAL", "URGENT"]

_new_event = object.__new__


class Clock(simpy.Environment):
    """simpy.Environment plus ``at(when, priority)``: an event that fires at exactly ``when``."""

    def at(self, when: float, priority: int = NORMAL) -> simpy.Event:
        if when < self._now:
            raise ValueError(f"cannot schedule at {when!r}: the clock is already at {self._now!r}")
        # A triggered simpy.Event built directly (what Timeout does, without its __init__ checks).
        event = _new_event(simpy.Event)
        event.env = self
        event.callbacks = []
        event._ok = True
        event._value = None
        # The same heap entry simpy.Environment.schedule makes, with the time given exactly.
        heappush(self._queue, (when, priority, next(self._eid), event))
        return event

    def until(self, wakeup: simpy.Event, when: float) -> simpy.Event:
        """``wakeup``, or whichever comes first of it and ``when`` (a wait window's end; inf: no end)."""
        return wakeup if when == math.inf else self.any_of([wakeup, self.at(when)])
