"""What the compressed KV store costs and saves at run time: resident bytes per token, decode-step time.

For each context length, one sequence is prefilled and decoded through the serving Engine with
``kv_compression`` None (the plain paged pool, one SDPA call per layer over the gathered context),
"fp" (the store's blockwise attention over full-precision blocks), and each quantized mode.  The
pool holds exactly the blocks the sequence needs, so the resident bytes are the sequence's own:
sum of untyped_storage().nbytes() over the store's tensors (code pools, heavy-hitter rows, staged
full-precision blocks) against the plain pool's K/V tensor.  Decode steps are timed with the
calling thread's CPU time (time.thread_time: the machine is shared, and CPU time is what other
jobs do not inflate), modes interleaved round by round so drift hits them alike; the median step
of each mode is reported, and ratios against the plain pool and against "fp".
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.sampling import SamplingParams

MODES = (None, "fp", "int8", "int4", "mixed-int8", "mixed-int4")


@dataclass(frozen=True)
class StorePoint:
    context: int
    mode: str  # "paged" for the plain pool
    resident_bytes: int  # KV tensors held for this one sequence after its last step
    bytes_per_token: float
    step_ms: float  # median decode-step CPU time
    steps: int


def _engine(model: LlamaModel, mode: str | None, tokens: int, block_size: int) -> Engine:
    blocks = -(-tokens // block_size)
    config = EngineConfig(max_batch_size=1, block_size=block_size, num_blocks=blocks, kv_compression=mode,
                          fuse_projections=False)
    return Engine(model, config)


@torch.inference_mode()
def measure_store(model: LlamaModel, prompt: list[int], contexts: list[int], steps: int, rounds: int,
                  block_size: int = 16) -> list[StorePoint]:
    """Per context and mode: resident bytes and median decode-step CPU time (ms) at batch 1."""
    out = []
    for ctx in contexts:
        ids = (prompt * (ctx // max(1, len(prompt)) + 1))[:ctx]
        times: dict[str | None, list[float]] = {m: [] for m in MODES}
        resident: dict[str | None, int] = {}
        for _ in range(rounds):
            for mode in MODES:
                engine = _engine(model, mode, ctx + steps - 1, block_size)
                engine.add_request(ids, steps, SamplingParams())
                engine.step()  # the prefill (chunked by max_batched_tokens)
                while engine.scheduler.has_unfinished and not engine.sequences[0].output_ids:
                    engine.step()
                while engine.has_unfinished:
                    start = time.thread_time()
                    engine.step()
                    times[mode].append(time.thread_time() - start)
                resident[mode] = engine.backend.kv_bytes()
        for mode in MODES:
            ms = [t * 1e3 for t in times[mode]]
            total = ctx + steps - 1  # tokens whose K/V the pool held at the end
            out.append(StorePoint(ctx, mode or "paged", resident[mode], resident[mode] / total,
                                  statistics.median(ms), len(ms)))
    return out
