"""Sweep grids and timing settings by preset name: ``quick`` (minutes on 2 CPU cores) and ``full``.

A grid lists per-sequence lengths; points that do not fit the model's context window
(``max_position_embeddings``) are dropped, so one preset serves a 2K-token tiny model and a
4K-token LLaMA-2 alike. Decode points are (batch, total context) with every sequence holding the
same number of tokens, the shape a steady continuous batch has.
"""

from __future__ import annotations

from dataclasses import dataclass

from tripath.calibrate.timer import TimerConfig


def _positive_ints(name: str, values: tuple[int, ...], low: int = 1) -> None:
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < low for v in values):
        raise ValueError(f"Preset.{name}: must be a non-empty tuple of integers >= {low}, got {values!r}")


@dataclass(frozen=True)
class Preset:
    name: str
    prefill_new: tuple[int, ...]  # new tokens of one prefill chunk
    prefill_context: tuple[int, ...]  # tokens already cached before the chunk
    decode_batch: tuple[int, ...]
    decode_context: tuple[int, ...]  # tokens held by EACH decoding sequence (total = batch x this)
    timer: TimerConfig = TimerConfig()
    # The optional sweeps' grids (used only when the job switches that sweep on):
    spec_k: tuple[int, ...] = (4,)  # proposal lengths K of the speculative sweep (--draft)
    paging_chunks: tuple[int, ...] = (256,)  # tokens per page of the paging sweep (--paging)
    sp_degrees: tuple[int, ...] = (2,)  # sequence-parallel degrees P (--seqpar)

    def __post_init__(self) -> None:
        _positive_ints("prefill_new", self.prefill_new)
        _positive_ints("prefill_context", self.prefill_context, low=0)
        _positive_ints("decode_batch", self.decode_batch)
        _positive_ints("decode_context", self.decode_context)
        _positive_ints("spec_k", self.spec_k)
        _positive_ints("paging_chunks", self.paging_chunks)
        _positive_ints("sp_degrees", self.sp_degrees, low=2)

    def prefill_points(self, max_len: int) -> list[tuple[int, int]]:
        """(new_tokens, context_tokens) pairs whose sequence fits in ``max_len`` positions."""
        return [(t, c) for c in self.prefill_context for t in self.prefill_new if t + c <= max_len]

    def decode_points(self, max_len: int) -> list[tuple[int, int]]:
        """(batch, total_context) pairs; each sequence holds one of ``decode_context`` tokens."""
        return [(b, b * c) for c in self.decode_context for b in self.decode_batch if c <= max_len]

    def max_step_tokens(self, max_len: int) -> int:
        """The most KV slots one probed step needs (sizes the probe's block pool)."""
        sizes = [t + c for t, c in self.prefill_points(max_len)] + [s for _, s in self.decode_points(max_len)]
        return max(sizes)


PRESETS: dict[str, Preset] = {
    # 68 points x (2 warm-up + 11 reps): a few minutes for the 6-layer tiny target on 2 shared cores.
    "quick": Preset(
        "quick",
        prefill_new=(16, 32, 64, 128, 256, 384, 512, 768, 1024),
        prefill_context=(0, 256, 512, 1024),
        decode_batch=(1, 2, 4, 8, 12, 16, 24, 32),
        decode_context=(64, 256, 512, 1024),
        timer=TimerConfig(warmup=2, reps=11),
        spec_k=(1, 2, 4, 6),
        paging_chunks=(64, 256, 1024),
        sp_degrees=(2,),  # P = 4 would put 4 ranks on the 2 cores this preset is sized for
    ),
    # The documented full sweep: denser, longer, bigger batches (tens of minutes on CPU, minutes on a GPU).
    "full": Preset(
        "full",
        prefill_new=(1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096),
        prefill_context=(0, 128, 512, 1024, 2048, 3072),
        decode_batch=(1, 2, 4, 8, 16, 32, 64, 128),
        decode_context=(32, 128, 512, 1024, 2048, 4096),
        timer=TimerConfig(warmup=2, reps=7),
        spec_k=(1, 2, 3, 4, 5, 6, 7, 8),
        paging_chunks=(64, 256, 1024),
        sp_degrees=(2, 4),  # a degree above the CPU count is skipped with a printed reason
    ),
}
