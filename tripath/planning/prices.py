"""Price of a GPU-hour per GPU type, so that deployments on different GPU types can be compared by cost.

The prices come from a TOML file (the shipped one is data/gpu_prices.toml: one provider's on-demand list prices,
each with its citation; docs/planning.md, "GPU prices"), which the user may edit or replace, and from
``--gpu-price TYPE=PRICE`` overrides, which win over the file. A GPU type with no price is an error that says how
to give one, never a default: a made-up price would decide "A100 or H100?" as surely as a real one.

A GPU type is the ``hardware`` field of a profile key (``a100-80gb``, ``h100-sxm``, ``h200``, ``b200``, or
``cpu`` for a profile measured on a CPU); any other name in a file or an override is rejected as a likely typo.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tripath.core.data_dirs import DATA_DIR
from tripath.core.errors import InputError, read_input_text
from tripath.core.limits import MAX_USD_PER_GPU_HOUR
from tripath.profile.catalog import GPUS
from tripath.simulator.scenario.toml_reader import check_keys, subtable, typed

PRICES_PATH = DATA_DIR / "gpu_prices.toml"
# the profile keys' hardware names: the catalogue's GPUs, and "cpu" (what calibrating on a CPU names the device)
GPU_TYPES = (*GPUS, "cpu")
OVERRIDE_SOURCE = "given with --gpu-price"
_FIELDS = ("usd_per_gpu_hour", "provider", "offering", "date", "url")
_MAX_PRICE_FILE_BYTES = 1 << 20  # the shipped file is ~3 KB


@dataclass(frozen=True)
class GpuPrice:
    """One GPU type's price of one GPU for one hour (USD) and where that number comes from."""

    usd_per_gpu_hour: float
    source: str


@dataclass(frozen=True)
class GpuPrices:
    """The price of each priced GPU type (in the file's order) and the file they were read from."""

    entries: dict[str, GpuPrice] = field(hash=False)
    path: str

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types that have a price."""
        return tuple(self.entries)

    def price(self, gpu: str) -> float:
        """USD per GPU-hour of ``gpu``; an InputError naming the file and the type (and how to give a price)
        when it has none, so the CLI prints one line and exits 2."""
        return self._entry(gpu).usd_per_gpu_hour

    def source(self, gpu: str) -> str:
        """Where ``gpu``'s price comes from: provider, offering, date and URL, or that it was given on the
        command line; the same InputError as ``price`` when it has none."""
        return self._entry(gpu).source

    def with_overrides(self, overrides: Sequence[tuple[str, float]]) -> GpuPrices:
        """These prices with each (type, price) pair put in (a later pair for the same type wins), marked as
        given with --gpu-price. An unknown type or a price that is not a finite number > 0 is an InputError on
        --gpu-price (``parse_price_override`` already refuses both on the command line)."""
        entries = dict(self.entries)
        for gpu, value in overrides:
            problem = _type_problem(gpu) or _price_problem(value)
            if problem:
                raise InputError(None, "--gpu-price", f"{gpu}={value}: {problem}")
            entries[gpu] = GpuPrice(float(value), OVERRIDE_SOURCE)
        return GpuPrices(entries, self.path)

    def _entry(self, gpu: str) -> GpuPrice:
        if gpu in self.entries:
            return self.entries[gpu]
        priced = f" (priced: {', '.join(self.entries)})" if self.entries else ""
        if gpu not in GPU_TYPES:
            raise InputError(self.path, gpu, f"no price for GPU type {gpu!r}, which tripath does not know "
                                             f"(known: {', '.join(GPU_TYPES)}){priced}")
        raise InputError(self.path, gpu, f"no price for GPU type {gpu}: give --gpu-price {gpu}=PRICE "
                                         f"(USD per GPU-hour) or add a [{gpu}] table to the file{priced}")


def load_prices(path: str | Path | None = None) -> GpuPrices:
    """The GPU prices in a TOML file (default: the shipped data/gpu_prices.toml). A missing or malformed file,
    a missing or unknown field, an unknown GPU type or a price that is not a finite number > 0 is one
    InputError naming the file and the field."""
    source = str(PRICES_PATH if path is None else path)
    text = read_input_text(source, "GPU price file not found", "cannot read GPU price file",
                           max_bytes=_MAX_PRICE_FILE_BYTES)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(source, None, f"invalid TOML: {exc}") from None
    except RecursionError:
        raise InputError(source, None, "invalid TOML: nested too deeply") from None
    except ValueError as exc:  # an integer past Python's int-to-text digit limit
        raise InputError(source, None, f"invalid TOML: {exc}") from None
    for gpu in data:
        problem = _type_problem(gpu)
        if problem:
            raise InputError(source, gpu, problem)
    return GpuPrices({gpu: _entry_from_table(subtable(data, gpu, source), source, gpu) for gpu in data}, source)


def parse_price_override(text: str) -> tuple[str, float]:
    """``TYPE=PRICE`` (USD per GPU-hour, e.g. ``h100-sxm=3.99``) as (type, price): an argparse type, so bad
    input is an ArgumentTypeError of one line (no '=', not a number, not > 0, not finite, unknown type)."""
    gpu, sep, value_text = text.partition("=")
    gpu, value_text = gpu.strip(), value_text.strip()
    if not sep or not gpu or not value_text:
        raise argparse.ArgumentTypeError(f"must be TYPE=PRICE (USD per GPU-hour, e.g. h100-sxm=3.99), "
                                         f"got {text[:60]!r}")
    problem = _type_problem(gpu)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    try:
        value = float(value_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{gpu}: price must be a number (USD per GPU-hour), "
                                         f"got {value_text[:40]!r}") from None
    problem = _price_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{gpu}: {problem}")
    return gpu, value


def cost_per_million_output_tokens(usd_per_hour: float, output_tokens_per_s: float) -> float | None:
    """USD per million output tokens of a deployment costing ``usd_per_hour`` that produces
    ``output_tokens_per_s``: usd_per_hour / (tokens_per_s x 3600) x 1e6. None when it produces no tokens (the
    cost per token is undefined, not infinite or zero)."""
    for name, value in (("usd_per_hour", usd_per_hour), ("output_tokens_per_s", output_tokens_per_s)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if output_tokens_per_s == 0:
        return None
    return usd_per_hour / (output_tokens_per_s * 3600.0) * 1e6


def _entry_from_table(table: dict[str, Any], source: str, gpu: str) -> GpuPrice:
    """One GPU type's table: every field present and of its type, the price finite and > 0."""
    check_keys(table, set(_FIELDS), source, gpu)
    for name in _FIELDS:
        if name not in table:
            raise InputError(source, f"{gpu}.{name}", "missing required field")
    value = cast(float, typed(table["usd_per_gpu_hour"], float, source, f"{gpu}.usd_per_gpu_hour"))
    problem = _price_problem(value)
    if problem:
        raise InputError(source, f"{gpu}.usd_per_gpu_hour", problem)
    for name in ("provider", "offering", "url"):
        text = typed(table[name], str, source, f"{gpu}.{name}")
        if not str(text).strip():
            raise InputError(source, f"{gpu}.{name}", "must not be empty")
    date = table["date"]
    if not isinstance(date, datetime.date) or isinstance(date, datetime.datetime):
        raise InputError(source, f"{gpu}.date", f"must be a date written YYYY-MM-DD without quotes, got {date!r}")
    text = f"{table['provider']}, {table['offering']}, as of {date.isoformat()} ({table['url']})"
    return GpuPrice(value, text)


def _type_problem(gpu: str) -> str | None:
    """Why ``gpu`` is not a GPU type tripath knows (with the nearest name), or None."""
    if gpu in GPU_TYPES:
        return None
    near = [g for g in GPU_TYPES if g.startswith(gpu)] or difflib.get_close_matches(gpu, GPU_TYPES, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"unknown GPU type {gpu[:40]!r} (known: {', '.join(GPU_TYPES)}){hint}"


def _price_problem(value: float) -> str | None:
    """Why ``value`` is not a usable price (a finite number > 0), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"price must be a number (USD per GPU-hour), got {value!r}"
    if not (math.isfinite(value) and 0 < value <= MAX_USD_PER_GPU_HOUR):
        return f"price must be a finite number > 0 and <= {MAX_USD_PER_GPU_HOUR:,g} (USD per GPU-hour), got {value}"
    return None
