"""How one sequence's prompt positions are split across P ranks.

A shard is a tuple of contiguous ``Segment``s of global positions.  Two layouts:

- ``contiguous``: rank r holds one run [start_r, end_r).  Under causal attention the last
  rank's queries see every key and the first rank's see few, so work is unbalanced:
  rank r does about (2r + 1) / P^2 of it.
- ``zigzag``: the sequence is cut into 2P chunks and rank r holds chunks r and 2P-1-r
  (Brandon et al. 2023 "Striped attention" / ring-flash-attention's zigzag), so every rank
  gets one early and one late chunk and about 1/P of the causal work.

Lengths need not divide evenly: the first ``length % pieces`` pieces get one more token.
``contiguous`` also accepts explicit (possibly zero) shard sizes, which the tests use to
check uneven and empty shards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LAYOUTS = ("contiguous", "zigzag")


@dataclass(frozen=True)
class Segment:
    """Global positions start .. end-1."""

    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


def split_evenly(length: int, pieces: int) -> list[int]:
    """Sizes of `pieces` runs covering `length` tokens, the first length % pieces one longer."""
    base, extra = divmod(length, pieces)
    return [base + (1 if i < extra else 0) for i in range(pieces)]


def _runs(sizes: list[int]) -> list[Segment]:
    runs, start = [], 0
    for size in sizes:
        runs.append(Segment(start, start + size))
        start += size
    return runs


@dataclass(frozen=True)
class ShardLayout:
    kind: str
    world_size: int
    length: int
    sizes: tuple[int, ...] | None = None  # contiguous only: explicit shard lengths summing to length

    def __post_init__(self) -> None:
        if self.kind not in LAYOUTS:
            raise ValueError(f"ShardLayout.kind: must be one of {LAYOUTS}, got {self.kind!r}")
        if self.world_size < 1:
            raise ValueError(f"ShardLayout.world_size: must be >= 1, got {self.world_size}")
        if self.length < 1:
            raise ValueError(f"ShardLayout.length: must be >= 1, got {self.length}")
        if self.sizes is not None:
            if self.kind != "contiguous":
                raise ValueError("ShardLayout.sizes: explicit sizes are only for the contiguous layout")
            if len(self.sizes) != self.world_size or any(s < 0 for s in self.sizes):
                raise ValueError(f"ShardLayout.sizes: need {self.world_size} sizes >= 0, got {self.sizes}")
            if sum(self.sizes) != self.length:
                raise ValueError(f"ShardLayout.sizes: sum {sum(self.sizes)} != length {self.length}")

    def segments(self, rank: int) -> tuple[Segment, ...]:
        """The rank's runs of positions, ascending, empty runs dropped."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank: must be in [0, {self.world_size}), got {rank}")
        p = self.world_size
        if self.kind == "contiguous":
            sizes = list(self.sizes) if self.sizes is not None else split_evenly(self.length, p)
            picked = [_runs(sizes)[rank]]
        else:
            chunks = _runs(split_evenly(self.length, 2 * p))
            picked = [chunks[rank], chunks[2 * p - 1 - rank]]
        return tuple(s for s in picked if s.length > 0)

    def shard_length(self, rank: int) -> int:
        return sum(s.length for s in self.segments(rank))

    def positions(self, rank: int) -> torch.Tensor:
        """Global positions held by the rank, in its local order: [T_rank] int64."""
        parts = [torch.arange(s.start, s.end, dtype=torch.int64) for s in self.segments(rank)]
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)

    def owner(self, position: int) -> int:
        """The rank holding global position `position`."""
        for rank in range(self.world_size):
            if any(s.start <= position < s.end for s in self.segments(rank)):
                return rank
        raise ValueError(f"position: {position} is outside [0, {self.length})")

    def causal_pairs(self, rank: int) -> int:
        """(query, key) pairs the rank's queries attend under causal masking: sum of (pos + 1)."""
        return sum((s.start + 1 + s.end) * s.length // 2 for s in self.segments(rank))
