"""The calibration profile: the one contract between calibration and the simulator.

This module is the only reader and writer of profile JSON (schema version 1). calibrate writes
through ``save_profile``; the simulator and the app read through ``load_profile`` /
``resolve_profile``. Every structural or value problem is an ``InputError`` naming the file and
the dotted field, e.g. ``data/profiles/x.json: costs.decode.coefficients.d_ctx.value: must be a
finite number >= 0, got -1``. The sections are defined in ``schema.py`` (key, hardware, model,
memory, provenance), ``cost_model.py`` (named formulas with coefficients), ``sections.py`` and
``speculative.py`` (speculative, acceptance, paging, sequence parallel, compression); one codec
(``codec.py``) reads and writes all of them from their fields and type hints.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from tripath.core.atomic import write_text
from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError, check_regular_file, describe_os_error, read_input_text
from tripath.core.limits import MAX_NESTING_DEPTH, MAX_PROFILE_BYTES, check_depth
from tripath.profile import fields
from tripath.profile.codec import Section, json_field
from tripath.profile.cost_model import Coefficient, CostModel, FitQuality
from tripath.profile.schema import Hardware, MemoryBudget, ModelSpec, ProfileKey, Provenance
from tripath.profile.sections import (
    CompressionMode,
    PagingLink,
    SequenceParallel,
    Speculative,
    SpRow,
    TaskAcceptance,
)

__all__ = [
    "SCHEMA_VERSION", "PROFILE_SOURCES", "Coefficient", "CostModel", "FitQuality", "Hardware", "MemoryBudget",
    "ModelSpec", "ProfileKey", "Provenance", "Speculative", "TaskAcceptance", "PagingLink", "SpRow",
    "SequenceParallel", "CompressionMode", "Profile", "load_profile", "save_profile", "resolve_profile",
    "save_samples", "load_samples",
]

SCHEMA_VERSION = 1
PROFILE_SOURCES = ("measured", "fitted", "projected", "published", "seed")
# The inputs the simulator passes to the two required cost models, by keyword.
REQUIRED_COSTS = {"prefill": ("new_tokens", "context_tokens"), "decode": ("batch", "total_context")}
# Optional cost models and their inputs: when present the simulator prices them (tripath/simulator/costs.py);
# costs.step_overhead is a served step's host work outside the forward, once per iteration.
OPTIONAL_COSTS = {"step_overhead": ("sequences", "new_tokens")}
TOKENS_2K = 2048


def _unknown_version(version: object) -> str:
    return f"unknown version {version!r}; this tripath reads version {SCHEMA_VERSION}"


def _current_version(field: str, version: int) -> int:
    if version != SCHEMA_VERSION:
        raise InputError(None, field, _unknown_version(version))
    return version


@dataclass(frozen=True, kw_only=True)
class Profile(Section):
    """A calibration profile for one (hardware, model, engine settings) key. Costs are in ms.

    Fields in the order of the JSON file.
    """

    schema_version: int = json_field(_current_version, default=SCHEMA_VERSION, required=True)
    key: ProfileKey
    source: str = json_field(fields.text(allowed=PROFILE_SOURCES))
    hardware: Hardware
    model: ModelSpec
    memory: MemoryBudget
    costs: dict[str, CostModel]
    speculative: Speculative | None = None
    acceptance: dict[str, TaskAcceptance] = json_field(default_factory=dict)
    paging: dict[str, PagingLink] = json_field(default_factory=dict)
    sequence_parallel: dict[int, SequenceParallel] = json_field(default_factory=dict, key="a parallel degree")
    compression: dict[str, CompressionMode] = json_field(default_factory=dict)
    provenance: Provenance
    notes: tuple[str, ...] = json_field(fields.each(fields.text()), default=())

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, inputs in REQUIRED_COSTS.items():
            if name not in self.costs:
                raise InputError(None, f"costs.{name}", "missing required cost model")
            if self.costs[name].inputs != inputs:
                raise InputError(None, f"costs.{name}.inputs", f"must be {list(inputs)}, "
                                 f"got {list(self.costs[name].inputs)}")
        self._check_steps_take_time()
        if self.key.attention_dp > 1 and self.model.moe is None:
            raise InputError(None, "key.attention_dp", f"is {self.key.attention_dp}, but only a mixture-of-experts "
                             "model has MoE layers to run over the data-parallel ranks (model.moe is absent)")
        for name, inputs in OPTIONAL_COSTS.items():
            if name in self.costs and self.costs[name].inputs != inputs:
                raise InputError(None, f"costs.{name}.inputs", f"must be {list(inputs)}, "
                                 f"got {list(self.costs[name].inputs)}")
        for name, link in self.paging.items():
            stated = link.ms_per_2k_tokens
            computed = link.marginal_ms(TOKENS_2K * self.model.kv_bytes_per_token)
            if not math.isclose(stated, computed, rel_tol=1e-6, abs_tol=1e-9):
                raise InputError(None, f"paging.{name}.ms_per_2k_tokens",
                                 f"must equal the cost model's bandwidth term for 2048 tokens x "
                                 f"kv_bytes_per_token = {computed:.6g} ms, got {stated!r}")
        for degree, sp in self.sequence_parallel.items():
            if sp.degree != degree:
                raise InputError(None, f"sequence_parallel.{degree}",
                                 f"keyed by {degree} but has degree {sp.degree}")

    def _check_steps_take_time(self) -> None:
        """Every iteration must take time: a step costing 0 ms everywhere gives a run infinite throughput (and its
        clock never moves). The formulas grow with their inputs, so the smallest real steps, a one-token prefill
        and a one-sequence decode over one cached token, guard the whole range (as the simulator's
        tripath/simulator/costs.py IterationCost assumes)."""
        for name, ms in (("prefill", self.prefill_ms(1, 0)), ("decode", self.decode_ms(1, 1))):
            if not ms > 0:
                raise InputError(None, f"costs.{name}", f"a step of one token costs {ms:g} ms (every coefficient 0?): "
                                 "a step must take time, else a run has infinite throughput")

    def __hash__(self) -> int:
        # Fields hold dicts (unhashable); equal profiles have equal keys and sources, so this agrees with ==.
        return hash((self.key_str(), self.source))

    # --- what the simulator asks -------------------------------------------------------------
    @property
    def kv_capacity_bytes(self) -> int:
        """KV-cache budget of one replica (of one attention data-parallel rank: key.attention_dp), in bytes."""
        return self.memory.kv_capacity_bytes

    def prefill_ms(self, new_tokens: float, context_tokens: float) -> float:
        """One prefill chunk of ``new_tokens`` after ``context_tokens`` cached, alone in an iteration."""
        return self.costs["prefill"].evaluate(new_tokens=new_tokens, context_tokens=context_tokens)

    def decode_ms(self, batch: float, total_context: float) -> float:
        """One decode iteration of ``batch`` sequences holding ``total_context`` tokens in all."""
        return self.costs["decode"].evaluate(batch=batch, total_context=total_context)

    def paging_ms(self, link: str, nbytes: float, chunk_tokens: int | None = None) -> float:
        """One transfer of ``nbytes`` over ``link`` (a key of ``paging``); with ``chunk_tokens``, in pages of
        that many tokens, from the fit at that chunk size when the profile has one (``PagingLink.cost_for``)."""
        return self.paging[link].cost_for(chunk_tokens).evaluate(bytes=nbytes)

    def verify_cost_ratio(self, k: int) -> float:
        """v(K): a verify pass over ``k`` + 1 tokens in target decode steps (``Speculative.verify_at``:
        measured per K when the profile has ``verify_by_k``, else the single measured v at any K)."""
        if self.speculative is None:
            raise InputError(None, "speculative", "this profile has no speculative section (no draft measured)")
        return self.speculative.verify_at(k)

    def acceptance_for(self, task: str, k: int) -> TaskAcceptance:
        """Acceptance of ``task`` at proposal length ``k`` (``TaskAcceptance.at``: measured at K when the
        profile has ``by_k``, else the nearest measured K; a single-K profile gives its one entry)."""
        if task not in self.acceptance:
            raise InputError(None, f"acceptance.{task}", f"no acceptance measured for task {task!r}; this "
                             f"profile has {', '.join(sorted(self.acceptance)) or 'none'}")
        return self.acceptance[task].at(k)

    def key_str(self) -> str:
        """e.g. ``a100-80gb/llama-2-70b/fp16/tp1/seed``."""
        return str(self.key)

    # --- JSON --------------------------------------------------------------------------------
    def to_json(self) -> str:
        """The canonical text: a profile that round-trips gives identical bytes. Kept on the instance after the
        first call (a frozen profile's text never changes; a measured-table profile takes tens of ms to encode,
        and a recommendation passes each layout's profile to every job as this text)."""
        text = self.__dict__.get("_json_text")
        if text is None:
            text = json.dumps(self.to_dict(), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
            object.__setattr__(self, "_json_text", text)
        return text

    @classmethod
    def from_dict(cls, d: object, source: str | None = None) -> Profile:
        """Validate parsed JSON; ``source`` is the file path used in error messages. The schema version is
        read first, so a file of another version is refused as such whatever else it holds."""
        if isinstance(d, dict) and "schema_version" in d:
            version = d["schema_version"]
            if type(version) is not int or version != SCHEMA_VERSION:
                raise InputError(source, "schema_version", _unknown_version(version))
        return cls.parse(d, source, "")


@functools.lru_cache(maxsize=32)
def profile_from_json(text: str) -> Profile:
    """The profile of a job's canonical profile text (``to_json``), parsed once per process: a search passes the
    same text to each of its probes, and a measured-table profile takes tens of ms to validate. The profile is
    frozen, so every caller may share it."""
    return Profile.from_dict(json.loads(text))


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile file; any problem is an InputError naming the file and field."""
    where = str(path)
    text = read_input_text(path, "no such profile file", "cannot read profile", max_bytes=MAX_PROFILE_BYTES)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        problem = f"malformed JSON: {err.msg} (column {err.colno})"
        raise InputError(where, f"line {err.lineno}", problem) from None
    except RecursionError:
        raise InputError(where, None, f"malformed JSON: nested more than {MAX_NESTING_DEPTH} levels deep") from None
    except ValueError as err:  # an integer past Python's int-to-text digit limit
        raise InputError(where, None, f"malformed JSON: {err}") from None
    check_depth(raw, where)
    return Profile.from_dict(raw, source=where)


def save_profile(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write ``profile`` as canonical JSON, atomically."""
    text = profile.to_json()  # serialize first: a failure here must not touch the file system
    try:
        write_text(path, text)
    except OSError as err:
        raise InputError(str(path), None, "cannot write profile: "
                         + describe_os_error(err).removeprefix(f"{path}: ")) from None


def available_profiles() -> list[str]:
    """Names of the shipped profiles (``data/profiles/NAME.json``)."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


def resolve_profile(name_or_path: str | os.PathLike[str]) -> Profile:
    """A shipped profile by bare name (``seed-llama2-70b-a100``) or any profile by path."""
    text = str(name_or_path)
    if isinstance(name_or_path, os.PathLike) or "/" in text or os.sep in text or text.endswith(".json"):
        return load_profile(name_or_path)
    candidate = PROFILES_DIR / f"{text}.json"
    if not candidate.is_file():
        names = ", ".join(available_profiles()) or "(none)"
        raise InputError(None, "profile", f"unknown profile {text!r}; available: {names}")
    return load_profile(candidate)


def save_samples(path: str | os.PathLike[str], header: Sequence[str],
                 rows: Sequence[Sequence[object]]) -> None:
    """Write the raw samples a profile was fitted from as CSV beside it, atomically."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"sample row {row!r} has {len(row)} fields, header has {len(header)}")
        writer.writerow(row)
    write_text(path, buffer.getvalue())


def load_samples(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The samples CSV as rows of column -> text (callers convert the columns they use)."""
    check_regular_file(path)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle))
    except FileNotFoundError:
        raise InputError(str(path), None, "no such samples file") from None
