"""Preemption for the general loop (tripath/simulator/loop/stepper.py): evict, recompute or swap KV when memory runs
out.

A mixin of Stepper: it reads and changes the Stepper's running set, queue and KV count. Kept apart
because eviction is its own policy, separate from the iteration loop that calls it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tripath.simulator.loop.path_ledger import PathLedger, SeqState
    from tripath.simulator.loop.stepper_config import StepperConfig
    from tripath.simulator.step_model import StepModel


class Preemption:
    """Stepper's eviction methods; the attributes below are the Stepper's (set in Stepper.__init__)."""

    running: list[SeqState]
    queue: deque[int]
    waiting: dict[int, SeqState]
    used: int
    capacity: int
    preempted: int
    paging_bytes: dict[str, int]
    ledger: PathLedger
    model: StepModel
    config: StepperConfig
    _device_fits: Callable[[list[int]], bool] | None

    def _preempt(self) -> float:
        """Evict the most recently admitted sequences until the next iteration's growth fits.

        Every running sequence writes at most one more token than it has reserved in the next
        iteration (a decode's token; a prefill's chunk was reserved at admission with its first
        token). Returns the seconds of swap-out transfers this causes.
        """
        seconds = 0.0
        while self.running and (self.used + self._next_writes() > self.capacity or self._device_over()):
            victim = max(self.running, key=lambda s: s.admit_order)
            if len(self.running) == 1:
                break  # alone it fits by the router's rule (prompt + output <= capacity)
            seconds += self._evict(victim)
        return seconds

    def _device_over(self) -> bool:
        """Tiered KV: whether the running sequences, after the next iteration's writes, break the
        engine's device residency rule (tripath/simulator/paths/tiered.py), so one must go."""
        if self._device_fits is None:
            return False
        return not self._device_fits([max(s.reserved, s.context + 1) if s.decoding else s.reserved
                                      for s in self.running])

    def _next_writes(self) -> int:
        return sum(max(0, s.context + 1 - s.reserved) for s in self.running if s.decoding)

    def _evict(self, seq: SeqState) -> float:
        self.running.remove(seq)
        self.used -= seq.reserved
        seq.reserved = 0
        self.ledger.preemptions[seq.request] += 1
        self.preempted += 1
        seconds = 0.0
        if self.config.preemption == "swap" and seq.decoding:
            seq.swapped = True
            seconds = self._transfer(seq)
            self.ledger.paging_s[seq.request] += seconds  # its own way out (it is not in the iteration)
        else:  # recompute: re-prefill prompt + generated tokens when re-admitted
            seq.swapped = False
            seq.target = seq.context
            seq.prefilled = 0
        self.waiting[seq.request] = seq
        self.queue.appendleft(seq.request)
        return seconds

    def _transfer(self, seq: SeqState) -> float:
        """Seconds to move ``seq``'s KV one way over device_host (the iteration stalls for them)."""
        nbytes = seq.context * self.model.kv_bytes_per_token
        assert self.config.swap_s is not None
        seconds = float(self.config.swap_s(nbytes))
        self.paging_bytes["device_host"] = self.paging_bytes.get("device_host", 0) + nbytes
        return seconds

    def _swap_in(self) -> float:
        """Bring back the KV of swapped sequences just re-admitted: they decode in this iteration."""
        seconds = 0.0
        for seq in self.running:
            if seq.swapped:
                seq.swapped = False
                seconds += self._transfer(seq)
        return seconds
