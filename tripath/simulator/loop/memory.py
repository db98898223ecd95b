"""How the per-iteration loop reserves KV: the scenario's ``[batching] preemption`` as a policy object.

- ``WholeReservation`` (preemption "none"): admission reserves prompt + output tokens, so a running sequence
  never needs more and nothing is ever evicted (the exact fast path's rule, bit for bit).
- ``GrowingReservation`` (preemption "recompute" / "swap"): admission reserves what the request holds now plus
  the token the next iteration writes; each iteration a decoding sequence's reservation grows to what it holds,
  and when the next iteration's writes do not fit the Stepper evicts (tripath/simulator/loop/stepper.py:
  ``_preempt``). ``swaps`` says whether an evicted decode's KV moves to host memory (swap) or is dropped and
  recomputed.

The Stepper asks the policy, never a mode string: ``need`` at admission, ``next_writes`` before an iteration,
``grow`` after one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from tripath.simulator.loop.sequence import SeqState


class Memory(Protocol):
    """What a sequence reserves and how reservations change (module docstring)."""

    evicts: bool  # whether a reservation can outgrow the budget, so sequences may be evicted
    swaps: bool  # evicted decodes keep their KV in host memory (swap) rather than recompute it

    def need(self, seq: SeqState) -> int:
        """KV tokens admitting ``seq`` reserves now."""
        ...

    def next_writes(self, running: list[SeqState]) -> int:
        """Tokens the running sequences write in the next iteration beyond what they reserved."""
        ...

    def grow(self, members: Iterable[SeqState]) -> int:
        """After an iteration: raise each member's reservation to what it holds; the tokens added."""
        ...


class WholeReservation:
    """Preemption "none": prompt + output reserved at admission; nothing grows, nothing is evicted."""

    evicts = False
    swaps = False

    def need(self, seq: SeqState) -> int:
        return seq.prompt + seq.output

    def next_writes(self, running: list[SeqState]) -> int:
        return 0

    def grow(self, members: Iterable[SeqState]) -> int:
        return 0


class GrowingReservation:
    """Preemption "recompute" / "swap": reserve what is held plus the next token; reservations grow."""

    evicts = True

    def __init__(self, swaps: bool) -> None:
        self.swaps = swaps

    def need(self, seq: SeqState) -> int:
        # a swapped-in sequence holds its whole context; any other prefills its target first
        return seq.context + 1 if seq.swapped else seq.target + 1

    def next_writes(self, running: list[SeqState]) -> int:
        return sum(max(0, s.context + 1 - s.reserved) for s in running if s.decoding)

    def grow(self, members: Iterable[SeqState]) -> int:
        added = 0
        for s in members:  # a decoding sequence now holds prompt + emitted tokens
            if s.decoding and s.context > s.reserved:
                added += s.context - s.reserved
                s.reserved = s.context
        return added


def memory_for(preemption: str) -> Memory:
    """The memory policy of a ``[batching] preemption`` mode ("none", "recompute", "swap")."""
    if preemption == "none":
        return WholeReservation()
    return GrowingReservation(swaps=preemption == "swap")
