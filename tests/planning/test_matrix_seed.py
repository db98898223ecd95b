"""The seed profile against the seed's decision matrix (SEEDS.md Section 4), row by row.

The cells' SLAs, load and batch size are derived (tripath/planning/seed_sla.py) from the seed's tables
and the profile, not chosen; the shipped scenario files must carry the derived values. Each
seed row is compared with the part of the answer that addresses its claim (tripath/planning/matrix.py):
rows 1, 2, 4 (gain claims) with the primary path, rows 3, 5 (memory claims) with the paths
needed for memory. Rows 1, 3, 4, 5 agree. Row 2 does not (at the default one replication), and
stays a strict xfail whose reason is the physics: on the seed's 8K-token budget (derived from its
Table 3.2, which pages at 16K) tiering is needed for memory at 8-16K, contrary to the seed's
"tiering not needed", and with paging paid once per iteration a speculative round amortises it,
so speculation gains a little even at 55% acceptance (a near-tie; see docs/planning.md).

No cell meets its SLA on the seed profile (the comparison uses the closest feasible candidate,
and the test says so): Table 3.2's P99 at 16K (120 ms, with paging) is below Table 3.3's 160 ms
without paging, which the profile's decode follows, and the P99 TTFT includes waiting behind
requests with long (Azure-trace) outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import SEED
from tripath.planning.matrix import SEED_MATRIX, decision_matrix
from tripath.planning.scenario_dict import load_scenario_dict
from tripath.planning.seed_sla import (
    CELL_UPPER,
    LOAD_FRACTION,
    MAX_BATCH_SIZE,
    cell_sla,
    residual_quantile,
    service_samples,
)

BUDGET_TOKENS = SEED.kv_capacity_bytes // SEED.model.kv_bytes_per_token
UPPER = CELL_UPPER


@pytest.fixture(scope="module")
def cells():
    matrix = decision_matrix(SEED)
    return {cell.scenario: cell for cell in matrix.cells}


def outcome(cell, name):
    return next(r for r in cell.results if r.candidate.name == name).outcome.data


def test_prefill_of_the_band_by_hand():
    # prefill_v1: c0 + c_tok T + c_attn T (C + (T + 1) / 2), the profile README's derived coefficients
    hand = 2.15916 + 0.884316 * 16384 + 1.68041e-5 * 16384 * (16385 / 2)
    assert cell_sla(SEED, 16384, np.full(10, 1000.0)).prefill_upper_ms == pytest.approx(hand, rel=1e-5)
    with pytest.raises(ValueError, match="no seed P99"):
        cell_sla(SEED, 12000, np.full(10, 1000.0))


def test_residual_quantile_against_theory():
    # equal services s: P(R > t) = (s - t) / s, so P(R > t) = 0.1 at t = 0.9 s
    assert residual_quantile(np.full(100, 10.0), 0.1) == pytest.approx(9.0)
    # exponential services (mean m) are memoryless: R is exponential too, t = m ln 10
    draws = np.random.default_rng(0).exponential(5.0, 200_000)
    assert residual_quantile(draws, 0.1) == pytest.approx(5.0 * np.log(10.0), rel=0.01)
    # at load 0.1 the P99 wait is the residual's 90th percentile: the cell's allowance
    assert cell_sla(SEED, 16384, np.full(100, 10_000.0)).wait_p99_ms == pytest.approx(9_000.0)


def test_service_time_by_hand():
    data = {"name": "one", "workload": {"requests": 1, "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                                        "prompt_tokens": {"kind": "fixed", "value": 8192},
                                        "output_tokens": {"kind": "fixed", "value": 101}}}
    # decode_v1 at batch 1 summed over contexts 8193..8292 = 100 steps at the mean context 8242.5
    hand = SEED.prefill_ms(8192, 0) + sum(SEED.decode_ms(1, 8192 + k) for k in range(1, 101))
    assert service_samples(SEED, data, None, n=3) == pytest.approx(np.full(3, hand))


@pytest.mark.parametrize("row", list(UPPER))
def test_scenario_files_carry_the_derived_sla(row):
    data, source = load_scenario_dict(row)
    derived = cell_sla(SEED, UPPER[row], service_samples(SEED, data, source))
    assert data["sla"] == {"ttft_p99_ms": derived.ttft_ms, "tpot_p99_ms": derived.tpot_ms}
    assert data["workload"]["arrival"]["load_fraction"] == LOAD_FRACTION
    assert data["batching"]["max_batch_size"] == MAX_BATCH_SIZE
    assert data["workload"]["prompt_tokens"]["high"] == UPPER[row]


def test_every_cell_is_a_seed_row_with_every_candidate_reported(cells):
    assert list(cells) == [name for name, _ in SEED_MATRIX]
    for cell in cells.values():
        assert cell.seed_recommends is not None
        for r in cell.results:  # every candidate is either simulated or says why not
            assert (r.outcome is None) != (r.not_applicable is None)
        comp = next(r for r in cell.results if r.candidate.name == "compression")
        assert "not in the profile" in comp.not_applicable  # the seed measured no compression mode
        assert cell.recommended is None and cell.chosen is not None  # compared via the closest candidate
        assert cell.why()[0].startswith("no candidate meets the SLA")


@pytest.mark.parametrize("row", list(UPPER))
def test_long_requests_exceed_the_seed_kv_budget(cells, row):
    assert BUDGET_TOKENS == 8192
    assert outcome(cells[row], "baseline")["rejected_share"] == 1.0
    assert outcome(cells[row], "speculative")["rejected_share"] == 1.0
    assert "tiered" in cells[row].attribution.memory_paths  # so every answer needs tiering to fit


@pytest.mark.parametrize("row, chosen, primary", [
    ("dialogue-medium", "speculative+tiered", "speculative"),
    ("summarization-very-long", "speculative+tiered", "speculative"),
    ("fixed-length-multi-gpu", "sequence_parallel+tiered", "sequence_parallel"),
    ("very-long-single-gpu", "speculative+tiered", "speculative"),
])
def test_rows_that_reproduce(cells, row, chosen, primary):
    cell = cells[row]
    assert cell.chosen.candidate.name == chosen
    assert cell.attribution.primary_path == primary and cell.attribution.memory_paths == ("tiered",)
    assert cell.seed_agrees and cell.why_not_seed() is None


def test_the_gain_is_the_margin_difference_to_the_candidate_without_it(cells):
    cell = cells["dialogue-medium"]
    spec = next(r for r in cell.attribution.roles if r.path == "speculative")
    assert spec.without == "tiered"
    gain = outcome(cell, "speculative+tiered")["sla_margin"] - outcome(cell, "tiered")["sla_margin"]
    assert gain > 0 and f"{gain * 100:+.1f} points" in spec.detail


def test_sp_alone_cannot_hold_most_8_32k_requests(cells):
    cell = cells["fixed-length-multi-gpu"]
    assert outcome(cell, "sequence_parallel")["rejected_share"] > 0.5
    assert any("not recommended" in note for note in cell.why())  # the seed's SP + tiered caveat, answered


@pytest.mark.parametrize("row", ["dialogue-medium", "math-medium"])
def test_the_seeds_tiering_contradiction_is_named(cells, row):
    assert any("Table 3.2" in note and "tiering" in note for note in cells[row].why())


@pytest.mark.xfail(strict=True, reason="math 8-16K: tiering is needed for memory on the seed's 8K-token budget "
                   "(its Table 3.2 pages at 16K, its Section 4 says tiering is not needed); with paging paid "
                   "once per iteration a speculative round amortises it (mean TPOT -4.6%), so at one "
                   "replication speculation earns +2.5 margin points and is the primary path, not the seed's "
                   "baseline; a near-tie: at 3 replications the paired interval reaches 0 (docs/planning.md)")
def test_math_row_reproduces(cells):
    assert cells["math-medium"].seed_agrees


@pytest.mark.parametrize("row", ["dialogue-medium", "math-medium", "summarization-very-long",
                                 "fixed-length-multi-gpu"])
def test_the_tables_disagreement_on_tpot_is_named_where_tpot_is_missed(cells, row):
    cell = cells[row]
    tpot = cell.chosen.outcome.data["p99_ms"]["tpot"]["mean"]
    notes = [n for n in cell.why() if "Table 3.3 gives" in n]
    assert (tpot > cell.sla_ms["tpot"]) == bool(notes)
