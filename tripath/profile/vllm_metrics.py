"""Draft acceptance from a vLLM Prometheus metrics dump: a profile acceptance entry for one task.

vLLM's v1 engine counts speculative decoding in four counters (vllm/v1/spec_decode/metrics.py
``SpecDecodingProm``): ``vllm:spec_decode_num_drafts`` (rounds), ``..._num_draft_tokens`` (tokens proposed),
``..._num_accepted_tokens`` and ``..._num_accepted_tokens_per_pos{position="j"}`` (rounds whose draft token j,
0-based, was accepted: every token before it was too). The text exposition format appends ``_total`` to a
counter's samples; both spellings are read. Series of the same counter (engines, other labels) are summed.

From those: P(token j accepted | tokens before it accepted) = per_pos[j] / per_pos[j - 1], position 0 over the
rounds; the mean a is accepted / (accepted + rejections), a rejection being a round that did not accept all K of
its drafts (rounds - per_pos[K - 1]), the per-token acceptance the engine's own metrics report
(tripath/engine/speculative/metrics.py). A dump without the per-position counter gives the a with E(K, a) =
1 + accepted / rounds, K = draft tokens / rounds. A malformed dump is an InputError naming the file and line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tripath.core.errors import InputError, read_input_text, shown
from tripath.core.limits import MAX_INT
from tripath.core.speculative import acceptance_for_tokens
from tripath.profile.profile import Profile
from tripath.profile.speculative import TaskAcceptance

PREFIX = "vllm:spec_decode_"
DRAFTS = PREFIX + "num_drafts"
DRAFT_TOKENS = PREFIX + "num_draft_tokens"
ACCEPTED = PREFIX + "num_accepted_tokens"
PER_POS = PREFIX + "num_accepted_tokens_per_pos"
COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")  # a TOML bare key; other task names are quoted
_POSITION = re.compile(r"[0-9]{1,9}")  # ASCII digits: str.isdigit also takes "²", which int() refuses
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_SAMPLE = re.compile(r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)"
                     r"(?:\s+(?P<timestamp>-?\d+))?\s*$")


@dataclass(frozen=True)
class Counter:
    """One counter's value summed over its series, and the first line it was read from (for messages)."""

    value: float
    line: int


@dataclass(frozen=True)
class SpecCounters:
    """The speculative-decoding counters of one dump (one model's series)."""

    source: str
    drafts: Counter
    draft_tokens: Counter
    accepted: Counter
    per_pos: tuple[Counter, ...]  # position 0..K-1; empty when the dump has no per-position counter
    model_name: str | None

    def fail(self, counter: Counter, problem: str) -> None:
        raise InputError(self.source, f"line {counter.line}", problem)


def _counter_name(name: str) -> str | None:
    base = name.removesuffix("_total")
    return base if base in COUNTERS else None


def _labels(text: str, source: str, line: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    text = text.strip()
    pos = 0
    while pos < len(text):
        match = _LABEL.match(text, pos)
        if match is None:
            raise InputError(source, f"line {line}", f"malformed labels {{{text}}}")
        labels[match.group(1)] = match.group(2)
        pos = match.end()
    return labels


def _samples(text: str, source: str) -> list[tuple[int, str, dict[str, str], float]]:
    """(line number, counter name without _total, labels, value) for every sample of the four counters."""
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name = _NAME.match(line)
        if name is None:
            raise InputError(source, f"line {number}", f"not a metric sample: {line[:80]!r}")
        counter = _counter_name(name.group(0))
        if counter is None:
            continue  # another metric (vLLM's _created samples too): not ours to judge
        sample = _SAMPLE.match(line)
        if sample is None:
            raise InputError(source, f"line {number}", f"{name.group(0)}: expected 'NAME{{LABELS}} VALUE', "
                                                       f"got {line[:80]!r} (missing value?)")
        try:
            value = float(sample.group("value"))
        except ValueError:
            raise InputError(source, f"line {number}", f"{counter}: value {sample.group('value')!r} is not a "
                                                       "number") from None
        if not (value.is_integer() and 0 <= value <= MAX_INT):  # NaN and infinities are not integers
            raise InputError(source, f"line {number}", f"{counter}: a count must be a whole number in 0..2^53 "
                                                       f"(exact in a float), got {shown(sample.group('value'))}")
        out.append((number, counter, _labels(sample.group("labels") or "", source, number), value))
    return out


def _add(total: float, value: float, source: str, line: int, counter: str) -> float:
    """A counter's running sum over its series; past 2^53 a float no longer counts exactly, so it is refused."""
    total += value
    if total > MAX_INT:
        raise InputError(source, f"line {line}", f"{counter}: the sum over its series passes 2^53 (a count is "
                                                 "exact in a float only up to there)")
    return total


def parse_counters(text: str, source: str, model: str | None = None) -> SpecCounters:
    """The four counters of a metrics dump, summed over series; ``model`` keeps that ``model_name`` only (needed
    when the dump holds several)."""
    samples = _samples(text, source)
    models = sorted({labels["model_name"] for _, _, labels, _ in samples if "model_name" in labels})
    if model is not None:
        if model not in models:
            raise InputError(source, "model_name", f"no speculative-decoding series for model {model!r}; the "
                                                   f"dump has: {', '.join(models) or 'none'}")
        samples = [s for s in samples if s[2].get("model_name") == model]
    elif len(models) > 1:
        raise InputError(source, "model_name", f"the dump holds several models ({', '.join(models)}): choose one "
                                               "with --model")
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    sums: dict[str, list[float]] = {}
    first: dict[str, int] = {}
    positions: dict[int, list[float]] = {}
    for number, counter, labels, value in samples:
        series = (counter, tuple(sorted(labels.items())))
        if series in seen:
            raise InputError(source, f"line {number}", f"{counter} repeats the series of line {seen[series]}")
        seen[series] = number
        key = counter
        if counter == PER_POS:
            pos = labels.get("position", "")
            if not _POSITION.fullmatch(pos):
                raise InputError(source, f"line {number}", f'{PER_POS} needs a position="N" label (N a whole '
                                                           f'number, at most 9 digits), got {shown(pos)}')
            entry = positions.setdefault(int(pos), [0.0, number])
            entry[0] = _add(entry[0], value, source, number, counter)
            continue
        total = sums.setdefault(key, [0.0])
        total[0] = _add(total[0], value, source, number, counter)
        first.setdefault(key, number)
    for counter in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
        if counter not in sums:
            raise InputError(source, counter, "counter not in the dump (is speculative decoding on, and is this "
                                              "vLLM's /metrics text?)")
    if positions and sorted(positions) != list(range(len(positions))):
        have = ", ".join(str(p) for p in sorted(positions))
        raise InputError(source, PER_POS, f"positions must be 0..K-1 without gaps, got {have}")
    per_pos = tuple(Counter(positions[p][0], int(positions[p][1])) for p in sorted(positions))
    counters = SpecCounters(source, *(Counter(sums[c][0], first[c]) for c in (DRAFTS, DRAFT_TOKENS, ACCEPTED)),
                            per_pos, model if model is not None else (models[0] if models else None))
    _check(counters)
    return counters


def _check(c: SpecCounters) -> None:
    if c.drafts.value == 0:
        c.fail(c.drafts, f"{DRAFTS} is 0: no speculative round ran")
    if c.accepted.value > c.draft_tokens.value:
        c.fail(c.accepted, f"{ACCEPTED} ({c.accepted.value:g}) exceeds {DRAFT_TOKENS} ({c.draft_tokens.value:g}): "
                           "more tokens accepted than drafted")
    before = c.drafts
    for j, counter in enumerate(c.per_pos):
        if counter.value > before.value:
            c.fail(counter, f"{PER_POS} position {j} ({counter.value:g}) exceeds "
                            f"{'the rounds' if j == 0 else f'position {j - 1}'} ({before.value:g}): a draft token is "
                            "accepted only after every token before it")
        before = counter
    if c.per_pos:
        k = len(c.per_pos)
        if c.draft_tokens.value > k * c.drafts.value:
            c.fail(c.draft_tokens, f"{DRAFT_TOKENS} ({c.draft_tokens.value:g}) exceeds K = {k} positions x "
                                   f"{c.drafts.value:g} rounds")
        total = sum(p.value for p in c.per_pos)
        if not math.isclose(total, c.accepted.value, rel_tol=1e-9, abs_tol=0.5):
            c.fail(c.accepted, f"{ACCEPTED} ({c.accepted.value:g}) differs from the sum over positions of "
                               f"{PER_POS} ({total:g}): counters from different scrapes?")


def per_position(c: SpecCounters) -> tuple[float, ...]:
    """P(draft token j accepted | tokens before it accepted), j = 0..K-1 (0 after a position nobody reached)."""
    out, before = [], c.drafts.value
    for counter in c.per_pos:
        out.append(counter.value / before if before else 0.0)
        before = counter.value
    return tuple(out)


def acceptance(c: SpecCounters, task: str) -> TaskAcceptance:
    """The task's acceptance entry (source "measured": the user's deployment counted it)."""
    drafts, accepted = c.drafts.value, c.accepted.value
    where = f"vLLM counters in {c.source}" + (f" (model_name {c.model_name!r})" if c.model_name else "")
    counts = f"{drafts:g} rounds, {c.draft_tokens.value:g} draft tokens, {accepted:g} accepted"
    if c.per_pos:
        k = len(c.per_pos)
        rejections = drafts - c.per_pos[-1].value
        a = accepted / (accepted + rejections) if accepted + rejections else 1.0
        note = (f"{where}: {counts}; a = accepted / (accepted + rounds short of K = {k}) = {accepted:g} / "
                f"{accepted + rejections:g}; per_position from {PER_POS}; task {task!r} given on import")
        if c.draft_tokens.value < k * drafts:
            note += "; some rounds proposed fewer than K tokens (each counted as K long)"
        return TaskAcceptance(a, k, per_position(c), "measured", note)
    k, left = divmod(int(c.draft_tokens.value), int(drafts))  # whole numbers up to 2^53: exact
    if k < 1 or left:
        c.fail(c.draft_tokens, f"{DRAFT_TOKENS} / {DRAFTS} = {c.draft_tokens.value / drafts:.4g} is not a whole K "
                               f"and the dump has no {PER_POS} counter to read K from")
    tokens = 1.0 + accepted / drafts
    a = acceptance_for_tokens(k, tokens)
    note = (f"{where}: {counts}; no {PER_POS} counter: a with E(K = {k}, a) = 1 + accepted / rounds = "
            f"{tokens:.6g}; task {task!r} given on import")
    return TaskAcceptance(a, k, None, "measured", note)


def read_acceptance(path: str | Path, task: str, model: str | None = None) -> tuple[TaskAcceptance, SpecCounters]:
    """The task's acceptance entry from the metrics dump at ``path`` and the counters it came from."""
    source = str(path)
    text = read_input_text(path, "metrics dump not found", "cannot read the metrics dump")
    if not task:
        raise InputError(source, "task", "must be a non-empty task name")
    counters = parse_counters(text, source, model)
    return acceptance(counters, task), counters


def overlay(entries: dict[str, TaskAcceptance]) -> dict[str, Any]:
    """A profile overlay: the JSON acceptance section ``merge_overlay`` puts into a profile."""
    return {"acceptance": {task: entry.to_dict() for task, entry in entries.items()}}


def scenario_table(entries: dict[str, TaskAcceptance]) -> str:
    """The scenario TOML that plans on these means (tripath/simulator/scenario/strategy.py's acceptance table)."""
    inner = ", ".join(f"{task if _BARE_KEY.fullmatch(task) else json.dumps(task)} = "
                      f"{entry.mean:.6g}" for task, entry in entries.items())
    return f"[strategy.speculative]\nacceptance = {{{inner}}}"


def merge_overlay(profile: Profile, raw: object, source: str | None = None) -> Profile:
    """``profile`` with an overlay's acceptance entries in place of (or beside) its own."""
    if not isinstance(raw, dict) or set(raw) != {"acceptance"} or not isinstance(raw["acceptance"], dict):
        raise InputError(source, "(top level)", 'an overlay is {"acceptance": {TASK: entry, ...}}')
    entries = {task: TaskAcceptance.parse(entry, source, f"acceptance.{task}")
               for task, entry in raw["acceptance"].items()}
    return replace(profile, acceptance={**profile.acceptance, **entries})
