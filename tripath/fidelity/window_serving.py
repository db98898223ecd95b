"""Static and dynamic batching on the real engine: a request-level batcher in front of Engine.

tripath.engine.serving.serve hands every arrived request to the engine at once (continuous
batching, as Orca/vLLM). These two policies follow tripath/simulator/loop/batching.py's ``Windowed`` rule,
so the engine and the simulator form the same groups:

- a group forms when the waiting requests fill the free places of the batch (max_batch_size
  minus the sequences still running) or the oldest has waited max_wait_s (Triton's
  max_queue_delay);
- static: only an empty engine forms a group, which runs to completion (nobody joins);
- dynamic (Triton's dynamic batcher in front of an iteration-level engine): a group joins the
  running batch at the next iteration boundary.

Groups are not limited by a token budget (Triton has none): the scenario's max_batched_tokens
must hold a whole group's prompts for the engine to prefill it in one step, as the simulator does.
Records carry the simulator's fields, as serve() writes them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from tripath.core.request import RequestSpec
from tripath.engine.engine import Engine
from tripath.engine.serving import PromptSource, ServeResult
from tripath.engine.step_record import StepRecord
from tripath.engine.workload_replay import replay_records, timed_step


def serve_batched(
    engine: Engine,
    requests: list[RequestSpec],
    prompts: PromptSource,
    max_batch_size: int,
    max_wait_s: float,
    joins: bool,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    warmup: bool = True,
) -> ServeResult:
    """Replay requests in real time through the batcher (joins: dynamic; not joins: static)."""
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
    live = 0  # requests handed to the engine and not finished
    t0 = clock()
    while pending or queue or live:
        now = clock() - t0
        while pending and pending[0].arrival_s <= now:
            spec = pending.popleft()
            reason = engine.check_request(spec.prompt_tokens, spec.output_tokens)
            if reason is None:
                queue.append(spec)
            else:
                rejected[spec.request_id] = reason
        room = max_batch_size - live
        if queue and room > 0 and (joins or live == 0):
            if len(queue) >= room or now >= queue[0].arrival_s + max_wait_s:  # full, or out of time
                for _ in range(min(room, len(queue))):
                    spec = queue.popleft()
                    engine.add_request(prompts.prompt(spec.task, spec.prompt_tokens), spec.output_tokens,
                                       request_id=spec.request_id)
                    live += 1
        if not live:  # idle: until the window closes or the next arrival, whichever is first
            wakes = ([queue[0].arrival_s + max_wait_s] if queue else []) + ([pending[0].arrival_s] if pending else [])
            wake = min(wakes, default=now)
            sleep(max(0.0, wake - (clock() - t0)))
            continue
        rec = timed_step(engine, clock, t0, steps, times)
        live -= len(rec.finished)
    return ServeResult(replay_records(specs, times, rejected), steps, prompts.source)

