"""The multi-task corpus of the tiny draft/target pair, built on this machine with no download.

Four tasks, deterministic from a seed:
- code: real Python source from the running interpreter's standard library, in line-aligned chunks;
- dialogue, math, summarization: templated text (tripath/training/corpus_tasks.py).

Held-out evaluation text never appears in training, by construction:
- code: a file is held out when a hash of its relative path says so (whole files, not chunks);
- math: a problem is held out when a hash of its question says so; training skips those;
- dialogue and summarization: held-out samples use a disjoint set of (made-up) entity names.
Training and evaluation also use different seed streams.
"""

from __future__ import annotations

import json
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tripath.core.atomic import AtomicFile
from tripath.core.errors import InputError, check_regular_file
from tripath.training.corpus_tasks import (
    Sample,
    dialogue_sample,
    entity_split,
    is_heldout_key,
    math_sample,
    summarization_sample,
)

TASKS = ("code", "dialogue", "math", "summarization")
# Directories whose sources are test data or vendored packages rather than ordinary library code.
_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "lib2to3", "turtledemo"}


@dataclass(frozen=True)
class CorpusConfig:
    """How much text to build per task and how to cut it."""

    seed: int = 0
    train_bytes_per_task: int = 1_500_000
    heldout_samples_per_task: int = 48
    code_chunk_bytes: int = 1024
    code_prompt_fraction: float = 0.6
    code_max_file_bytes: int = 200_000
    stdlib_dir: str = field(default_factory=lambda: sysconfig.get_paths()["stdlib"])

    def __post_init__(self) -> None:
        if self.train_bytes_per_task < 1_000:
            raise ValueError(f"train_bytes_per_task: must be >= 1000, got {self.train_bytes_per_task}")
        if self.heldout_samples_per_task < 1:
            raise ValueError(f"heldout_samples_per_task: must be >= 1, got {self.heldout_samples_per_task}")
        if self.code_chunk_bytes < 128:
            raise ValueError(f"code_chunk_bytes: must be >= 128, got {self.code_chunk_bytes}")
        if not 0.0 < self.code_prompt_fraction < 1.0:
            raise ValueError(f"code_prompt_fraction: must be in (0, 1), got {self.code_prompt_fraction}")
        if not Path(self.stdlib_dir).is_dir():
            raise ValueError(f"stdlib_dir: not a directory: {self.stdlib_dir}")


@dataclass(frozen=True)
class Corpus:
    """Training documents and held-out samples per task."""

    config: CorpusConfig
    train: dict[str, tuple[str, ...]]
    heldout: dict[str, tuple[Sample, ...]]

    def train_bytes(self, task: str) -> int:
        return sum(len(doc.encode("utf-8")) for doc in self.train[task])


def stdlib_sources(stdlib_dir: str, max_file_bytes: int) -> list[tuple[str, str]]:
    """(relative path, text) of the plain .py library files, sorted by path."""
    root = Path(stdlib_dir)
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if (
            _SKIP_DIRS.intersection(rel.parts[:-1])
            or not path.is_file()
            or path.stat().st_size > max_file_bytes
        ):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            out.append((rel.as_posix(), text))
    return out


def code_chunks(text: str, chunk_bytes: int) -> list[str]:
    """Line-aligned chunks of at most ~chunk_bytes (a single longer line is cut)."""
    chunks, current, size = [], [], 0
    for line in text.splitlines(keepends=True):
        line = line[:chunk_bytes]  # a pathological long line (data tables) is truncated, not split
        if size + len(line) > chunk_bytes and current:
            chunks.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        chunks.append("".join(current))
    return [c for c in chunks if c.strip()]


def _code_split(config: CorpusConfig, rng: np.random.Generator, heldout: bool, budget: int) -> list[str]:
    files = [
        (rel, text)
        for rel, text in stdlib_sources(config.stdlib_dir, config.code_max_file_bytes)
        if is_heldout_key(rel, modulus=10) == heldout
    ]
    chunks: list[str] = []
    total = 0
    for index in rng.permutation(len(files)):
        for chunk in code_chunks(files[int(index)][1], config.code_chunk_bytes):
            chunks.append(chunk)
            total += len(chunk)
        if total >= budget:
            break
    return chunks


def _code_sample(chunk: str, prompt_fraction: float) -> Sample:
    lines = chunk.splitlines(keepends=True)
    cut = max(1, int(len(lines) * prompt_fraction)) if len(lines) > 1 else 1
    if len(lines) == 1:  # a single long line: split inside it
        mid = int(len(chunk) * prompt_fraction)
        return Sample("code", chunk[:mid], chunk[mid:])
    return Sample("code", "".join(lines[:cut]), "".join(lines[cut:]))


def _templated(task: str, rng: np.random.Generator, heldout: bool) -> Callable[[], Sample]:
    ents = entity_split(heldout)
    if task == "dialogue":
        return lambda: dialogue_sample(rng, ents)
    if task == "summarization":
        return lambda: summarization_sample(rng, ents)

    def math() -> Sample:
        # Draw until the question falls on the wanted side of the hash split.
        while True:
            sample = math_sample(rng)
            if is_heldout_key(sample.prompt) == heldout:
                return sample

    return math


def build_corpus(config: CorpusConfig) -> Corpus:
    """Builds the training documents and held-out samples; the same config gives the same corpus."""
    train: dict[str, tuple[str, ...]] = {}
    heldout: dict[str, tuple[Sample, ...]] = {}
    for task_index, task in enumerate(TASKS):
        train_rng = np.random.default_rng([config.seed, task_index, 0])
        eval_rng = np.random.default_rng([config.seed, task_index, 1])
        if task == "code":
            train[task] = tuple(_code_split(config, train_rng, False, config.train_bytes_per_task))
            chunks = [
                c
                for c in _code_split(config, eval_rng, True, 64 * config.code_chunk_bytes * 4)
                if len(c) >= config.code_chunk_bytes // 2
            ]
            heldout[task] = tuple(
                _code_sample(c, config.code_prompt_fraction)
                for c in chunks[: config.heldout_samples_per_task]
            )
            continue
        draw_train, draw_eval = _templated(task, train_rng, False), _templated(task, eval_rng, True)
        docs, total = [], 0
        while total < config.train_bytes_per_task:
            docs.append(draw_train().text)
            total += len(docs[-1])
        train[task] = tuple(docs)
        heldout[task] = tuple(draw_eval() for _ in range(config.heldout_samples_per_task))
    return Corpus(config, train, heldout)


def write_eval_prompts(samples: list[Sample], path: Path) -> None:
    """One JSON object per line with task, prompt, reference; written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with AtomicFile(path) as f:
        for s in samples:
            f.write(json.dumps({"task": s.task, "prompt": s.prompt, "reference": s.reference}) + "\n")


def load_eval_prompts(path: Path) -> list[Sample]:
    """Reads eval_prompts.jsonl; a malformed line is an InputError naming the line."""
    samples = []
    check_regular_file(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(str(path), f"line {number}", f"not JSON: {exc}") from exc
        for key in ("task", "prompt", "reference"):
            if not isinstance(row.get(key) if isinstance(row, dict) else None, str):
                raise InputError(str(path), f"line {number}.{key}", "missing or not a string")
        if row["task"] not in TASKS:
            raise InputError(
                str(path), f"line {number}.task", f"unknown task {row['task']!r}; known: {TASKS}"
            )
        samples.append(Sample(row["task"], row["prompt"], row["reference"]))
    return samples
