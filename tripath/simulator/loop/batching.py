"""Batch formation policies: which waiting requests join at an iteration boundary, and each prefill chunk.

Each policy is a BatchPolicy (tripath/simulator/loop/stepper.py). The loop calls, at every iteration
boundary, ``schedule(stepper, now)``, which admits requests (``stepper.admit_fcfs``: strict FCFS, batch
room, KV budget) and returns the prefill chunks of this iteration as {sequence: tokens} in admission
order; sequences whose prompt is complete decode. With nothing to run it asks ``next_look`` when a wait window expires
(inf: only an arrival can change anything). ``observe`` sees every finished request.

- continuous (Orca / vLLM): iteration-level joins; admitted prompts are prefilled whole within a
  per-iteration token budget (the first prefill always allowed) — the exact fast path's rule, bit for bit.
- static: one batch at a time, run to completion, nobody joins it. A batch forms when
  max_batch_size requests wait or the oldest has waited max_wait_ms. Finished sequences leave
  the batch (their compute stops) but free places are not refilled until the batch is empty.
- dynamic (Triton's dynamic batcher in front of an iteration-level engine): a group forms when
  the waiting requests fill the batch's free places or the oldest has waited max_wait_ms
  (Triton's max_queue_delay); it joins the running batch at that boundary. Requests join only
  at group formation, never one by one.
- chunked (Sarathi-Serve): each iteration has a budget of max_batched_tokens; every decode takes
  one token of it, then prompts in progress take chunks of the rest in admission order, then new
  requests are admitted and take chunks while budget, room and KV last. A long prompt is split
  over iterations, so decodes never stall behind it.
- adaptive: dynamic formation whose batch size and wait window are steered by
  tripath/simulator/loop/adaptive_batching.py from the P99 of recently finished requests against the SLA.
Static and dynamic groups are not limited by the token budget (Triton has none): a group's
prompts are prefilled together in its first iteration.
tripath/simulator/loop/stepper_setup.py's ``build_policy`` builds the one a scenario's [batching] table asks for.
"""

from __future__ import annotations

import math

from tripath.simulator.loop.sequence import Chunks, SeqState
from tripath.simulator.loop.stepper import Stepper


def _whole(admitted: list[SeqState]) -> Chunks:
    """Each admitted prompt prefilled whole (a swapped-in sequence has none: it decodes)."""
    return {s: s.target - s.prefilled for s in admitted if not s.swapped}


class Continuous:
    def __init__(self, max_batch_size: int, max_batched_tokens: int) -> None:
        self.max_batch_size = max_batch_size
        self.max_batched_tokens = max_batched_tokens

    def schedule(self, stepper: Stepper, now: float) -> Chunks:
        room = self.max_batch_size - len(stepper.running)
        if not stepper.queue or room <= 0:
            return {}
        return _whole(stepper.admit_fcfs(now, room, self.max_batched_tokens))

    def next_look(self, stepper: Stepper, now: float) -> float:
        return math.inf

    def observe(self, stepper: Stepper, request: int, finish: float) -> None:
        return None


class Windowed:
    """Shared by static and dynamic: a group forms when full or when the oldest waited ``max_wait_s``."""

    def __init__(self, max_batch_size: int, max_wait_s: float, joins: bool) -> None:
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.joins = joins  # dynamic: groups join a running batch; static: only an empty replica forms one

    def limits(self) -> tuple[int, float]:
        """(batch size, wait window in seconds) in force now."""
        return self.max_batch_size, self.max_wait_s

    def schedule(self, stepper: Stepper, now: float) -> Chunks:
        queue = stepper.queue
        if not queue or (stepper.running and not self.joins):
            return {}
        size, wait = self.limits()
        room = size - len(stepper.running)
        if room <= 0:
            return {}
        oldest = stepper.ledger.arrival[queue[0]]
        if len(queue) < room and now < oldest + wait:
            return {}  # the group is neither full nor out of time
        return _whole(stepper.admit_fcfs(now, room, math.inf))

    def next_look(self, stepper: Stepper, now: float) -> float:
        if not stepper.queue:
            return math.inf
        deadline = stepper.ledger.arrival[stepper.queue[0]] + self.limits()[1]
        return max(deadline, now)

    def observe(self, stepper: Stepper, request: int, finish: float) -> None:
        return None


class Chunked:
    def __init__(self, max_batch_size: int, max_batched_tokens: int) -> None:
        self.max_batch_size = max_batch_size
        self.max_batched_tokens = max_batched_tokens

    def schedule(self, stepper: Stepper, now: float) -> Chunks:
        running = stepper.running
        # prompts in progress, in admission order (SeqState.decoding read as its fields: once per sequence per
        # iteration); the others decode one token each
        prompts = [s for s in running if s.prefilled < s.target and not s.swapped]
        budget = self.max_batched_tokens - (len(running) - len(prompts))
        chunks: Chunks = {}
        for s in prompts:  # prompts in progress first, in admission order
            if budget <= 0:
                return chunks
            chunks[s] = n = min(s.target - s.prefilled, budget)
            budget -= n
        while budget > 0 and stepper.queue and len(running) < self.max_batch_size:
            admitted = stepper.admit_fcfs(now, 1, math.inf)
            if not admitted:
                break  # the head does not fit in KV: strict FCFS
            s = admitted[0]
            if s.swapped:
                budget -= 1  # it decodes one token this iteration
                continue
            chunks[s] = n = min(s.target - s.prefilled, budget)
            budget -= n
        return chunks

    def next_look(self, stepper: Stepper, now: float) -> float:
        return math.inf

    def observe(self, stepper: Stepper, request: int, finish: float) -> None:
        return None
