"""Decode sweep: B sequences add one token each, holding S tokens in all (decode_v1)."""

from __future__ import annotations

from calibrate.presets import Preset
from calibrate.probe import StepProbe
from calibrate.sweep import Sweep
from real_engine.attention import SequenceChunk


def _points(preset: Preset, max_len: int) -> list[tuple[int, int]]:
    return preset.decode_points(max_len)


def _chunks(probe: StepProbe, batch: int, total_context: int) -> list[SequenceChunk]:
    return probe.chunks_decode(batch, total_context)


DECODE = Sweep(
    name="decode",
    formula="decode_v1",
    inputs=("batch", "total_context"),
    units={"d0": "ms", "d_seq": "ms/sequence", "d_ctx": "ms/token"},
    notes={"d0": "fixed cost of one iteration (weights read once, launches)",
           "d_seq": "linear layers per decoding sequence", "d_ctx": "attention per cached token read"},
    points=_points,
    chunks=_chunks,
    describe="one decode iteration of batch sequences holding total_context tokens in all",
)
