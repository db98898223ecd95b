"""Decode sweep: B sequences add one token each, holding S tokens in all (decode_v2)."""

from __future__ import annotations

from dataclasses import replace

from tripath.calibrate.presets import Preset
from tripath.calibrate.probe import StepProbe
from tripath.calibrate.sweeps.common import Sweep
from tripath.engine.kv.paged_attention import SequenceChunk


def _points(preset: Preset, max_len: int) -> list[tuple[int, int]]:
    return preset.decode_points(max_len)


def _chunks(probe: StepProbe, batch: int, total_context: int) -> list[SequenceChunk]:
    return probe.chunks_decode(batch, total_context)


DECODE = Sweep(
    name="decode",
    formula="decode_v2",
    inputs=("batch", "total_context"),
    units={"d0": "ms", "d_multi": "ms", "d_seq": "ms/sequence", "d_ctx": "ms/token"},
    notes={"d0": "fixed cost of one iteration (weights read once, launches)",
           "d_multi": "extra fixed cost of a multi-sequence step (matrix-matrix instead of matrix-vector kernels)",
           "d_seq": "linear layers per decoding sequence", "d_ctx": "attention per cached token read"},
    points=_points,
    chunks=_chunks,
    describe="one decode iteration of batch sequences holding total_context tokens in all",
)

# Published profiles (rebuilt from Vidur's GPU operator timings) keep decode_v1: GPU kernels have no
# gemv -> gemm step at batch 2, and the shipped files must regenerate byte for byte.
DECODE_V1 = replace(DECODE, formula="decode_v1", units={k: v for k, v in DECODE.units.items() if k != "d_multi"},
                    notes={k: v for k, v in DECODE.notes.items() if k != "d_multi"})
