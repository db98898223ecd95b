"""The single definitions other modules share: the records.csv writer, the SLA terms, a sweep's timing row."""

from __future__ import annotations

import csv
import io

from tripath.calibrate.samples import Sample
from tripath.core.metrics import SLA_TERMS, TERMS, sla_targets
from tripath.core.records import RECORD_COLUMNS, record_row, rejected_record, write_records


def test_write_records_is_the_header_then_one_row_per_record_numbered_by_run() -> None:
    a, b = rejected_record(0, "chat", 0.5, 10, 5, "too long"), rejected_record(1, "code", 0.25, 3, 2, "full")
    buffer = io.StringIO()
    write_records(buffer, [(a,), (b,)])
    text = buffer.getvalue()
    assert "\r" not in text
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == list(RECORD_COLUMNS)
    assert rows[1] == [str(v) if v is not None else "" for v in record_row(0, a)]
    assert rows[2][0] == "1" and rows[2][1] == "1"


def test_sla_targets_reads_every_term_and_tolerates_no_table() -> None:
    assert TERMS == ("ttft", "tpot", "e2e") and list(SLA_TERMS) == list(TERMS)
    assert sla_targets({"ttft_p99_ms": 200.0, "other": 1}) == {"ttft": 200.0, "tpot": None, "e2e": None}
    assert sla_targets(None) == {"ttft": None, "tpot": None, "e2e": None}


def test_sample_of_summarises_repetitions_and_constant_repeats_one_value() -> None:
    assert Sample.of("s", 2, 3, 4, [3.0, 1.0, 2.0, 5.0]) == Sample("s", 2, 3, 4, 2.5, 1.0, 5.0, 4)
    assert Sample.constant("c", 0, 1, 0, 7, 9) == Sample("c", 0, 1, 0, 7.0, 7.0, 7.0, 9)
