"""Who the replay loop (tripath/engine/workload_replay.py) hands to the engine, and when: its batching policy.

Arrived requests wait in a queue in arrival order; at every iteration boundary the policy says how many
of them go to the engine now, and, while the engine is idle, when it must look again.

- ``Continuous`` hands every arrived request over at once: the engine's own iteration-level batching
  (Orca/vLLM) decides who runs.
- ``Windowed`` follows tripath/simulator/loop/batching.py's ``Windowed`` rule, so the engine and the
  simulator form the same groups: a group forms when the waiting requests fill the free places of the
  batch (max_batch_size minus the sequences still running) or the oldest has waited max_wait_s (Triton's
  max_queue_delay); static (``joins`` False): only an empty engine forms a group, which runs to
  completion (nobody joins); dynamic (``joins`` True, Triton's dynamic batcher in front of an
  iteration-level engine): a group joins the running batch at the next iteration boundary.  Groups are
  not limited by a token budget (Triton has none): the scenario's max_batched_tokens must hold a whole
  group's prompts for the engine to prefill it in one step, as the simulator does.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

from tripath.core.request import RequestSpec


class BatchingPolicy(Protocol):
    def take(self, queue: deque[RequestSpec], live: int, now: float) -> int:
        """How many requests from the head of ``queue`` go to the engine at ``now``, ``live`` running."""
        ...

    def wake(self, queue: deque[RequestSpec]) -> float | None:
        """When an idle engine must look at ``queue`` again (None: at the next arrival only)."""
        ...


class Continuous:
    """Every arrived request goes to the engine at once."""

    def take(self, queue: deque[RequestSpec], live: int, now: float) -> int:
        return len(queue)

    def wake(self, queue: deque[RequestSpec]) -> float | None:
        return None


@dataclass(frozen=True)
class Windowed:
    """Static (``joins`` False) or dynamic (``joins`` True) groups of at most max_batch_size."""

    max_batch_size: int
    max_wait_s: float
    joins: bool

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or not self.max_wait_s >= 0.0:
            raise ValueError(f"need max_batch_size >= 1 and max_wait_s >= 0, "
                             f"got {self.max_batch_size}, {self.max_wait_s}")

    def take(self, queue: deque[RequestSpec], live: int, now: float) -> int:
        room = self.max_batch_size - live
        if not queue or room <= 0 or not (self.joins or live == 0):
            return 0
        if len(queue) >= room or now >= queue[0].arrival_s + self.max_wait_s:  # full, or out of time
            return min(room, len(queue))
        return 0

    def wake(self, queue: deque[RequestSpec]) -> float | None:
        return queue[0].arrival_s + self.max_wait_s if queue else None  # the oldest's window closes
