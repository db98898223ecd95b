"""Real request traces: the shipped Azure LLM 2023, Mooncake FAST'25 and Vidur arXiv files, or a user's file.

A trace is arrival times (seconds after its first request, sorted) with each request's prompt and
output lengths. Three formats are read, chosen by extension (and, for .csv, by header):

- ``.csv``: the Azure LLM inference trace 2023 (Splitwise, ISCA 2024), header
  ``TIMESTAMP,ContextTokens,GeneratedTokens`` with wall-clock ``YYYY-MM-DD HH:MM:SS.fffffff`` stamps.
- ``.csv`` headed ``num_prefill_tokens,num_decode_tokens[,...]``: Vidur's processed length traces (MLSys 2024),
  lengths only: no arrival times (``timed`` is False), so scenarios bootstrap lengths from it (``empirical``)
  and cannot replay its arrivals.
- ``.jsonl``: the Mooncake trace (FAST'25), one object a line with ``timestamp`` (ms),
  ``input_length``, ``output_length`` and ``hash_ids`` (512-token prefix-block hashes).

Loads are cached per process, keyed by resolved path (and its mtime and size, so an edit is seen).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from tripath.core.data_dirs import TRACES_DIR
from tripath.core.errors import InputError, check_regular_file, describe_os_error
from tripath.core.limits import MAX_LINE_BYTES, MAX_REQUESTS, MAX_TOKENS, MAX_TRACE_BYTES

AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
VIDUR_HEADER = ("num_prefill_tokens", "num_decode_tokens")  # the leading columns; the rest are derived ones
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
MAX_TIMESTAMP_MS = 1e15  # ~31,700 years: any larger integer stamp is an error, not a float overflow
_AZURE_LICENCE = "CC-BY-4.0 (Azure LLM inference trace 2023; cite Patel et al., Splitwise, ISCA 2024)"
_MOONCAKE_LICENCE = "Apache-2.0 (Mooncake FAST'25 traces; cite Qin et al., Mooncake, FAST 2025)"
_VIDUR_LICENCE = "MIT (Vidur processed traces; cite Agrawal et al., Vidur, MLSys 2024)"


@dataclass(frozen=True)
class ShippedTrace:
    """A trace copied byte-for-byte into data/traces/, with where it came from."""

    relative_path: str
    licence: str


SHIPPED_TRACES: dict[str, ShippedTrace] = {
    "azure-conv-2023": ShippedTrace("azure-llm-2023/AzureLLMInferenceTrace_conv.csv", _AZURE_LICENCE),
    "azure-code-2023": ShippedTrace("azure-llm-2023/AzureLLMInferenceTrace_code.csv", _AZURE_LICENCE),
    "mooncake-conversation": ShippedTrace("mooncake/conversation_trace.jsonl", _MOONCAKE_LICENCE),
    "mooncake-synthetic": ShippedTrace("mooncake/synthetic_trace.jsonl", _MOONCAKE_LICENCE),
    "vidur-arxiv": ShippedTrace("vidur-arxiv/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
                                _VIDUR_LICENCE),
}


@dataclass(frozen=True, eq=False)
class Trace:
    """One trace, rows sorted by arrival. Arrays are read-only: loads are shared through the cache.

    hash_ids (Mooncake only) holds each request's prefix-block ids (512-token blocks); None for Azure.
    timed is False for a length-only trace (Vidur's): its arrival_s are all 0 and mean nothing.
    """

    name: str
    source_path: str
    licence: str
    arrival_s: np.ndarray  # float64, seconds after the first request, non-decreasing
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    hash_ids: tuple[np.ndarray, ...] | None = None
    timed: bool = True

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    @property
    def unique_blocks(self) -> int | None:
        """Distinct prefix blocks across the trace (Mooncake); repeats are reusable prefix KV."""
        if self.hash_ids is None:
            return None
        if not self.hash_ids:
            return 0
        return int(np.unique(np.concatenate(self.hash_ids)).shape[0])

    @property
    def total_blocks(self) -> int | None:
        if self.hash_ids is None:
            return None
        return int(sum(ids.shape[0] for ids in self.hash_ids))

    def column(self, name: str) -> np.ndarray:
        """The length column named as scenarios name it: "prompt" or "output"."""
        if name == "prompt":
            return self.prompt_tokens
        if name == "output":
            return self.output_tokens
        raise ValueError(f"trace column must be 'prompt' or 'output', got {name!r}")


def resolve_trace_path(name_or_path: str, base_dir: Path | None = None) -> Path:
    """A shipped trace name, or a path (absolute, relative to base_dir, or relative to the cwd)."""
    shipped = SHIPPED_TRACES.get(name_or_path)
    if shipped is not None:
        return TRACES_DIR / shipped.relative_path
    path = Path(name_or_path).expanduser()
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = base_dir / path
    return path.resolve()


def load_trace(name_or_path: str, base_dir: Path | None = None) -> Trace:
    """Load a shipped trace by name or a .csv / .jsonl file by path (cached per process)."""
    path = resolve_trace_path(name_or_path, base_dir)
    shipped = SHIPPED_TRACES.get(name_or_path)
    name = name_or_path if shipped is not None else path.stem
    licence = shipped.licence if shipped is not None else "unknown (user-supplied file)"
    check_regular_file(path)
    if not path.is_file():
        known = ", ".join(sorted(SHIPPED_TRACES))
        raise InputError(str(path), None, f"trace file not found (shipped traces: {known})")
    stat = path.stat()  # in the key so an edited file is read again
    return _load_cached(str(path), name, licence, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=32)
def _load_cached(path: str, name: str, licence: str, mtime_ns: int, size: int) -> Trace:
    p = Path(path)
    suffix = p.suffix.lower()
    if size > MAX_TRACE_BYTES:
        raise InputError(path, None, f"trace larger than the limit of {MAX_TRACE_BYTES:,} bytes ({size:,} bytes)")
    timed = True
    try:
        if suffix == ".csv":
            times, prompt, output = _read_azure_csv(p)
            hashes = None
            timed = bool(times) and times[0] is not None
            if not timed:  # a length-only trace: every request at 0
                times = [0] * len(times)
        elif suffix == ".jsonl":
            times, prompt, output, hashes = _read_mooncake_jsonl(p)
        else:
            expected = "expected .csv (Azure) or .jsonl (Mooncake)"
            raise InputError(path, None, f"unknown trace format {suffix!r}: {expected}")
    except UnicodeDecodeError as err:
        raise InputError(path, None, f"cannot read trace: not UTF-8 text (byte {err.start} of a block)") from None
    except OSError as err:
        raise InputError(path, None, f"cannot read trace: {describe_os_error(err).removeprefix(path + ': ')}") from None
    if not times:
        raise InputError(path, None, "trace has no rows")
    if suffix == ".csv":  # integer 100 ns ticks: subtract before converting to float seconds
        ticks = np.asarray(times, dtype=np.int64)
        t = (ticks - ticks.min()).astype(np.float64) / 1e7
    else:
        t = np.asarray(times, dtype=np.float64)
        t = t - t.min()
    order = np.argsort(t, kind="stable")  # files are sorted already; a user's may not be
    t = t[order]
    prompt_arr = np.asarray(prompt, dtype=np.int64)[order]
    output_arr = np.asarray(output, dtype=np.int64)[order]
    hash_tuple = None
    if hashes is not None:
        hash_tuple = tuple(hashes[i] for i in order)
        for ids in hash_tuple:
            ids.flags.writeable = False
    for arr in (t, prompt_arr, output_arr):
        arr.flags.writeable = False
    return Trace(name, path, licence, t, prompt_arr, output_arr, hash_tuple, timed)


def _azure_ticks(stamp: str) -> int:
    """100 ns ticks since 0001-01-01 for 'YYYY-MM-DD HH:MM:SS.fffffff'.

    Integer ticks, because float seconds since year 1 (~6e10) keep only ~10 us, and datetime only 1 us.
    """
    date_part, _, time_part = stamp.strip().partition(" ")
    day = dt.date.fromisoformat(date_part).toordinal()
    hh, mm, ss = time_part.split(":")
    whole, _, fraction = ss.partition(".")
    if not (fraction.isdigit() or fraction == "") or not whole.isdigit() or len(fraction) > 7:
        raise ValueError(stamp)
    hours, minutes, seconds = int(hh), int(mm), int(whole)
    if not (0 <= hours < 24 and 0 <= minutes < 60 and 0 <= seconds < 61):
        raise ValueError(stamp)
    return ((day * 24 + hours) * 60 + minutes) * 60 * 10**7 + seconds * 10**7 + int(fraction.ljust(7, "0"))


def _count(raw: object, source: str, where: str, text: bool = False) -> int:
    """A token count: a non-negative integer (a JSON int, or CSV text of one when text is set)."""
    if isinstance(raw, bool) or (isinstance(raw, str) and not text):
        raise InputError(source, where, f"must be a non-negative integer, got {raw!r}")
    if isinstance(raw, str):
        try:
            value = int(raw.strip())
        except ValueError:
            raise InputError(source, where, f"must be a non-negative integer, got {raw!r}") from None
    elif isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    else:
        raise InputError(source, where, f"must be a non-negative integer, got {raw!r}")
    if value < 0:
        raise InputError(source, where, f"must be >= 0, got {value}")
    if value > MAX_TOKENS:
        raise InputError(source, where, f"must be <= {MAX_TOKENS:,} tokens, got {_digits(value)}")
    return value


def _digits(value: int) -> str:
    """An int for an error line, shortened when it is huge."""
    text = str(value) if value.bit_length() < 4000 else "an integer of more than 1,200 digits"
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} digits)"


def _row_limit(count: int, source: str, where: str) -> None:
    if count >= MAX_REQUESTS:
        raise InputError(source, where, f"trace has more than {MAX_REQUESTS:,} rows (the request limit)")


def _read_azure_csv(path: Path) -> tuple[list[int | None], list[int], list[int]]:
    """An Azure CSV, or a Vidur length-only one (its times all None)."""
    source = str(path)
    times: list[int | None] = []
    prompt: list[int] = []
    output: list[int] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader, None)
        except csv.Error as err:
            raise InputError(source, "line 1", f"not a CSV header: {err}") from None
        names = tuple(h.strip() for h in header) if header is not None else ()
        vidur = names[:2] == VIDUR_HEADER
        if not vidur and names != AZURE_HEADER:
            shown = repr(header) if len(repr(header)) <= 80 else f"{repr(header)[:80]}..."
            raise InputError(source, "line 1", f"header must be {','.join(AZURE_HEADER)} (or start "
                                               f"{','.join(VIDUR_HEADER)}), got {shown}")
        while True:
            try:
                row = next(reader, None)
            except csv.Error as err:
                raise InputError(source, f"line {reader.line_num}", f"malformed CSV: {err}") from None
            if row is None:
                break
            line = reader.line_num
            if not row:
                continue  # a blank line (e.g. a trailing newline) is not a request
            _row_limit(len(times), source, f"line {line}")
            if vidur:
                if len(row) != len(names):
                    raise InputError(source, f"line {line}", f"expected {len(names)} fields, got {len(row)}")
                times.append(None)
                prompt.append(_count(row[0], source, f"line {line}: {VIDUR_HEADER[0]}", text=True))
                output.append(_count(row[1], source, f"line {line}: {VIDUR_HEADER[1]}", text=True))
                continue
            if len(row) != 3:
                missing = AZURE_HEADER[len(row)] if len(row) < 3 else "row"
                raise InputError(source, f"line {line}: {missing}", f"expected 3 fields, got {len(row)}")
            try:
                times.append(_azure_ticks(row[0]))
            except ValueError:
                raise InputError(
                    source, f"line {line}: TIMESTAMP", f"expected YYYY-MM-DD HH:MM:SS.fff, got {row[0][:40]!r}"
                ) from None
            prompt.append(_count(row[1], source, f"line {line}: ContextTokens", text=True))
            output.append(_count(row[2], source, f"line {line}: GeneratedTokens", text=True))
    return times, prompt, output


def _read_mooncake_jsonl(path: Path) -> tuple[list[float], list[int], list[int], list[np.ndarray] | None]:
    source = str(path)
    times: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    hashes: list[np.ndarray] = []
    first_without: int | None = None  # the first line without hash_ids
    with path.open(encoding="utf-8") as fh:
        # readline with a limit: one huge line is refused without being read whole
        for line_no, text in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), ""), start=1):
            if not text.strip():
                continue
            if len(text) > MAX_LINE_BYTES:
                raise InputError(source, f"line {line_no}", f"longer than the limit of {MAX_LINE_BYTES:,} characters")
            _row_limit(len(times), source, f"line {line_no}")
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(source, f"line {line_no}", f"not valid JSON: {exc.msg}") from None
            except RecursionError:
                raise InputError(source, f"line {line_no}", "not valid JSON: nested too deeply") from None
            except ValueError as exc:  # an integer past Python's int-to-text digit limit
                raise InputError(source, f"line {line_no}", f"not valid JSON: {exc}") from None
            if not isinstance(row, dict):
                raise InputError(source, f"line {line_no}", "expected a JSON object")
            for field in MOONCAKE_FIELDS:
                if field not in row:
                    raise InputError(source, f"line {line_no}: {field}", "missing field")
            stamp = row["timestamp"]
            if isinstance(stamp, int) and not isinstance(stamp, bool) and abs(stamp) > MAX_TIMESTAMP_MS:
                raise InputError(source, f"line {line_no}: timestamp", f"must be <= {MAX_TIMESTAMP_MS:g} ms, "
                                                                       f"got {_digits(stamp)}")
            if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
                raise InputError(source, f"line {line_no}: timestamp", f"must be ms, got {str(stamp)[:40]!r}")
            if stamp < 0:
                raise InputError(source, f"line {line_no}: timestamp", f"must be >= 0, got {stamp}")
            times.append(float(stamp) / 1000.0)  # ms -> s
            prompt.append(_count(row["input_length"], source, f"line {line_no}: input_length"))
            output.append(_count(row["output_length"], source, f"line {line_no}: output_length"))
            ids = row.get("hash_ids")
            if ids is None:
                first_without = first_without or line_no
            else:
                if not isinstance(ids, list) or not all(type(i) is int and 0 <= i < 1 << 63 for i in ids):
                    raise InputError(source, f"line {line_no}: hash_ids", "must be a list of ints >= 0 and < 2**63")
                hashes.append(np.asarray(ids, dtype=np.int64))
    # prefix identity on some rows only would silently turn prefix reuse off for all of them (or guess for some)
    if hashes and first_without is not None:
        raise InputError(source, f"line {first_without}: hash_ids",
                         f"missing, while {len(hashes):,} other rows have it: give every row its prompt's block "
                         "hashes, or none")
    return times, prompt, output, hashes if first_without is None else None
