"""The cluster's router, one for the in-memory cluster (tripath/simulator/loop/cluster.py) and the streamed one
(tripath/simulator/loop/streaming.py), so the two route the same requests the same way by construction.

- A request whose KV reservation ((prompt + output) x bytes per token) exceeds a replica's whole KV capacity can
  never be served: it is turned away at arrival with ``too_big_reason`` (one stable text per run, so the summary
  can count reasons; the request's own need is in its record).
- Any other goes to the replica with the fewest outstanding requests (routed, not yet finished), ties to the
  lowest index: ``least_outstanding``; deterministic.
- ``expects``: whether a replica would receive a request arriving now, the fast path's hint for when to stop a
  run at the next arrival (tripath/simulator/loop/stepper.py: ``Stepper._plan_run``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class Routable(Protocol):
    """What the router reads of a replica."""

    index: int

    @property
    def outstanding(self) -> int:
        """Requests routed to it and not yet finished."""
        ...


R = TypeVar("R", bound=Routable)


def least_outstanding(replicas: Sequence[R]) -> R:
    """The replica with the fewest outstanding requests, ties to the lowest index."""
    best = replicas[0]
    for replica in replicas[1:]:
        if replica.outstanding < best.outstanding:  # strict: ties stay with the lower index
            best = replica
    return best


def expects(replicas: Sequence[Routable], index: int) -> bool:
    """Whether replica ``index`` would receive a request arriving now (``least_outstanding``'s choice; the loop is
    repeated here because the fast path asks at every run it plans, and a call more shows in the run time)."""
    if len(replicas) == 1:
        return True
    best = replicas[0]
    for replica in replicas[1:]:
        if replica.outstanding < best.outstanding:
            best = replica
    return best.index == index


def too_big_reason(capacity_bytes: int, tokens: int) -> str:
    """The reject reason of a request whose reservation exceeds a replica's KV capacity (``tokens`` of it)."""
    return (f"KV reservation of (prompt + output) tokens exceeds the replica's KV capacity of {capacity_bytes} bytes "
            f"({tokens} tokens)")
