"""What a sweep is: the cost model it feeds, its grid points, and the probe step that times one point.

Each sweep lives in its own module (``sweep_prefill``, ``sweep_decode``) and registers a ``Sweep``
here. The paging (per link, chunk sizes), speculative (tasks x K), sequence-parallel (P x length)
and compression sweeps will be modules of the same shape once the engine has those features;
until then a profile simply lacks those optional sections (nothing is faked).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tripath.calibrate.presets import Preset
from tripath.calibrate.probe import StepProbe
from tripath.engine.kv.paged_attention import SequenceChunk


@dataclass(frozen=True)
class Sweep:
    name: str  # the cost model it feeds: costs.<name> in the profile
    formula: str  # a name in tripath.profile.formulas.FORMULAS
    inputs: tuple[str, str]  # what x1 and x2 of a sample mean (the formula's inputs)
    units: dict[str, str]  # coefficient -> unit
    notes: dict[str, str]  # coefficient -> what it stands for
    points: Callable[[Preset, int], list[tuple[int, int]]]  # (preset, max_len) -> grid
    chunks: Callable[[StepProbe, int, int], list[SequenceChunk]]  # (probe, x1, x2) -> one step's sequences
    describe: str  # one line for the profile's cost-model note
