"""Speculative sweep: per task, draft-token acceptance at K and the costs c and v(K) of a round.

For each task of the eval prompts, a few prompts are decoded greedily at batch 1, once by the
target alone (the unit of cost: one plain target decode step) and once by the SpeculativeEngine
with a draft-model proposer at fixed K. Measured: spec_metrics' per-token acceptance a
(accepted / (accepted + rejections)), per-position acceptance, the draft pass time (c = draft
pass / target step) and the verify pass over K+1 tokens (v(K) = verify pass / target step).

Rows in the calibration's samples CSV (columns sweep, layers, x1, x2, median_ms, min_ms, max_ms,
reps); ``x1`` is the task's index in ``real_engine.corpus.TASKS``:

- ``spec_target`` (x2 = 0), ``spec_draft`` (x2 = K), ``spec_verify`` (x2 = K): pass times in ms;
- ``spec_accept`` (x2 = draft position i, 1..K): COUNTS, not times: median_ms = min_ms = max_ms =
  drafts whose i-th token was accepted, reps = drafts that proposed an i-th token; and x2 = 0
  holds the rounds that ended at a rejection (the denominator of a is accepted + rejections).

A task is measured whole or, if every one of its rows is on disk, skipped (resume).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from calibrate.samples import Sample, SampleLog
from real_engine.corpus import TASKS
from real_engine.engine import Engine, EngineConfig
from real_engine.model import LlamaModel
from real_engine.proposers import DraftModelProposer
from real_engine.spec_controller import FixedK
from real_engine.speculative import SpeculativeEngine
from simulator.profile import Coefficient, Speculative, TaskAcceptance

SPEC_SWEEPS = ("spec_target", "spec_draft", "spec_verify", "spec_accept")
ENGINE = EngineConfig(num_blocks=256, block_size=16)


@dataclass(frozen=True)
class SpecSettings:
    """How much to decode per task: ``prompts`` prompts of ``new_tokens`` tokens each, at fixed ``k``."""

    k: int = 4
    prompts: int = 3
    new_tokens: int = 48

    def __post_init__(self) -> None:
        for name in ("k", "prompts"):
            if getattr(self, name) < 1:
                raise ValueError(f"SpecSettings.{name}: must be >= 1, got {getattr(self, name)}")
        if self.new_tokens < 2:
            raise ValueError(f"SpecSettings.new_tokens: must be >= 2, got {self.new_tokens}")


def _stat_sample(sweep: str, layers: int, x1: int, x2: int, seconds: list[float]) -> Sample:
    ms = [s * 1e3 for s in seconds]
    return Sample(sweep, layers, x1, x2, statistics.median(ms), min(ms), max(ms), len(ms))


def _count_sample(layers: int, task: int, position: int, count: int, out_of: int) -> Sample:
    return Sample("spec_accept", layers, task, position, float(count), float(count), float(count), out_of)


def _decode_walls(engine: Engine | SpeculativeEngine, prompt: list[int], new: int) -> list[float]:
    """Generate at batch 1; the wall seconds of each step after the prefill step."""
    rid = engine.add_request(prompt, new)
    walls = []
    while engine.has_unfinished:
        walls.append(engine.step().wall_s)
    engine.release(rid)
    return walls[1:]


def _task_rows(target: LlamaModel, draft: LlamaModel, prompts: list[list[int]], task: int, settings: SpecSettings,
               layers: int) -> list[Sample]:
    plain = Engine(target, ENGINE)
    spec = SpeculativeEngine(target, DraftModelProposer(draft, ENGINE.num_blocks, ENGINE.block_size), ENGINE,
                             FixedK(settings.k))
    _decode_walls(plain, [1] * 8, 4)  # warm-up: RoPE tables, allocator
    _decode_walls(spec, [1] * 8, 4)
    spec.counters = type(spec.counters)()  # acceptance of the eval prompts only
    spec.timings = type(spec.timings)()
    target_s: list[float] = []
    for prompt in prompts:  # interleaved, so contention of a shared machine hits both alike
        target_s += _decode_walls(plain, prompt, settings.new_tokens)
        _decode_walls(spec, prompt, settings.new_tokens)
    k, c = settings.k, spec.counters
    if not spec.timings.draft_pass_s or not spec.timings.verify_s.get(k):
        raise RuntimeError(f"task {TASKS[task]}: no batch-1 draft or verify pass at K={k} was timed")
    rows = [_stat_sample("spec_target", layers, task, 0, target_s),
            _stat_sample("spec_draft", layers, task, k, spec.timings.draft_pass_s),
            _stat_sample("spec_verify", layers, task, k, spec.timings.verify_s[k]),
            _count_sample(layers, task, 0, c.num_rejections, c.num_drafts)]
    proposed = c.proposed_per_position + [0] * (k - len(c.proposed_per_position))
    accepted = c.accepted_per_position + [0] * (k - len(c.accepted_per_position))
    rows += [_count_sample(layers, task, i + 1, accepted[i], proposed[i]) for i in range(k)]
    return rows


def measure_speculative(target: LlamaModel, draft: LlamaModel, prompts: dict[str, list[list[int]]],
                        settings: SpecSettings, log: SampleLog, progress: Callable[[str], None] | None = None) -> int:
    """Measure every task of ``prompts`` (names from TASKS) not yet on disk; returns tasks measured."""
    layers = target.config.num_layers
    measured = 0
    for name, task_prompts in prompts.items():
        task = TASKS.index(name)
        keys = [("spec_target", layers, task, 0), ("spec_draft", layers, task, settings.k),
                ("spec_verify", layers, task, settings.k)] + [("spec_accept", layers, task, i)
                                                              for i in range(settings.k + 1)]
        if all(key in log.done for key in keys):
            continue
        for row in _task_rows(target, draft, task_prompts[: settings.prompts], task, settings, layers):
            if row.key not in log.done:  # a task cut short by a kill: keep its rows, add the rest
                log.append(row)
        measured += 1
        if progress is not None:
            progress(name)
    return measured


def speculative_sections(samples: list[Sample], draft_name: str, k: int
                         ) -> tuple[Speculative | None, dict[str, TaskAcceptance]]:
    """The profile's ``speculative`` and ``acceptance`` sections from the spec_* rows at K = ``k``."""
    by_key = {s.key: s for s in samples if s.sweep in SPEC_SWEEPS}
    acceptance: dict[str, TaskAcceptance] = {}
    c_values: list[float] = []
    v_values: list[float] = []
    for task, name in enumerate(TASKS):
        layers = [s.layers for s in samples if s.sweep == "spec_target" and s.x1 == task]
        if not layers:
            continue
        lay = layers[0]
        unit = by_key[("spec_target", lay, task, 0)].median_ms
        c_values.append(by_key[("spec_draft", lay, task, k)].median_ms / unit)
        v_values.append(by_key[("spec_verify", lay, task, k)].median_ms / unit)
        positions = [by_key[("spec_accept", lay, task, i)] for i in range(1, k + 1)]
        rejections = int(by_key[("spec_accept", lay, task, 0)].median_ms)
        accepted = sum(int(p.median_ms) for p in positions)
        trials = accepted + rejections
        if trials == 0:
            continue
        drafts = by_key[("spec_accept", lay, task, 0)].reps
        per_position = []  # P(i-th accepted | first i-1 accepted), conditional as the schema defines it
        before = drafts
        for p in positions:
            before = min(before, p.reps)  # rounds cut short near max_new_tokens proposed fewer
            per_position.append(p.median_ms / before if before else 0.0)
            before = int(p.median_ms)
        acceptance[name] = TaskAcceptance(
            accepted / trials, k, tuple(per_position), "measured",
            f"{drafts} draft rounds at K={k}, greedy, batch 1; a = accepted / (accepted + rejections) "
            f"({accepted} / {trials}), real_engine.spec_metrics' per-token acceptance")
    if not c_values:
        return None, acceptance
    tasks = len(c_values)
    spec = Speculative(
        draft_name, k,
        Coefficient(statistics.median(c_values), "target steps", "measured",
                    f"median over {tasks} tasks of (median draft pass / median plain target step), batch 1"),
        Coefficient(statistics.median(v_values), "target steps", "measured",
                    f"median over {tasks} tasks of (median verify pass over K+1 tokens / median plain target "
                    "step), batch 1"),
        note="Measured by the calibration's speculative sweep (calibrate/sweep_speculative.py): SpeculativeEngine "
             "with a draft-model proposer at fixed K, wall-clock pass times.")
    return spec, acceptance
