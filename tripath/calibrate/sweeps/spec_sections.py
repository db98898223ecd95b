"""The speculative sweep's samples-CSV names and the profile sections built from its rows.

tripath/calibrate/sweeps/speculative.py measures (its docstring gives the row layout); this turns the rows into the
profile's ``speculative`` section (c, v(K), the draft's prompt-pass ratio) and per-task ``acceptance``
entries (a, per-position, per K, and the between-prompt spread of tripath/calibrate/sweeps/prompt_spread.py).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from tripath.calibrate.samples import Sample
from tripath.calibrate.sweeps.prompt_spread import between_prompt_sd
from tripath.calibrate.sweeps.spec_batch import BATCH_SWEEPS, batch_medians, round_per_sequence
from tripath.profile.profile import Coefficient, Speculative, TaskAcceptance
from tripath.training.corpus import TASKS

TIMED_SWEEPS = ("spec_target", "spec_draft", "spec_verify")
PREFILL_SWEEPS = ("spec_prefill_target", "spec_prefill_draft", "spec_prefill_tokens")


def accept_sweep(k: int) -> str:
    """The samples-CSV sweep name of the acceptance counts at proposal length ``k``."""
    return f"spec_accept_k{k}"


def prompt_sweep(k: int) -> str:
    """The samples-CSV sweep name of the per-prompt acceptance counts at proposal length ``k``."""
    return f"spec_prompt_k{k}"


def is_spec_sweep(name: str) -> bool:
    return (name in TIMED_SWEEPS or name in PREFILL_SWEEPS or name in BATCH_SWEEPS
            or name.startswith(("spec_accept_k", "spec_prompt_k")))


def _round_per_sequence(rows: list[Sample], k: int) -> Coefficient | None:
    """w of tripath/calibrate/sweeps/spec_batch.py from its rows at K = k; None where the batch sweep did not run."""
    rounds, decodes = batch_medians(rows, k)
    w = round_per_sequence(rounds, decodes)
    if w is None:
        return None
    return Coefficient(w, "target steps", "measured",
                       f"extra batch-1 target decode steps per additional sequence in a round at K = {k}: least "
                       f"squares of round(B) - round(1) x decode(B) / decode(1) over B in {sorted(rounds)}, "
                       "median full rounds and plain decode steps of B sequences "
                       "(tripath/calibrate/sweeps/spec_batch.py)")


def _acceptance(by_key: dict[tuple[str, int, int, int], Sample], lay: int, task: int, k: int
                ) -> TaskAcceptance | None:
    """One task's acceptance at K from its count rows (None when not measured or no draft was judged)."""
    name = accept_sweep(k)
    if any((name, lay, task, i) not in by_key for i in range(k + 1)):
        return None
    positions = [by_key[(name, lay, task, i)] for i in range(1, k + 1)]
    rejections = int(by_key[(name, lay, task, 0)].median_ms)
    accepted = sum(int(p.median_ms) for p in positions)
    trials = accepted + rejections
    if trials == 0:
        return None
    drafts = by_key[(name, lay, task, 0)].reps
    per_position = []  # P(i-th accepted | first i-1 accepted), conditional as the schema defines it
    before = drafts
    for p in positions:
        before = min(before, p.reps)  # rounds cut short near max_new_tokens proposed fewer
        per_position.append(p.median_ms / before if before else 0.0)
        before = int(p.median_ms)
    note = (f"{drafts} draft rounds at K={k}, greedy, batch 1; a = accepted / (accepted + rejections) "
            f"({accepted} / {trials}), tripath.engine.speculative.metrics' per-token acceptance")
    counts, i = [], 0
    while (row := by_key.get((prompt_sweep(k), lay, task, i))) is not None:
        counts.append((int(row.median_ms), row.reps))
        i += 1
    spread = between_prompt_sd(counts)
    if spread is None:
        return TaskAcceptance(accepted / trials, k, tuple(per_position), "measured", note)
    note += (f"; between_prompt_sd: sd of the {spread[1]} prompts' own a less their sampling noise "
             "(tripath/calibrate/sweeps/prompt_spread.py)")
    return TaskAcceptance(accepted / trials, k, tuple(per_position), "measured", note,
                          between_prompt_sd=spread[0], n_prompts=spread[1])


def _prefill_ratio(by_key: dict[tuple[str, int, int, int], Sample], runs: list[tuple[int, int, int]]
                   ) -> Coefficient | None:
    """The draft's prompt pass / the target's (token-dependent work, same prompts, same run): median over the
    (task, K) runs where both are positive (short prompts leave little work above a decode step)."""
    ratios, tokens = [], []
    for lay, task, kk in runs:
        t, d = by_key.get(("spec_prefill_target", lay, task, kk)), by_key.get(("spec_prefill_draft", lay, task, kk))
        n = by_key.get(("spec_prefill_tokens", lay, task, kk))
        if t is not None and d is not None and t.median_ms > 0 and d.median_ms > 0:
            ratios.append(d.median_ms / t.median_ms)
            tokens += [] if n is None else [int(n.min_ms), int(n.max_ms)]
    if not ratios:
        return None
    where = f", prompts of {min(tokens)}-{max(tokens)} tokens" if tokens else ""
    return Coefficient(statistics.median(ratios), "target prompt passes", "measured",
                       f"median over {len(ratios)} (task, K) runs of (median draft prompt pass / median target "
                       f"prompt pass), each the plain engine's prefill step less its median decode step, batch 1"
                       f"{where}")


def _ratio(by_key: dict[tuple[str, int, int, int], Sample], sweep: str, lay: int, task: int, k: int) -> float | None:
    """A pass time over the plain target step timed in the same run (None when either is missing)."""
    num, unit = by_key.get((sweep, lay, task, k)), by_key.get(("spec_target", lay, task, k))
    return None if num is None or unit is None else num.median_ms / unit.median_ms


def speculative_sections(samples: list[Sample], draft_name: str, k: int
                         ) -> tuple[Speculative | None, dict[str, TaskAcceptance]]:
    """The profile's ``speculative`` and ``acceptance`` sections from the spec_* rows.

    The headline entries are at K = ``k``; when more than one K was measured, ``verify_by_k`` and each
    task's ``by_k`` hold every measured K (a single-K run writes neither).
    """
    rows = [s for s in samples if is_spec_sweep(s.sweep)]
    by_key = {s.key: s for s in rows}
    ks = sorted({s.x2 for s in rows if s.sweep == "spec_verify"})
    acceptance: dict[str, TaskAcceptance] = {}
    c_values: list[float] = []
    v_by_k: dict[int, list[float]] = {kk: [] for kk in ks}
    runs: list[tuple[int, int, int]] = []  # (layers, task, K) measured
    for task, name in enumerate(TASKS):
        layers = sorted({s.layers for s in rows if s.sweep == "spec_target" and s.x1 == task})
        if not layers:
            continue
        lay = layers[0]
        runs += [(lay, task, kk) for kk in ks]
        for kk in ks:
            c, v = _ratio(by_key, "spec_draft", lay, task, kk), _ratio(by_key, "spec_verify", lay, task, kk)
            if c is not None and v is not None:
                c_values.append(c)
                v_by_k[kk].append(v)
        by_k = {kk: a for kk in ks if (a := _acceptance(by_key, lay, task, kk)) is not None}
        if k in by_k:
            acceptance[name] = replace(by_k[k], by_k=by_k if len(by_k) > 1 else {})
    if not v_by_k.get(k):
        return None, acceptance
    tasks = len(v_by_k[k])
    verify_by_k = {kk: Coefficient(statistics.median(v), "target steps", "measured",
                                   f"median over {len(v)} tasks of (median verify pass over {kk + 1} tokens / "
                                   f"median plain target step in the same run), batch 1")
                   for kk, v in v_by_k.items() if v} if len(ks) > 1 else {}
    spec = Speculative(
        draft_name, k,
        Coefficient(statistics.median(c_values), "target steps", "measured",
                    f"median over {len(c_values)} (task, K) runs of (median draft pass / median plain target "
                    "step), batch 1"),
        Coefficient(statistics.median(v_by_k[k]), "target steps", "measured",
                    f"median over {tasks} tasks of (median verify pass over K+1 tokens / median plain target "
                    "step), batch 1"),
        note="Measured by the calibration's speculative sweep (tripath/calibrate/sweeps/speculative.py): "
             "SpeculativeEngine "
             f"with a draft-model proposer at fixed K in {{{', '.join(map(str, ks))}}}; pass times by the job's clock "
             "(thread clock: CPU time of whole steps; draft pass = the draft's plain decode step, verify = a full-K "
             "round less its draft passes).",
        verify_by_k=verify_by_k, draft_prefill_ratio=_prefill_ratio(by_key, runs),
        round_per_sequence=_round_per_sequence(rows, k))
    return spec, acceptance
