"""What a sweep is: the cost model it feeds, its grid points, and the probe step that times one point.

The two core sweeps each define one ``Sweep`` in their own module (prefill.py, decode.py). The optional
sweeps (paging, speculative, sequence parallel, compression, step overhead) time more than one probe step
and build the profile's optional sections themselves (tripath/calibrate/optional_sweeps.py).
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
