"""The general loop's bookkeeping (tripath/simulator/loop/stepper.py): per-request path sums and per-sequence
progress."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tripath.simulator.loop.replica import Ledger


class PathLedger(Ledger):
    """The Ledger plus the per-path sums the records carry (tripath/core/records.py)."""

    def __init__(self, prompts: Sequence[int], outputs: Sequence[int], kv_bytes_per_token: int,
                 tasks: Sequence[int]) -> None:
        super().__init__(prompts, outputs, kv_bytes_per_token)
        n = len(prompts)
        self.task = list(tasks)
        self.arrival = [math.nan] * n  # when it was routed (its arrival): policies' wait windows start here
        self.draft_rounds = [0] * n
        self.accepted = [0] * n
        self.paging_s = [0.0] * n
        self.merge_s = [0.0] * n
        self.preemptions = [0] * n


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
        """KV tokens it holds once prefilled: prompt + tokens emitted (the counting replica.py uses)."""
        return self.prompt + self.emitted

    @property
    def decoding(self) -> bool:
        return self.prefilled >= self.target
