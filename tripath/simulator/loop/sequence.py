"""One admitted (or preempted) request's progress in the per-iteration loop, and an iteration's prefill chunks.

The Stepper (tripath/simulator/loop/stepper.py) keeps a SeqState per running or preempted request; the batching
policies (tripath/simulator/loop/batching.py) choose chunks of them, and the memory policies
(tripath/simulator/loop/memory.py) say how much KV each reserves.
"""

from __future__ import annotations


class SeqState:
    """One admitted (or preempted) request's progress."""

    __slots__ = ("admit_order", "emitted", "output", "prefilled", "prompt", "request", "reserved", "swapped",
                 "target", "task")

    def __init__(self, request: int, prompt: int, output: int, task: int) -> None:
        self.request = request
        self.task = task
        self.prompt = prompt
        self.output = output
        self.target = prompt  # tokens to prefill before decoding (prompt + generated after a recompute)
        self.prefilled = 0  # of target, cached so far
        self.emitted = 0
        self.reserved = 0  # tokens of KV budget it holds
        self.swapped = False  # its KV waits in host memory (swap preemption)
        self.admit_order = 0

    @property
    def context(self) -> int:
        """KV tokens it holds once prefilled: prompt + tokens emitted (the fast path's counting)."""
        return self.prompt + self.emitted

    @property
    def decoding(self) -> bool:
        return self.prefilled >= self.target


Chunks = dict[SeqState, int]  # an iteration's prefill chunks: tokens per sequence, in admission order
