"""Speculative sweep: per task and per proposal length K, draft-token acceptance and the costs c and v(K).

For each task of the eval prompts and each K of the grid, a few prompts are decoded greedily at
batch 1, once by the target alone (the unit of cost: one plain target decode step) and once by the
Engine with speculative decoding (a draft-model proposer) at fixed K, interleaved prompt by prompt so that
contention on a shared machine hits both alike. Measured: tripath.engine.speculative.metrics' per-token acceptance a
(accepted / (accepted + rejections)), per-position acceptance, the draft pass time (c = draft pass /
target step) and the verify pass over K+1 tokens (v(K) = verify pass / target step). Clock: the
engine's wall-clock pass times, or with ``SpecSettings.clock = "thread"`` (a CPU job timed by thread
CPU time, which other processes on a shared machine do not inflate) whole steps by CPU time, the
draft pass from the draft's own plain decode steps (see ``_task_rows``).

Rows in the calibration's samples CSV (columns sweep, layers, x1, x2, median_ms, min_ms, max_ms,
reps); ``x1`` is the task's index in ``tripath.training.corpus.TASKS``:

- ``spec_target``, ``spec_draft``, ``spec_verify`` (x2 = K): pass times in ms, the plain target step
  timed in the same run as K;
- ``spec_accept_k{K}`` (x2 = draft position i, 1..K): COUNTS, not times: median_ms = min_ms = max_ms =
  drafts whose i-th token was accepted, reps = drafts that proposed an i-th token; and x2 = 0 holds
  the rounds that ended at a rejection (the denominator of a is accepted + rejections);
- ``spec_prompt_k{K}`` (x2 = prompt index): COUNTS per prompt, median_ms = min_ms = max_ms = its accepted
  draft tokens, reps = its accepted + rejections (its own a = accepted / reps): the between-prompt spread
  of a, over ``SpecSettings.spread_prompts`` prompts (the timed ones and more, decoded untimed; written
  only when 2 or more prompts are counted);
- ``spec_prefill_target``, ``spec_prefill_draft`` (x2 = K): per timed prompt, the prompt pass's
  token-dependent work in ms, i.e. the plain engine's prefill step less its median decode step on the
  same prompt (the draft's prompt pass is priced over the round's draft step, which K c counts already);
  ``spec_prefill_tokens`` (x2 = K): COUNTS, the prompts' lengths in tokens (median, min, max).

A (task, K) pair is measured whole or, if every one of its rows is on disk, skipped (resume).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from tripath.calibrate.samples import Sample, SampleLog
from tripath.calibrate.sweeps.spec_batch import measure_batch
from tripath.calibrate.sweeps.spec_sections import (  # re-exported: the row names and the sections are this sweep's
    PREFILL_SWEEPS,
    TIMED_SWEEPS,
    accept_sweep,
    is_spec_sweep,
    prompt_sweep,
    speculative_sections,
)
from tripath.core.speculative import FixedK
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.speculative.decoding import SpecStepRecord, SpeculativeDecoding
from tripath.engine.speculative.metrics import SpecCounters
from tripath.engine.speculative.proposers import DraftModelProposer
from tripath.engine.step_record import StepRecord
from tripath.training.corpus import TASKS

ENGINE = EngineConfig(num_blocks=256, block_size=16)


@dataclass(frozen=True)
class SpecSettings:
    """How much to decode per task and K: ``prompts`` prompts of ``new_tokens`` tokens each, at each fixed K of
    ``ks`` (the K grid; ``k``, the profile's headline K, is always measured too)."""

    k: int = 4
    prompts: int = 3
    new_tokens: int = 48
    ks: tuple[int, ...] = ()
    clock: str = "wall"  # "wall", or "thread": CPU time of the (single) torch thread, see _task_rows
    # prompts per task whose acceptance is counted at each K (the timed ones first): the between-prompt spread;
    # untimed greedy decodes of the tiny pair take ~0.2 s a prompt on one CPU thread
    spread_prompts: int = 12

    def __post_init__(self) -> None:
        for name in ("k", "prompts"):
            if getattr(self, name) < 1:
                raise ValueError(f"SpecSettings.{name}: must be >= 1, got {getattr(self, name)}")
        if self.spread_prompts < 0:
            raise ValueError(f"SpecSettings.spread_prompts: must be >= 0, got {self.spread_prompts}")
        if self.new_tokens < 2:
            raise ValueError(f"SpecSettings.new_tokens: must be >= 2, got {self.new_tokens}")
        object.__setattr__(self, "ks", tuple(self.ks))
        if self.clock not in ("wall", "thread"):
            raise ValueError(f"SpecSettings.clock: must be wall or thread, got {self.clock!r}")
        if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.ks):
            raise ValueError(f"SpecSettings.ks: must be integers >= 1, got {self.ks!r}")

    @property
    def grid(self) -> tuple[int, ...]:
        """Every K measured, ascending."""
        return tuple(sorted({self.k, *self.ks}))

    @property
    def prompts_needed(self) -> int:
        """Prompts per task the sweep reads: the timed ones and those counted for the spread."""
        return max(self.prompts, self.spread_prompts)


def _stat_sample(sweep: str, layers: int, x1: int, x2: int, seconds: list[float]) -> Sample:
    ms = [s * 1e3 for s in seconds]
    return Sample.of(sweep, layers, x1, x2, ms)


def _count_sample(k: int, layers: int, task: int, position: int, count: int, out_of: int) -> Sample:
    return _count_sample_named(accept_sweep(k), layers, task, position, count, out_of)


def _count_sample_named(sweep: str, layers: int, task: int, x2: int, count: int, out_of: int) -> Sample:
    return Sample.constant(sweep, layers, task, x2, count, out_of)


Step = tuple[StepRecord, float, list[tuple[int, int, float]]]


def _decode(engine: Engine, prompt: list[int], new: int) -> tuple[list[Step], SpecCounters]:
    """Generate at batch 1; every step (the prefill step first) with the torch thread's CPU seconds of the whole
    step and the proposer's (batch, tokens, wall seconds) pass entries made during it; and the request's
    acceptance counters (empty for a plain engine)."""
    rid = engine.add_request(prompt, new)
    passes = getattr(getattr(engine.strategy, "proposer", None), "pass_seconds", [])
    steps = []
    while engine.has_unfinished:
        before, cpu = len(passes), time.thread_time()
        record = engine.step()
        steps.append((record, time.thread_time() - cpu, passes[before:]))
    counters = getattr(engine.strategy, "request_counters", {}).get(rid, SpecCounters())
    engine.release(rid)
    return steps, counters


def _seconds(step: Step, thread: bool) -> float:
    return step[1] if thread else step[0].wall_s


def _prompt_work(steps: list[Step], thread: bool) -> float:
    """The prompt pass's token-dependent seconds: the prefill step less the median decode step after it."""
    decode = [_seconds(st, thread) for st in steps[1:]]
    return _seconds(steps[0], thread) - (statistics.median(decode) if decode else 0.0)


def _prompt_count(k: int, layers: int, task: int, index: int, counters: SpecCounters) -> Sample:
    accepted, rejections = counters.num_accepted_tokens, counters.num_rejections
    return _count_sample_named(prompt_sweep(k), layers, task, index, accepted, accepted + rejections)


def _decode_like(passes: list[tuple[int, int, float]]) -> list[float]:
    """Draft passes of one sequence, one token or the 2-token catch-up after a full accept (not the draft's
    prefill of the prompt), as the engine's own c measurement counts them: their wall seconds."""
    return [sec for b, n, sec in passes if b == 1 and n <= 2]


def _task_rows(target: LlamaModel, draft: LlamaModel, prompts: list[list[int]], task: int, k: int,
               settings: SpecSettings, layers: int) -> list[Sample]:
    """One (task, K) run. Wall clock: the engine's own pass times (perf_counter after a device sync). Thread
    clock: only whole steps are timed, by the thread's CPU time: the target's and the draft's plain decode
    steps give the unit T and the draft pass D (c = D / T), and a full-K round's CPU time R less its draft
    passes gives the verify pass, R - passes x median(D) (so a round costs passes x c + v target steps)."""
    plain, plain_draft = Engine(target, ENGINE), Engine(draft, ENGINE)
    strategy = SpeculativeDecoding(DraftModelProposer(draft, ENGINE.num_blocks, ENGINE.block_size), FixedK(k))
    spec = Engine(target, ENGINE, strategy=strategy)
    thread = settings.clock == "thread"
    for engine in (plain, plain_draft, spec):
        _decode(engine, [1] * 8, 4)  # warm-up: RoPE tables, allocator
    strategy.counters = SpecCounters()  # acceptance of the eval prompts only
    target_s: list[float] = []
    draft_s: list[float] = []
    rounds: list[tuple[float, float, int]] = []  # full-K rounds: (CPU seconds, verify wall seconds, draft passes)
    work: tuple[list[float], list[float]] = ([], [])  # prompt-pass seconds (token-dependent): target, draft
    per_prompt: list[Sample] = []
    timed = prompts[: settings.prompts]
    for index, prompt in enumerate(timed):  # interleaved, so contention of a shared machine hits all alike
        steps = _decode(plain, prompt, settings.new_tokens)[0]
        target_s += [_seconds(st, thread) for st in steps[1:]]
        work[0].append(_prompt_work(steps, thread))
        steps = _decode(plain_draft, prompt, settings.new_tokens)[0]
        work[1].append(_prompt_work(steps, thread))
        if thread:
            draft_s += [cpu for _, cpu, _ in steps[1:]]
        spec_steps, counters = _decode(spec, prompt, settings.new_tokens)
        per_prompt.append(_prompt_count(k, layers, task, index, counters))
        for rec, cpu, passes in spec_steps[1:]:
            assert isinstance(rec, SpecStepRecord)
            if rec.decode_seqs != 1 or rec.prefill_seqs:
                continue
            if not thread:
                draft_s += _decode_like(passes)
            # full-K rounds (the last ones may be capped); by CPU time only those without the draft's prompt prefill
            if rec.ks[0] == k and (not thread or len(_decode_like(passes)) == len(passes)):
                rounds.append((cpu, rec.verify_s, len(passes)))
    if not draft_s or not rounds:
        raise RuntimeError(f"task {TASKS[task]}: no batch-1 draft pass or full K={k} round was timed")
    # more prompts, untimed, for the between-prompt spread of a (greedy: their counts are exact, not noisy)
    for index in range(len(timed), min(settings.spread_prompts, len(prompts))):
        per_prompt.append(_prompt_count(k, layers, task, index, _decode(spec, prompts[index], settings.new_tokens)[1]))
    unit_draft = statistics.median(draft_s)
    verify_s = [max(0.0, cpu - n * unit_draft) if thread else wall for cpu, wall, n in rounds]
    c = strategy.counters
    rows = [_stat_sample("spec_target", layers, task, k, target_s),
            _stat_sample("spec_draft", layers, task, k, draft_s),
            _stat_sample("spec_verify", layers, task, k, verify_s),
            _count_sample(k, layers, task, 0, c.num_rejections, c.num_drafts)]
    proposed = c.proposed_per_position + [0] * (k - len(c.proposed_per_position))
    accepted = c.accepted_per_position + [0] * (k - len(c.accepted_per_position))
    rows += [_count_sample(k, layers, task, i + 1, accepted[i], proposed[i]) for i in range(k)]
    lengths = [len(p) for p in timed]
    rows += [_stat_sample("spec_prefill_target", layers, task, k, work[0]),
             _stat_sample("spec_prefill_draft", layers, task, k, work[1]),
             Sample.of("spec_prefill_tokens", layers, task, k, [float(n) for n in lengths])]
    return rows + (per_prompt if len(per_prompt) >= 2 else [])  # one prompt has no spread to tell


def unit_keys(layers: int, task: int, k: int, prompts: int = 0) -> list[tuple[str, int, int, int]]:
    """The samples-CSV keys one (task, K) measurement of ``prompts`` prompts writes (per-prompt counts from 2)."""
    return ([(name, layers, task, k) for name in (*TIMED_SWEEPS, *PREFILL_SWEEPS)]
            + [(accept_sweep(k), layers, task, i) for i in range(k + 1)]
            + [(prompt_sweep(k), layers, task, i) for i in range(prompts if prompts >= 2 else 0)])


def measure_speculative(target: LlamaModel, draft: LlamaModel, prompts: dict[str, list[list[int]]],
                        settings: SpecSettings, log: SampleLog, progress: Callable[[str], None] | None = None) -> int:
    """Measure every (task of ``prompts``, K of the grid) not yet on disk; returns the (task, K) pairs measured."""
    layers = target.config.num_layers
    measured = 0
    for name, task_prompts in prompts.items():
        task = TASKS.index(name)
        for k in settings.grid:
            counted = min(len(task_prompts), settings.prompts_needed)
            if all(key in log.done for key in unit_keys(layers, task, k, counted)):
                continue
            for row in _task_rows(target, draft, task_prompts[:counted], task, k, settings, layers):
                if row.key not in log.done:  # a pair cut short by a kill: keep its rows, add the rest
                    log.append(row)
            measured += 1
            if progress is not None:
                progress(f"{name} K={k}")
    if prompts:  # rounds at batch B > 1 (tripath/calibrate/sweeps/spec_batch.py), on one task's prompts: a few seconds
        task_prompts = prompts.get("math") or next(iter(prompts.values()))
        measure_batch(target, draft, task_prompts, settings.k, log, settings.clock == "thread")
    return measured


__all__ = ["PREFILL_SWEEPS", "TIMED_SWEEPS", "SpecSettings", "accept_sweep", "is_spec_sweep", "measure_speculative",
           "prompt_sweep", "speculative_sections", "unit_keys"]
