"""Prefix structure of a workload: which leading blocks of each prompt other requests share.

A request's prompt is cut into full blocks of ``block_tokens``; each block gets a key, and the chain of keys
(tripath/core/prefix.py ``chain_hashes``) is the block's identity, so two prompts share a cached block only
when they share every block before it too. Where the keys come from, the ``[workload.prefix]`` table's kind:

- ``trace``: the Mooncake trace's ``hash_ids`` (one id per 512-token block of the prompt), replayed row for
  row; a block size dividing 512 splits each id into 512 / block_tokens sub-blocks. With trace arrivals and
  no table this is the default; a trace without block ids (Azure) runs without reuse, and says so.
- ``shared``: a chat generator. ``system_prompts`` x ``users_per_prompt`` conversations run side by side,
  request i taking turn (i // C) of conversation slot i % C (C conversations; after ``turns`` turns a slot
  starts a fresh conversation). A turn's prompt is its system prompt (``system_tokens``), the conversation so
  far (every earlier question and answer) and its question; its output is the answer. Question and answer
  lengths are the workload's prompt_tokens and output_tokens draws, so those specs keep their meaning.
- ``share``: a per-task prefix share for synthetic workloads. The leading ``share.<task>`` fraction of each
  of that task's prompts is one of ``prefixes`` task-wide prefixes (drawn uniformly per request); the rest
  is the request's own.
- ``cycle``: a benchmark client cycling a fixed list of ``prompts`` = N distinct prompts (inference-perf's
  load generator): request i sends prompt i mod N, so its blocks are keyed by i mod N and its length is request
  (i mod N)'s draw (the first N draws define the N prompts), and a repeat hits the cache entirely. Optionally
  ``system_prompts`` = G groups with ``system_tokens`` = S (inference-perf's shared_prefix): prompt p starts
  with its group's (p mod G) S-token system prompt, followed by its drawn length of its own tokens.

Blocks past the shared part are keyed by the request (or conversation) alone, so they hit only where the same
conversation comes back. The engine replays the same requests: the shared generator's prompt lengths are
applied in tripath/simulator/scenario/workload.py's ``generate_arrays`` (and the cycle kind's, by
``cycle_prompt_lengths``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tripath.core.errors import InputError
from tripath.simulator.scenario.checks import at_least, check_kind, fail, only_for

PREFIX_KINDS = ("trace", "shared", "share", "cycle")
MOONCAKE_BLOCK_TOKENS = 512  # the Mooncake trace's hash_ids are one id per 512-token block
_TAG_TRACE, _TAG_SYSTEM, _TAG_CONVERSATION, _TAG_TASK, _TAG_OWN, _TAG_CYCLE = 1, 2, 3, 4, 5, 6
_FIELDS: dict[str, tuple[type, ...]] = {"kind": (str,), "system_prompts": (int,), "system_tokens": (int,),
                                        "users_per_prompt": (int,), "turns": (int,), "share": (dict,),
                                        "prefixes": (int,), "prompts": (int,)}


@dataclass(frozen=True)
class PrefixWorkloadSpec:
    kind: str  # "trace" | "shared" | "share" | "cycle"
    system_prompts: int | None = None  # shared, cycle (optional): distinct system prompts
    system_tokens: int | None = None  # shared, cycle (optional): tokens of each system prompt
    users_per_prompt: int | None = None  # shared: conversations per system prompt at a time
    turns: int | None = None  # shared: turns per conversation
    share: tuple[tuple[str, float], ...] = ()  # share: (task, leading fraction of its prompts shared)
    prefixes: int = 1  # share: distinct shared prefixes per task
    prompts: int | None = None  # cycle: distinct prompts the client cycles through

    def __post_init__(self) -> None:
        check_kind(self.kind, PREFIX_KINDS)
        shared = ("shared",)
        only_for(self, {"system_prompts": (*shared, "cycle"), "system_tokens": (*shared, "cycle"),
                        "users_per_prompt": shared, "turns": shared, "prompts": ("cycle",)})
        if self.kind == "cycle":
            if self.prompts is None:
                fail("prompts", "required for kind = 'cycle' (the number of distinct prompts cycled)")
            at_least("prompts", self.prompts, 1)
            if (self.system_prompts is None) != (self.system_tokens is None):
                fail("system_prompts" if self.system_prompts is None else "system_tokens",
                     "give both system_prompts and system_tokens (shared-prefix groups), or neither")
            at_least("system_prompts", self.system_prompts, 1)
            at_least("system_tokens", self.system_tokens, 0)
        if self.kind == "shared":
            for name in ("system_prompts", "system_tokens", "users_per_prompt", "turns"):
                if getattr(self, name) is None:
                    fail(name, "required for kind = 'shared'")
            at_least("system_prompts", self.system_prompts, 1)
            at_least("system_tokens", self.system_tokens, 0)
            at_least("users_per_prompt", self.users_per_prompt, 1)
            at_least("turns", self.turns, 1)
        if self.kind != "share" and (self.share or self.prefixes != 1):
            fail("share", f"only valid for kind = 'share', not {self.kind!r}")
        if self.kind == "share" and not self.share:
            fail("share", "give each task's shared fraction, e.g. share = {dialogue = 0.3}")
        for task, fraction in self.share:
            if not (math.isfinite(fraction) and 0.0 <= fraction <= 1.0):
                fail(f"share.{task}", f"must be a number in [0, 1], got {fraction}")
        at_least("prefixes", self.prefixes, 1)

    @property
    def conversations(self) -> int:
        """Conversations side by side (shared)."""
        assert self.system_prompts is not None and self.users_per_prompt is not None
        return self.system_prompts * self.users_per_prompt


def prefix_workload_from_dict(raw: object, source: str | None, tasks: tuple[str, ...]) -> PrefixWorkloadSpec:
    """The ``[workload.prefix]`` table; an error names the field under ``workload.prefix``."""
    where = "workload.prefix"
    if not isinstance(raw, dict):
        raise InputError(source, where, f"must be a table, got {type(raw).__name__}")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        kinds = _FIELDS.get(key)
        if kinds is None:
            raise InputError(source, f"{where}.{key}", f"unknown field; valid: {', '.join(_FIELDS)}")
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise InputError(source, f"{where}.{key}", f"must be {' or '.join(k.__name__ for k in kinds)}, "
                                                       f"got {type(value).__name__} {value!r}")
        kwargs[key] = value
    if "kind" not in kwargs:
        raise InputError(source, f"{where}.kind", f"required: one of {', '.join(PREFIX_KINDS)}")
    share = kwargs.pop("share", {})
    pairs = []
    for task, fraction in share.items():
        if task not in tasks:
            raise InputError(source, f"{where}.share.{task}", f"unknown task {task!r}; the workload's tasks: "
                                                              f"{', '.join(tasks)}")
        if not isinstance(fraction, int | float) or isinstance(fraction, bool):
            raise InputError(source, f"{where}.share.{task}", f"must be a number in [0, 1], got {fraction!r}")
        pairs.append((task, float(fraction)))
    try:
        return PrefixWorkloadSpec(share=tuple(pairs), **kwargs)
    except InputError as exc:
        raise InputError(source, f"{where}.{exc.field}", exc.problem) from None


def shared_prompt_lengths(spec: PrefixWorkloadSpec, questions: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Each request's prompt under the chat generator: system prompt + the conversation so far + its question."""
    assert spec.turns is not None and spec.system_tokens is not None
    slots = spec.conversations
    history = np.zeros(slots, dtype=np.int64)
    prompts = np.empty(questions.shape[0], dtype=np.int64)
    for i in range(questions.shape[0]):
        slot, turn = i % slots, (i // slots) % spec.turns
        if turn == 0:
            history[slot] = 0
        prompts[i] = spec.system_tokens + history[slot] + questions[i]
        history[slot] += questions[i] + answers[i]
    return prompts


def cycle_prompt_lengths(spec: PrefixWorkloadSpec, drawn: np.ndarray) -> np.ndarray:
    """Each request's prompt under the cycle kind: prompt i mod N's length, the (i mod N)-th draw (plus its
    group's system prompt when there are groups), so a repeat is the same prompt token for token."""
    assert spec.prompts is not None
    own = drawn[np.arange(drawn.shape[0]) % spec.prompts]
    return own + (spec.system_tokens or 0)


@dataclass(frozen=True)
class RequestPrefixes:
    """Per request, the keys of its prompt's full blocks (chain them for identities), and what they stand on."""

    block_tokens: int
    keys: tuple[tuple[bytes, ...], ...]
    source: str  # one line: where the block keys come from
    note: str | None = None  # set when the workload has no prefix structure: it runs without reuse

    @property
    def reusable(self) -> bool:
        return self.note is None

    @classmethod
    def from_tokens(cls, prompts: Sequence[Sequence[int]], block_tokens: int, source: str = "prompt token ids"
                    ) -> RequestPrefixes:
        """Keys from each prompt's token ids, as the engine keys its blocks (tripath/core/prefix.py
        token_block_hashes: a full block's int64 little-endian bytes), so the simulator's chained hashes equal the
        engine's on the same prompts."""
        keys = []
        for tokens in prompts:
            full = len(tokens) // block_tokens
            rows = np.asarray(tokens[: full * block_tokens], dtype="<i8").reshape(full, block_tokens)
            keys.append(tuple(row.tobytes() for row in rows))
        return cls(block_tokens, tuple(keys), source)


def request_prefixes(spec: PrefixWorkloadSpec | None, prompts: np.ndarray, picks: np.ndarray, task_names: list[str],
                     trace_ids: tuple[np.ndarray, ...] | None, trace_name: str | None, block_tokens: int,
                     rng: np.random.Generator) -> RequestPrefixes:
    """The block keys of every request (request order). ``trace_ids``: the replayed rows' hash_ids, or None
    where the arrivals are no trace or a trace without them; ``rng`` draws the share kind's prefix variants."""
    n = int(prompts.shape[0])
    full = [int(p) // block_tokens for p in prompts]
    kind = spec.kind if spec is not None else ("trace" if trace_ids is not None else None)
    if kind is None:
        none = tuple(() for _ in range(n))
        what = f"trace {trace_name!r} carries no prefix block ids" if trace_name else "no [workload.prefix] table"
        return RequestPrefixes(block_tokens, none, "none",
                               f"workload has no prefix structure ({what}): it runs without reuse")
    if kind == "trace":
        if trace_ids is None:
            what = f"trace {trace_name!r} carries no hash_ids" if trace_name else "the arrivals are not a trace"
            raise InputError(None, "workload.prefix.kind", f"'trace' needs a trace with hash_ids (Mooncake): {what}")
        if MOONCAKE_BLOCK_TOKENS % block_tokens:
            raise InputError(None, "strategy.prefix_cache.block_tokens",
                             f"must divide the trace's {MOONCAKE_BLOCK_TOKENS}-token hash_ids blocks, "
                             f"got {block_tokens}")
        split = MOONCAKE_BLOCK_TOKENS // block_tokens
        keys = tuple(tuple(struct.pack("<3q", _TAG_TRACE, int(ids[j // split]), j % split)
                           for j in range(min(full[i], ids.shape[0] * split)))
                     for i, ids in enumerate(trace_ids))
        return RequestPrefixes(block_tokens, keys, f"trace {trace_name!r} hash_ids ({MOONCAKE_BLOCK_TOKENS}-token "
                                                   f"blocks, {split} sub-block(s) each)")
    assert spec is not None
    if kind == "shared":
        return RequestPrefixes(block_tokens, _shared_keys(spec, full, block_tokens),
                               f"shared-prefix generator: {spec.system_prompts} system prompts of "
                               f"{spec.system_tokens} tokens x {spec.users_per_prompt} users x {spec.turns} turns")
    if kind == "cycle":
        assert spec.prompts is not None
        groups = "" if spec.system_prompts is None else (f", {spec.system_prompts} shared system prompt(s) of "
                                                           f"{spec.system_tokens} tokens")
        return RequestPrefixes(block_tokens, _cycle_keys(spec, full, block_tokens),
                               f"prompt cycle: request i sends prompt i mod {spec.prompts}{groups}")
    fractions = dict(spec.share)
    variants = rng.integers(0, spec.prefixes, size=n)
    keys_list = []
    for i in range(n):
        task = task_names[int(picks[i])]
        shared_blocks = int(fractions.get(task, 0.0) * int(prompts[i])) // block_tokens
        keys_list.append(tuple(struct.pack("<4q", _TAG_TASK, int(picks[i]), int(variants[i]), j)
                               if j < shared_blocks else struct.pack("<3q", _TAG_OWN, i, j)
                               for j in range(full[i])))
    share = ", ".join(f"{task} {fraction:g}" for task, fraction in spec.share)
    return RequestPrefixes(block_tokens, tuple(keys_list),
                           f"per-task prefix share ({share}; {spec.prefixes} prefix(es) per task)")


def _shared_keys(spec: PrefixWorkloadSpec, full: list[int], block_tokens: int) -> tuple[tuple[bytes, ...], ...]:
    assert spec.turns is not None and spec.system_tokens is not None and spec.users_per_prompt is not None
    slots = spec.conversations
    system_blocks = spec.system_tokens // block_tokens  # blocks wholly inside the system prompt
    out = []
    for i, blocks in enumerate(full):
        slot, rounds = i % slots, i // slots
        conversation = (rounds // spec.turns) * slots + slot
        prompt_id = slot // spec.users_per_prompt
        out.append(tuple(struct.pack("<3q", _TAG_SYSTEM, prompt_id, j) if j < system_blocks
                         else struct.pack("<3q", _TAG_CONVERSATION, conversation, j) for j in range(blocks)))
    return tuple(out)


def _cycle_keys(spec: PrefixWorkloadSpec, full: list[int], block_tokens: int) -> tuple[tuple[bytes, ...], ...]:
    """Block keys of the cycle kind: prompt p = i mod N's own blocks, after its group's system-prompt blocks."""
    assert spec.prompts is not None
    system_blocks = (spec.system_tokens or 0) // block_tokens  # blocks wholly inside the system prompt
    out = []
    for i, blocks in enumerate(full):
        prompt = i % spec.prompts
        group = prompt % spec.system_prompts if spec.system_prompts else 0
        out.append(tuple(struct.pack("<3q", _TAG_SYSTEM, group, j) if j < system_blocks
                         else struct.pack("<3q", _TAG_CYCLE, prompt, j) for j in range(blocks)))
    return tuple(out)
