"""The calibration profile: the one contract between calibration and the simulator.

This module is the only reader and writer of profile JSON (schema version 1). calibrate writes
through ``save_profile``; the simulator and the app read through ``load_profile`` /
``resolve_profile``. Every structural or value problem is an ``InputError`` naming the file and
the dotted field, e.g. ``data/profiles/x.json: costs.decode.coefficients.d_ctx.value: must be a
finite number >= 0, got -1``. The sections are defined in ``schema.py`` (key, hardware,
model, memory, provenance), ``cost_model.py`` (named formulas with coefficients) and
``sections.py`` and ``speculative.py`` (speculative, acceptance, paging, sequence parallel, compression).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient, CostModel, FitQuality
from tripath.profile.fields import JsonObject, build, check_text
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
    "save_samples", "load_samples", "write_atomic",
]

SCHEMA_VERSION = 1
PROFILE_SOURCES = ("measured", "fitted", "projected", "published", "seed")
# The inputs the simulator passes to the two required cost models, by keyword.
REQUIRED_COSTS = {"prefill": ("new_tokens", "context_tokens"), "decode": ("batch", "total_context")}
# Optional cost models and their inputs: when present the simulator prices them (tripath/simulator/costs.py);
# costs.step_overhead is a served step's host work outside the forward, once per iteration.
OPTIONAL_COSTS = {"step_overhead": ("sequences", "new_tokens")}
TOKENS_2K = 2048


@dataclass(frozen=True)
class Profile:
    """A calibration profile for one (hardware, model, engine settings) key. Costs are in ms."""

    key: ProfileKey
    source: str
    hardware: Hardware
    model: ModelSpec
    memory: MemoryBudget
    costs: dict[str, CostModel]
    provenance: Provenance
    speculative: Speculative | None = None
    acceptance: dict[str, TaskAcceptance] = field(default_factory=dict)
    paging: dict[str, PagingLink] = field(default_factory=dict)
    sequence_parallel: dict[int, SequenceParallel] = field(default_factory=dict)
    compression: dict[str, CompressionMode] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise InputError(None, "schema_version", f"unknown version {self.schema_version!r}; "
                             f"this tripath reads version {SCHEMA_VERSION}")
        check_text("source", self.source, allowed=PROFILE_SOURCES)
        for name, inputs in REQUIRED_COSTS.items():
            if name not in self.costs:
                raise InputError(None, f"costs.{name}", "missing required cost model")
            if self.costs[name].inputs != inputs:
                raise InputError(None, f"costs.{name}.inputs", f"must be {list(inputs)}, "
                                 f"got {list(self.costs[name].inputs)}")
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
        object.__setattr__(self, "notes", tuple(self.notes))
        for i, note in enumerate(self.notes):
            check_text(f"notes[{i}]", note)

    def __hash__(self) -> int:
        # Fields hold dicts (unhashable); equal profiles have equal keys and sources, so this agrees with ==.
        return hash((self.key_str(), self.source))

    # --- what the simulator asks -------------------------------------------------------------
    @property
    def kv_capacity_bytes(self) -> int:
        """KV-cache budget of one replica, in bytes."""
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
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "key": self.key.to_dict(),
            "source": self.source,
            "hardware": self.hardware.to_dict(),
            "model": self.model.to_dict(),
            "memory": self.memory.to_dict(),
            "costs": {name: cost.to_dict() for name, cost in self.costs.items()},
            "speculative": None if self.speculative is None else self.speculative.to_dict(),
            "acceptance": {task: acc.to_dict() for task, acc in self.acceptance.items()},
            "paging": {link: page.to_dict() for link, page in self.paging.items()},
            "sequence_parallel": {str(p): sp.to_dict() for p, sp in self.sequence_parallel.items()},
            "compression": {mode: comp.to_dict() for mode, comp in self.compression.items()},
            "provenance": self.provenance.to_dict(),
            "notes": list(self.notes),
        }

    def to_json(self) -> str:
        """The canonical text: a profile that round-trips gives identical bytes."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, d: object, source: str | None = None) -> Profile:
        """Validate parsed JSON; ``source`` is the file path used in error messages."""
        obj = JsonObject(d, source, "")
        version = obj.get("schema_version")
        if type(version) is not int or version != SCHEMA_VERSION:
            raise obj.error("schema_version", f"unknown version {version!r}; this tripath reads version "
                            f"{SCHEMA_VERSION}")

        def table(name: str, parse: Any) -> dict[str, Any]:
            return {k: parse(v, source, obj.where(f"{name}.{k}")) for k, v in obj.mapping(name, {}).items()}

        sp: dict[int, SequenceParallel] = {}
        for degree_text, raw in obj.mapping("sequence_parallel", {}).items():
            where = obj.where(f"sequence_parallel.{degree_text}")
            if not degree_text.isdigit():
                raise InputError(source, where, "key must be a parallel degree (an integer)")
            sp[int(degree_text)] = SequenceParallel.parse(raw, source, where, int(degree_text))
        notes = obj.array("notes", [])
        for i, note in enumerate(notes):
            if not isinstance(note, str):
                raise obj.error(f"notes[{i}]", "must be a string")
        kwargs = {
            "schema_version": version,
            "key": ProfileKey.parse(obj.get("key"), source, "key"),
            "source": obj.string("source"),
            "hardware": Hardware.parse(obj.get("hardware"), source, "hardware"),
            "model": ModelSpec.parse(obj.get("model"), source, "model"),
            "memory": MemoryBudget.parse(obj.get("memory"), source, "memory"),
            "costs": {k: CostModel.parse(v, source, f"costs.{k}") for k, v in obj.mapping("costs").items()},
            "speculative": Speculative.parse(obj.get("speculative", None), source, "speculative"),
            "acceptance": table("acceptance", TaskAcceptance.parse),
            "paging": table("paging", PagingLink.parse),
            "sequence_parallel": sp,
            "compression": table("compression", CompressionMode.parse),
            "provenance": Provenance.parse(obj.get("provenance"), source, "provenance"),
            "notes": tuple(notes),
        }
        obj.finish()
        return build(cls, source, "", **kwargs)


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile file; any problem is an InputError naming the file and field."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(where, None, "no such profile file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(where, None, f"cannot read profile: {err}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        problem = f"malformed JSON: {err.msg} (column {err.colno})"
        raise InputError(where, f"line {err.lineno}", problem) from None
    return Profile.from_dict(raw, source=where)


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a temp file beside ``path``, then rename over it: readers never see half a file."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        # mkstemp creates 0600; keep an existing file's mode, else the usual 0644 for shared data.
        os.chmod(tmp, target.stat().st_mode & 0o777 if target.exists() else 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_profile(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write ``profile`` as canonical JSON, atomically."""
    text = profile.to_json()  # serialize first: a failure here must not touch the file system
    try:
        write_atomic(path, text)
    except OSError as err:
        raise InputError(str(path), None, f"cannot write profile: {err}") from None


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
    write_atomic(path, buffer.getvalue())


def load_samples(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The samples CSV as rows of column -> text (callers convert the columns they use)."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle))
    except FileNotFoundError:
        raise InputError(str(path), None, "no such samples file") from None
