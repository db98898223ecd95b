"""Serving loop: replay a scenario's timed workload through the real engine in wall-clock time.

The same [workload] section the simulator reads becomes RequestSpecs (tripath.simulator.scenario.workload);
each request is handed to the engine once its arrival time has passed and its batching policy lets it
(continuous: at once; static or dynamic groups: tripath/engine/batching_policy.py), and every request
ends as a RequestRecord with the simulator's fields, so one workload runs through both and
their records compare directly.  Times are seconds from the start of the replay (measured).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tripath.core.data_dirs import MODELS_DIR
from tripath.core.errors import InputError
from tripath.core.records import COMPLETED, RequestRecord, rejected_record
from tripath.core.request import RequestSpec
from tripath.engine.batching_policy import BatchingPolicy, Continuous
from tripath.engine.engine import Engine
from tripath.engine.step_record import StepRecord

EVAL_PROMPTS = MODELS_DIR / "eval_prompts.jsonl"


class PromptSource:
    """Prompt ids for a task and length: held-out task prompts (bytes) if shipped, else seeded random ids."""

    def __init__(self, rng: np.random.Generator, vocab_size: int, path: Path | None = EVAL_PROMPTS) -> None:
        self.rng = rng
        self.vocab = min(vocab_size, 256)  # byte-level ids; random ids stay in the byte range too
        self.by_task: dict[str, list[list[int]]] = {}
        if path is not None and path.is_file():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    task, prompt = row["task"], row["prompt"]
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise InputError(
                        str(path), f"line {number}", f"needs a JSON object with task and prompt: {exc}"
                    ) from exc
                ids = list(str(prompt).encode("utf-8"))  # byte-level tokenizer: token id = byte value
                if ids:
                    self.by_task.setdefault(str(task), []).append(ids)

    @property
    def source(self) -> str:
        return "eval_prompts" if self.by_task else "random"

    def prompt(self, task: str, length: int) -> list[int]:
        pool = self.by_task.get(task) or [p for ps in self.by_task.values() for p in ps]
        if not pool:
            return self.rng.integers(0, self.vocab, size=length).tolist()
        ids = pool[int(self.rng.integers(len(pool)))]
        repeats = -(-length // len(ids))  # cut or repeat the text to exactly `length` tokens
        return (ids * repeats)[:length]


@dataclass(frozen=True)
class ServeResult:
    records: list[RequestRecord]  # in request order
    steps: list[StepRecord]
    prompt_source: str


def serve(
    engine: Engine,
    requests: list[RequestSpec],
    prompts: PromptSource,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    warmup: bool = True,
    batching: BatchingPolicy | None = None,
) -> ServeResult:
    """Replay requests at their arrival times; generate exactly output_tokens each (greedy, EOS ignored).

    ``batching`` says when arrived requests go to the engine (tripath/engine/batching_policy.py; default
    Continuous: at once).  With ``warmup`` one short request runs before the clock starts, so one-time costs
    (RoPE tables, allocator growth, kernel selection) do not land on the first measured request.
    """
    policy = batching if batching is not None else Continuous()
    if warmup:
        engine.generate([[0] * 8], 2)
    pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.request_id)))
    queue: deque[RequestSpec] = deque()  # arrived, accepted, not yet handed to the engine
    log = ReplayLog(requests)
    live = 0  # requests handed to the engine and not yet finished or failed
    t0 = clock()
    while pending or queue or engine.has_unfinished:
        now = clock() - t0
        log.arrive(engine, pending, queue, now)
        for _ in range(policy.take(queue, live, now)):
            spec = queue.popleft()
            engine.add_request(prompts.prompt(spec.task, spec.prompt_tokens), spec.output_tokens,
                               request_id=spec.request_id)
            live += 1
        if not engine.has_unfinished:  # idle: until the policy's wake-up or the next arrival, the first
            wakes = [w for w in (policy.wake(queue), pending[0].arrival_s if pending else None) if w is not None]
            if wakes:
                sleep(max(0.0, min(wakes) - (clock() - t0)))
            continue
        rec = log.step(engine, clock, t0)
        live -= len(rec.finished) + len(rec.failed)
    return ServeResult(log.records(), log.steps, prompts.source)


class ReplayLog:
    """What a replay measured, on its clock: per request its times or why it was rejected, and every step."""

    def __init__(self, requests: list[RequestSpec]) -> None:
        self.specs = {r.request_id: r for r in requests}
        self.times: dict[int, dict[str, float]] = {r.request_id: {} for r in requests}
        self.rejected: dict[int, str] = {}  # refused at arrival, or ended by a tier fault mid-flight
        self.steps: list[StepRecord] = []

    def arrive(self, engine: Any, pending: deque[RequestSpec], queue: deque[RequestSpec], now: float) -> None:
        """Move the requests that arrived by ``now`` from ``pending`` to ``queue``; book those the engine
        can never run as rejected, with its reason."""
        while pending and pending[0].arrival_s <= now:
            spec = pending.popleft()
            reason = engine.check_request(spec.prompt_tokens, spec.output_tokens)
            if reason is None:
                queue.append(spec)
            else:
                self.rejected[spec.request_id] = reason

    def step(self, engine: Any, clock: Callable[[], float], t0: float) -> StepRecord:
        """One engine step, timed on ``clock`` from ``t0``; books admissions, first tokens, finishes and
        tier faults (tiered KV: the request ends, recorded as rejected with the reason), releasing the ended."""
        start = clock() - t0
        rec = engine.step()  # returns after device sync: tokens exist when `end` is read
        end = clock() - t0
        self.steps.append(rec)
        for rid in rec.admitted:
            self.times[rid]["admitted_s"] = start
        for rid in rec.first_tokens:
            self.times[rid]["first_token_s"] = end
        for rid in rec.finished:
            self.times[rid]["finish_s"] = end
            self.times[rid].update(engine.request_fields(rid))  # read before release() drops them
            engine.release(rid)
        for rid in rec.failed:
            self.rejected.setdefault(rid, f"tier fault: {engine.errors.get(rid, 'unknown')}")
            engine.release(rid)
        return rec

    def records(self) -> list[RequestRecord]:
        """Records in request order: rejected ones with their reason, the rest with their booked times."""
        out = []
        for rid in sorted(self.specs):
            s = self.specs[rid]
            if rid in self.rejected:
                out.append(rejected_record(rid, s.task, s.arrival_s, s.prompt_tokens, s.output_tokens,
                                           self.rejected[rid]))
                continue
            t = self.times[rid]
            out.append(RequestRecord(rid, s.task, s.arrival_s, s.prompt_tokens, s.output_tokens, 0,
                                     t["admitted_s"], t["first_token_s"], t["finish_s"], COMPLETED, "",
                                     int(t.get("draft_rounds", 0)), int(t.get("accepted_tokens", 0))))
        return out


def prefix_hit_tokens(engine: Engine, records: list[RequestRecord]) -> tuple[int, int] | None:
    """(prompt tokens taken from the prefix cache, prompt tokens) over the completed requests; None when the
    engine caches no prefixes. The hit rate tripath serve prints and the fidelity runner compares."""
    cached = getattr(engine.kv_manager, "cached_tokens", None)
    if cached is None:
        return None
    done = [r for r in records if r.completed]
    return sum(cached.get(r.request_id, 0) for r in done), sum(r.prompt_tokens for r in done)
