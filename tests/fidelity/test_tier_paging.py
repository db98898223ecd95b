"""The engine side's tiered paging per request (tripath/fidelity/tier_paging.py): the stall of page moves beyond the
stall of a step that moves nothing, fitted in the same run, by hand."""

from __future__ import annotations

import pytest

from tripath.engine.step_record import StepRecord
from tripath.fidelity.tier_paging import move_stall_ms_per_request, resident_baseline


def _step(batch: int, context: int, stall_s: float, moved_bytes: int = 0) -> StepRecord:
    return StepRecord(0, 0.0, 0.01, batch, batch, 0, 0, batch, context, 0, 0, (), (), (),
                      paging_bytes_host_device=moved_bytes, paging_stall_s=stall_s)


# resident steps on an exact plane: 0.1 ms per sequence + 0.0004 ms per token attended
RESIDENT = [_step(1, 500, 1e-4 + 500 * 4e-7), _step(2, 900, 2e-4 + 900 * 4e-7), _step(4, 1000, 4e-4 + 1000 * 4e-7)]


def test_baseline_is_the_resident_steps_plane() -> None:
    per_seq, per_token = resident_baseline(RESIDENT)
    assert per_seq == pytest.approx(1e-4, rel=1e-9)
    assert per_token == pytest.approx(4e-7, rel=1e-9)


def test_move_stall_per_request_by_hand() -> None:
    """Two steps move pages: batch 1 at 1,100 tokens stalls 6 ms (baseline 0.1 + 0.44 = 0.54 ms: 5.46 ms
    counted, x 1 sequence), batch 2 at 1,500 tokens stalls 0.5 ms (baseline 0.2 + 0.6 = 0.8 ms: below it,
    counted 0). Resident steps count nothing. Two completed requests: 5.46 / 2 = 2.73 ms."""
    steps = [*RESIDENT, _step(1, 1100, 6e-3, moved_bytes=131_072), _step(2, 1500, 5e-4, moved_bytes=131_072)]
    assert move_stall_ms_per_request(steps, 2) == pytest.approx(2.73, rel=1e-9)
    assert move_stall_ms_per_request(RESIDENT, 2) == 0.0
    assert move_stall_ms_per_request(steps, 0) is None


def test_negative_part_is_refitted_alone() -> None:
    """Resident stalls that fall with the batch at fixed tokens would give a negative per-sequence part: the
    per-token part alone is fitted instead (both coefficients >= 0)."""
    steps = [_step(1, 1000, 1.0e-3), _step(4, 1000, 0.9e-3), _step(2, 2000, 2.0e-3)]
    per_seq, per_token = resident_baseline(steps)
    assert per_seq >= 0.0 and per_token >= 0.0
    assert per_seq * 2 + per_token * 2000 == pytest.approx(1.9e-3, rel=0.1)
