"""The seed profile against the seed's decision matrix (SEEDS.md Section 4), row by row.

Rows 3 and 5 reproduce (tiered). Rows 1, 2 and 4 do not, and the tests below pin down why
instead of tuning anything; the reproduction checks of those rows are strict xfails, so a
change in physics that makes them agree fails here and asks for this file to be updated:

- Every 8-16K and longer request exceeds the seed profile's 8,192-token KV budget
  (memory.kv_capacity_bytes, "derived" from Table 3.2), so the baseline and speculation alone
  reject 100% of rows 1, 2, 4, 5: only a tiered candidate (or SP's doubled budget) can serve them.
- The seed profile's prefill is a derived compute roofline (c_tok 0.884 ms/token: 2 x 69B FLOPs
  at 50% of 312 TFLOP/s); an 8,192-token prompt alone takes 7.8 s, above rows 1-2's 5 s TTFT
  target, so no one-GPU candidate can meet those cells (the seed's tables give no prefill time;
  the cells' SLAs were placed around its decode P99s).
- Row 4's sequence parallelism runs on one 2-GPU replica with twice the KV budget (16K tokens):
  most 8-32K requests still do not fit and are rejected.
"""

from __future__ import annotations

import pytest

from planning.matrix import SEED_MATRIX, decision_matrix
from simulator.profile import resolve_profile

SEED = resolve_profile("seed-llama2-70b-a100")
BUDGET_TOKENS = SEED.kv_capacity_bytes // SEED.model.kv_bytes_per_token


@pytest.fixture(scope="module")
def cells():
    matrix = decision_matrix(SEED)
    return {cell.scenario: cell for cell in matrix.cells}


def outcome(cell, name):
    return next(r for r in cell.results if r.candidate.name == name).outcome.data


def test_every_cell_is_a_seed_row_with_every_candidate_reported(cells):
    assert list(cells) == [name for name, _ in SEED_MATRIX]
    for cell in cells.values():
        assert cell.seed_recommends is not None
        for r in cell.results:  # every candidate is either simulated or says why not
            assert (r.outcome is None) != (r.not_applicable is None)
        comp = next(r for r in cell.results if r.candidate.name == "compression")
        assert "not in the profile" in comp.not_applicable  # the seed measured no compression mode


@pytest.mark.parametrize("row", ["summarization-very-long", "very-long-single-gpu"])
def test_tiered_rows_reproduce(cells, row):
    cell = cells[row]
    assert cell.compared_path == "tiered" and cell.seed_agrees
    feasible = [r.candidate.name for r in cell.results if r.outcome is not None and len(r.candidate.paths) <= 1
                and r.outcome.data["rejected_share"] == 0.0]
    assert feasible == ["tiered"]  # "the only feasible option" (row 5), the seed's words


@pytest.mark.parametrize("row", ["dialogue-medium", "math-medium", "fixed-length-multi-gpu",
                                 "very-long-single-gpu", "summarization-very-long"])
def test_long_requests_exceed_the_seed_kv_budget(cells, row):
    assert BUDGET_TOKENS == 8192
    assert outcome(cells[row], "baseline")["rejected_share"] == 1.0
    assert outcome(cells[row], "speculative")["rejected_share"] == 1.0


@pytest.mark.parametrize("row", ["dialogue-medium", "math-medium"])
def test_one_gpu_prefill_alone_exceeds_the_cells_ttft_target(cells, row):
    cell = cells[row]
    assert SEED.prefill_ms(8192, 0) > cell.sla_ms["ttft"]
    assert cell.recommended is None


def test_sp_alone_cannot_hold_most_8_32k_requests(cells):
    assert outcome(cells["fixed-length-multi-gpu"], "sequence_parallel")["rejected_share"] > 0.5


@pytest.mark.xfail(strict=True, reason="rows 1, 2, 4 differ on the seed profile: see the module docstring")
@pytest.mark.parametrize("row", ["dialogue-medium", "math-medium", "fixed-length-multi-gpu"])
def test_rows_that_do_not_reproduce(cells, row):
    assert cells[row].seed_agrees
