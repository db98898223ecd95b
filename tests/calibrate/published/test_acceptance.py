"""Published acceptance tables: the Spec-Bench a reproduces its published MAT; the seed pair is Table 3.1."""

from __future__ import annotations

import pytest

from tripath.calibrate.published.acceptance import (
    SPEC_BENCH_PAIR,
    SPEC_BENCH_SPS_K,
    SPEC_BENCH_SPS_MAT,
    SPEC_BENCH_TASKS,
    acceptance_for_pair,
)
from tripath.core.errors import InputError
from tripath.core.speculative import expected_tokens
from tripath.profile.profile import resolve_profile


def test_spec_bench_a_reproduces_the_published_mean_accepted_tokens():
    table = acceptance_for_pair(SPEC_BENCH_PAIR)
    assert sorted(table) == sorted([*SPEC_BENCH_TASKS.values(), "code"])
    # Spec-Bench has no code category: code gets the overall a, and its note says it is not a measurement of code
    assert "not a measurement of code" in table["code"].note and table["code"].mean == table["dialogue"].mean
    for entry in table.values():
        assert expected_tokens(SPEC_BENCH_SPS_K, entry.mean) == pytest.approx(SPEC_BENCH_SPS_MAT, abs=1e-9)
        assert (entry.k, entry.source, entry.per_position) == (5, "derived", None)
        assert "2401.07851" in entry.note and "not published" in entry.note
    # E rises with a: a smaller K would need a larger a for the same MAT
    assert 0.5 < table["dialogue"].mean < 0.6


def test_seed_pair_is_table_3_1_from_the_seed_profile():
    table = acceptance_for_pair("llama2-70b/llama2-7b")
    assert {t: e.mean for t, e in table.items()} == {"dialogue": 0.75, "math": 0.55, "code": 0.68,
                                                     "summarization": 0.72}
    assert table == dict(resolve_profile("seed-llama2-70b-a100").acceptance)
    assert {e.source for e in table.values()} == {"seed"}


def test_an_unknown_pair_names_the_known_ones():
    with pytest.raises(InputError, match="unknown .*'x/y'.*llama2-70b/llama2-7b, vicuna-7b/vicuna-68m"):
        acceptance_for_pair("x/y")
