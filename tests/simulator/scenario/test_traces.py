"""Trace loaders against the shipped files' documented statistics, and malformed-row errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tripath.core.data_dirs import TRACES_DIR
from tripath.core.errors import InputError
from tripath.simulator.scenario.traces import SHIPPED_TRACES, load_trace, resolve_trace_path

# From data/traces/*/README.md (P99 with linear interpolation, numpy's default).
DOCUMENTED = {
    # name: rows, span_s, (prompt min, median, mean, p99, max), (output min, median, mean, p99, max)
    "azure-conv-2023": (19366, 3501.7, (2, 1020, 1154.7, 4142, 14050), (7, 129, 211.1, 601, 1000)),
    "azure-code-2023": (8819, 3435.9, (3, 1469, 2047.8, 7436, 7437), (6, 13, 27.9, 251.5, 1899)),
    "mooncake-conversation": (
        12031, 3536.999, (891, 6909, 12035.1, 85400, 126195), (1, 350, 342.6, 1118.5, 2000)
    ),
    "mooncake-synthetic": (3993, 1022.025, (13, 11587, 15325.5, 66456, 191378), (1, 69, 149.1, 768, 893)),
}
# Git blob ids of the upstream files (data/traces/*/README.md): the copies are byte-for-byte.
BLOBS = {
    "azure-code-2023": "62bd8109d0f2b1bc48206d397ecca48d8de03aab",
    "azure-conv-2023": "5b9219f2caf93bbbf95ec29894e206115658e235",
    "mooncake-synthetic": "e4838049c0dcfc358a5f24ab08251279475cba94",
    "mooncake-conversation": "5a371794b81d7fc7487ec8a02a2c631bcc7fbdf8",
    "vidur-arxiv": "a0f23bceb4a19edc032faf92b23e4547e60293d3",
}
# Length-only traces (data/traces/vidur-arxiv/README.md): rows, (prompt stats), (output stats), as DOCUMENTED.
LENGTH_ONLY = {
    "vidur-arxiv": (28257, (1, 2730, 2588.1, 3933, 4054), (5, 167, 291.4, 3271, 4056)),
}


def _stats(values: np.ndarray) -> tuple[float, ...]:
    return (values.min(), np.median(values), values.mean(), np.percentile(values, 99), values.max())


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_shipped_trace_matches_its_readme(name: str) -> None:
    rows, span, prompt, output = DOCUMENTED[name]
    trace = load_trace(name)
    assert len(trace) == rows
    assert trace.arrival_s[0] == 0.0
    assert np.all(np.diff(trace.arrival_s) >= 0)
    assert trace.duration_s == pytest.approx(span, abs=0.1)
    for got, want in zip(_stats(trace.prompt_tokens), prompt, strict=True):
        assert got == pytest.approx(want, abs=0.6)  # the README rounds to 0.1 or to whole P99 tokens
    for got, want in zip(_stats(trace.output_tokens), output, strict=True):
        assert got == pytest.approx(want, abs=0.6)
    assert trace.name == name
    assert trace.licence.startswith("CC-BY-4.0" if name.startswith("azure") else "Apache-2.0")


def test_shipped_files_are_byte_for_byte_copies_with_licences() -> None:
    for name, blob in BLOBS.items():
        data = resolve_trace_path(name).read_bytes()
        # git's blob id: sha1 of "blob <size>\0" + content
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob
    assert (TRACES_DIR / "azure-llm-2023" / "LICENSE-CC-BY-4.0").is_file()
    assert (TRACES_DIR / "mooncake" / "LICENSE-APACHE").is_file()
    assert (TRACES_DIR / "vidur-arxiv" / "LICENSE-MIT").is_file()
    assert "Splitwise" in (TRACES_DIR / "README.md").read_text()
    assert "FAST" in (TRACES_DIR / "README.md").read_text()


def test_mooncake_prefix_blocks() -> None:
    conv = load_trace("mooncake-conversation")
    assert conv.total_blocks == 288500 and conv.unique_blocks == 182790
    # 512-token blocks: ceil(input_length / 512) ids per request (README, verified on every line)
    lengths = np.array([ids.shape[0] for ids in conv.hash_ids])
    assert np.array_equal(lengths, -(-conv.prompt_tokens // 512))
    synth = load_trace("mooncake-synthetic")
    assert synth.total_blocks == 121877 and synth.unique_blocks == 43924
    assert load_trace("azure-conv-2023").hash_ids is None


def test_azure_arrivals_keep_seven_digit_timestamps(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 23:59:59.9999999,10,1\n"
        "2023-11-17 00:00:00.0000001,20,2\n"
        "2023-11-16 23:59:58.5000000,30,3\n"  # out of order: rows are sorted with their lengths
    )
    trace = load_trace(str(f))
    assert trace.arrival_s.tolist() == pytest.approx([0.0, 1.4999999, 1.5000001], abs=1e-9)
    assert trace.prompt_tokens.tolist() == [30, 10, 20]
    assert trace.output_tokens.tolist() == [3, 1, 2]
    assert trace.name == "a" and "unknown" in trace.licence
    with pytest.raises(ValueError):
        trace.arrival_s[0] = 5.0  # shared through the cache, so read-only


def test_edited_file_is_reloaded(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n')
    assert len(load_trace(str(f))) == 1
    second = '{"timestamp": 2500, "input_length": 7, "output_length": 2, "hash_ids": [0]}\n'
    f.write_text(f.read_text() + second)
    trace = load_trace(str(f))
    assert len(trace) == 2 and trace.arrival_s.tolist() == [0.0, 2.5]  # ms -> s


AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,5,6\n"


@pytest.mark.parametrize(
    ("suffix", "text", "field", "words"),
    [
        (".csv", "time,prompt,output\n", "line 1", "header must be"),
        (".csv", "", "line 1", "header must be"),
        (".csv", AZURE_HEAD + "2023-11-16 18:00:01.0,abc,6\n", "line 3: ContextTokens", "'abc'"),
        (".csv", AZURE_HEAD + "2023-11-16 18:00:01.0,5,-2\n", "line 3: GeneratedTokens", ">= 0, got -2"),
        (".csv", AZURE_HEAD + "2023-11-16 18:00:01.0,5\n", "line 3: GeneratedTokens", "expected 3 fields"),
        (".csv", AZURE_HEAD + "yesterday,5,6\n", "line 3: TIMESTAMP", "YYYY-MM-DD"),
        (".csv", AZURE_HEAD + "2023-11-16 25:00:00.0,5,6\n", "line 3: TIMESTAMP", "'2023-11-16 25:00:00.0'"),
        (".jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n',
         "line 2: input_length", "missing field"),
        (".jsonl", '{"timestamp": 0, "input_length": "5", "output_length": 1}\n', "line 1: input_length",
         "non-negative integer"),
        (".jsonl", '{"timestamp": 0, "input_length": 5, "output_length": -1}\n', "line 1: output_length",
         "must be >= 0"),
        (".jsonl", '{"timestamp": -3, "input_length": 5, "output_length": 1}\n', "line 1: timestamp", ">= 0"),
        (".jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{oops\n', "line 2",
         "not valid JSON"),
        (".jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [-1]}\n',
         "line 1: hash_ids", "ints >= 0"),
    ],
)
def test_malformed_rows_name_file_line_and_field(
    tmp_path: Path, suffix: str, text: str, field: str, words: str
) -> None:
    f = tmp_path / f"bad{suffix}"
    f.write_text(text)
    with pytest.raises(InputError) as info:
        load_trace(str(f))
    assert info.value.source == str(f)
    assert info.value.field == field
    assert words in info.value.problem
    assert str(info.value).startswith(f"{f}: {field}: ")


def test_missing_and_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="trace file not found .*azure-conv-2023"):
        load_trace(str(tmp_path / "nope.csv"))
    other = tmp_path / "t.parquet"
    other.write_bytes(b"x")
    with pytest.raises(InputError, match="unknown trace format '.parquet'"):
        load_trace(str(other))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="no rows"):
        load_trace(str(empty))


def test_registry_names_the_shipped_files() -> None:
    assert set(SHIPPED_TRACES) == set(DOCUMENTED) | set(LENGTH_ONLY)
    for name, shipped in SHIPPED_TRACES.items():
        assert resolve_trace_path(name) == TRACES_DIR / shipped.relative_path
        assert resolve_trace_path(name).is_file()


@pytest.mark.parametrize(("missing", "line"), [((1,), 1), ((2,), 2), ((1, 2), 1)])
def test_mooncake_with_hashes_on_some_rows_only_is_refused(tmp_path: Path, missing: tuple[int, ...],
                                                            line: int) -> None:
    """Prefix identity on some rows only would turn prefix reuse off for every row: refused, naming the first row
    without it."""
    f = tmp_path / "partial.jsonl"
    rows = [{"timestamp": 5 * i, "input_length": 600, "output_length": 3, "hash_ids": [0, i]} for i in range(3)]
    for number in missing:
        del rows[number - 1]["hash_ids"]
    f.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(InputError, match=f"partial.jsonl: line {line}: hash_ids: missing"):
        load_trace(str(f))


def test_mooncake_without_hashes_on_any_row_keeps_none(tmp_path: Path) -> None:
    f = tmp_path / "plain.jsonl"
    f.write_text('{"timestamp": 5, "input_length": 600, "output_length": 3}\n'
                 '{"timestamp": 9.5, "input_length": 7, "output_length": 2}\n')
    trace = load_trace(str(f))
    assert trace.hash_ids is None and trace.unique_blocks is None
    assert trace.arrival_s.tolist() == [0.0, 0.0045]  # ms relative to the first request, in seconds


@pytest.mark.parametrize("name", sorted(LENGTH_ONLY))
def test_length_only_trace_matches_its_readme(name: str) -> None:
    rows, prompt, output = LENGTH_ONLY[name]
    trace = load_trace(name)
    assert len(trace) == rows and not trace.timed
    assert not trace.arrival_s.any()  # no arrival times: all 0
    for got, want in zip(_stats(trace.prompt_tokens), prompt, strict=True):
        assert got == pytest.approx(want, abs=0.6)
    for got, want in zip(_stats(trace.output_tokens), output, strict=True):
        assert got == pytest.approx(want, abs=0.6)
    assert trace.licence.startswith("MIT")


def test_length_only_trace_bootstraps_lengths_but_replays_no_arrivals(tmp_path: Path) -> None:
    from tripath.simulator.scenario.scenario import ArrivalSpec, LengthSpec, WorkloadSpec
    from tripath.simulator.scenario.workload import generate_arrays

    lengths = {key: LengthSpec(kind="empirical", trace="vidur-arxiv", column=column)
               for key, column in (("prompt_tokens", "prompt"), ("output_tokens", "output"))}
    workload = WorkloadSpec(arrival=ArrivalSpec(kind="poisson", rate_per_s=2.0), requests=500, **lengths)
    _, prompts, outputs, _, _ = generate_arrays(workload, np.random.default_rng(0), 2.0)
    trace = load_trace("vidur-arxiv")
    assert np.isin(prompts, trace.prompt_tokens).all() and np.isin(outputs, trace.output_tokens).all()
    replay = WorkloadSpec(arrival=ArrivalSpec(kind="trace", trace="vidur-arxiv"), requests=10,
                          prompt_tokens=LengthSpec(kind="trace"), output_tokens=LengthSpec(kind="trace"))
    with pytest.raises(InputError, match="length-only trace has no arrival times"):
        generate_arrays(replay, np.random.default_rng(0), None)


def test_vidur_rows_are_checked(tmp_path: Path) -> None:
    f = tmp_path / "lengths.csv"
    f.write_text("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n10,2,12,5.0\n7,-1,6,0.0\n")
    with pytest.raises(InputError, match="line 3: num_decode_tokens: must be >= 0"):
        load_trace(str(f))
    f.write_text("num_prefill_tokens,num_decode_tokens\n10,2\n7\n")
    with pytest.raises(InputError, match="line 3: expected 2 fields, got 1"):
        load_trace(str(f))
    f.write_text("num_prefill_tokens,num_decode_tokens\n10,2\n\n7,3\n")
    trace = load_trace(str(f))
    assert trace.prompt_tokens.tolist() == [10, 7] and trace.output_tokens.tolist() == [2, 3] and not trace.timed
