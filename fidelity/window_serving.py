"""Dynamic (and static) batching on the real engine: a request-level batcher in front of Engine.

real_engine.serving.serve hands every arrived request to the engine at once (continuous
batching, as Orca/vLLM). Dynamic batching, as Triton's dynamic batcher, instead forms a batch
when ``max_batch_size`` requests wait or the oldest has waited ``max_wait_s`` (the queue delay),
and runs that batch to completion before the next one starts: later arrivals never join a running
batch. Static batching is the same with an unbounded wait (a batch starts only when full, or when
no more requests will arrive). Records carry the simulator's fields, as serve() writes them.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from real_engine.engine import Engine, StepRecord
from real_engine.serving import PromptSource, ServeResult
from simulator.records import COMPLETED, RequestRecord, rejected_record
from simulator.request import RequestSpec


def serve_batched(
    engine: Engine,
    requests: list[RequestSpec],
    prompts: PromptSource,
    max_batch_size: int,
    max_wait_s: float,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    warmup: bool = True,
) -> ServeResult:
    """Replay requests in wall-clock time through a request-level batcher (max_wait_s = inf: static)."""
    if max_batch_size < 1 or not max_wait_s >= 0.0:
        raise ValueError(f"need max_batch_size >= 1 and max_wait_s >= 0, got {max_batch_size}, {max_wait_s}")
    if warmup:
        engine.generate([[0] * 8], 2)
    pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.request_id)))
    specs = {r.request_id: r for r in requests}
    times: dict[int, dict[str, float]] = {r.request_id: {} for r in requests}
    rejected: dict[int, str] = {}
    queue: deque[RequestSpec] = deque()
    steps: list[StepRecord] = []
    t0 = clock()
    while pending or queue or engine.has_unfinished:
        now = clock() - t0
        while pending and pending[0].arrival_s <= now:
            spec = pending.popleft()
            reason = engine.check_request(spec.prompt_tokens, spec.output_tokens)
            if reason is None:
                queue.append(spec)
            else:
                rejected[spec.request_id] = reason
        if not engine.has_unfinished:
            if not queue:
                if pending:
                    sleep(max(0.0, pending[0].arrival_s - (clock() - t0)))
                continue
            # the window closes when the batch is full, the oldest waited max_wait_s, or nothing more comes
            closes = queue[0].arrival_s + max_wait_s
            if len(queue) < max_batch_size and pending and now < closes:
                sleep(max(0.0, min(closes, pending[0].arrival_s) - (clock() - t0)))
                continue
            for _ in range(min(max_batch_size, len(queue))):
                spec = queue.popleft()
                engine.add_request(prompts.prompt(spec.task, spec.prompt_tokens), spec.output_tokens,
                                   request_id=spec.request_id)
        start = clock() - t0
        rec = engine.step()
        end = clock() - t0
        steps.append(rec)
        for rid in rec.admitted:
            times[rid]["admitted_s"] = start
        for rid in rec.first_tokens:
            times[rid]["first_token_s"] = end
        for rid in rec.finished:
            times[rid]["finish_s"] = end
            engine.release(rid)
    return ServeResult(_records(specs, times, rejected), steps, prompts.source)


def _records(specs: dict[int, RequestSpec], times: dict[int, dict[str, float]],
             rejected: dict[int, str]) -> list[RequestRecord]:
    out = []
    for rid in sorted(specs):
        s = specs[rid]
        if rid in rejected:
            out.append(rejected_record(rid, s.task, s.arrival_s, s.prompt_tokens, s.output_tokens, rejected[rid]))
            continue
        t = times[rid]
        out.append(RequestRecord(rid, s.task, s.arrival_s, s.prompt_tokens, s.output_tokens, 0, t["admitted_s"],
                                 t["first_token_s"], t["finish_s"], COMPLETED, ""))
    return out


def wait_seconds(policy: str, max_wait_ms: float) -> float:
    """The batcher's queue delay for a policy: static waits for a full batch (inf), dynamic max_wait_ms."""
    return math.inf if policy == "static" else max_wait_ms / 1000.0
