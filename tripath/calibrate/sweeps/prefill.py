"""Prefill sweep: one chunk of T new tokens after C cached tokens, alone in an iteration (prefill_v1)."""

from __future__ import annotations

from tripath.calibrate.presets import Preset
from tripath.calibrate.probe import StepProbe
from tripath.calibrate.sweeps.common import Sweep
from tripath.engine.kv.paged_attention import SequenceChunk


def _points(preset: Preset, max_len: int) -> list[tuple[int, int]]:
    return preset.prefill_points(max_len)


def _chunks(probe: StepProbe, new_tokens: int, context_tokens: int) -> list[SequenceChunk]:
    return probe.chunks_prefill(new_tokens, context_tokens)


PREFILL = Sweep(
    name="prefill",
    formula="prefill_v1",
    inputs=("new_tokens", "context_tokens"),
    units={"c0": "ms", "c_tok": "ms/token", "c_attn": "ms/(query-key pair)"},
    notes={"c0": "fixed cost of one iteration", "c_tok": "linear layers per new token",
           "c_attn": "causal attention per query-key pair"},
    points=_points,
    chunks=_chunks,
    describe="one prefill chunk of new_tokens after context_tokens cached, alone in an iteration",
)
