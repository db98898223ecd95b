"""SP decode priced per batch: where a section has decode_rows, a decode step's merge and communication are
its rows interpolated at the iteration's batch (not the context models), in the price and in the booked merge."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import SEED, shipped_scenario_dict
from tripath.profile.sections import SequenceParallel, SpDecodeRow
from tripath.simulator.paths.provenance import strategies
from tripath.simulator.paths.seqpar import SpPhysics
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict

# (batch, merge_ms, comm_ms), made up: comm 4 ms at batch 1, 6 at 4, 10 at 16
ROWS = (SpDecodeRow(1, 0.01, 4.0), SpDecodeRow(4, 0.04, 6.0), SpDecodeRow(16, 0.16, 10.0))


def _with_rows(profile):
    sp = dict(profile.sequence_parallel)
    sp[2] = dataclasses.replace(sp[2], decode_rows=ROWS)
    return dataclasses.replace(profile, sequence_parallel=sp)


def _decode(batch: float, context: float) -> float:
    return 2.0 + 0.5 * batch + 0.01 * context


def test_decode_interpolates_the_rows_at_the_batch():
    sp = SpPhysics(_with_rows(SEED).sequence_parallel[2])
    # batch 2: a third of the way from 1 to 4: merge 0.02, comm 4 + 2/3; attention 0.01 x 900 split over 2
    assert sp.decode_fn(_decode)(2, 900) == pytest.approx(2.0 + 1.0 + 4.5 + 0.02 + 4.0 + 2.0 / 3.0, rel=1e-12)
    assert sp.decode_fn(_decode)(64, 0) == pytest.approx(2.0 + 32.0 + 0.16 + 10.0, rel=1e-12)  # end row held
    contexts = np.array([600.0, 900.0, 1000.0])  # the fast path's array evaluation equals the scalar one
    assert sp.decode_fn(_decode)(4, contexts).tolist() == pytest.approx([sp.decode_fn(_decode)(4, c) for c in contexts])
    assert sp.decode_merge_array(contexts, 4).tolist() == [0.04] * 3
    assert sp.merge_source.startswith("decode_rows") and sp.comm_source.startswith("decode_rows")
    assert sp.merge_ms(30_000) == SpPhysics(SEED.sequence_parallel[2]).merge_ms(30_000)  # prefill unchanged
    with pytest.raises(ValueError, match="batch"):
        sp.decode_comm_array(900)


def test_rows_round_trip_must_increase_and_old_sections_have_no_key():
    section = _with_rows(SEED).sequence_parallel[2]
    raw = section.to_dict()
    assert raw["decode_rows"][1] == {"batch": 4, "merge_ms": 0.04, "comm_ms": 6.0}
    assert SequenceParallel.parse(raw, None, "sp", 2) == section
    assert "decode_rows" not in SEED.sequence_parallel[2].to_dict()
    raw["decode_rows"] = raw["decode_rows"][::-1]
    with pytest.raises(ValueError, match="decode_rows: batch must be strictly increasing"):
        SequenceParallel.parse(raw, "p.json", "sequence_parallel.2", 2)


def _tpot_ms(records) -> float:
    return 1000.0 * float(np.mean([(r.finish_s - r.first_token_s) / (r.output_tokens - 1) for r in records]))


def test_booked_merge_and_decode_steps_follow_the_batch_rows():
    data = shipped_scenario_dict("fixed-length-multi-gpu-sp")
    data["workload"]["requests"] = 6
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 50}
    scenario = scenario_from_dict(data)
    base = simulate(scenario, SEED, seed=2).runs[0].records
    rows = simulate(scenario, _with_rows(SEED), seed=2).runs[0].records
    slower = tuple(dataclasses.replace(r, comm_ms=r.comm_ms + 5.0) for r in ROWS)
    sp = dict(SEED.sequence_parallel)
    sp[2] = dataclasses.replace(sp[2], decode_rows=slower)
    more = simulate(scenario, dataclasses.replace(SEED, sequence_parallel=sp), seed=2).runs[0].records
    assert all(r.status == "completed" for r in rows + more)
    # the seed charges its prefill merge model (ms at the context) for every decode step; the rows charge
    # 0.01-0.16 ms a step, so each request books less merge time
    assert all(r.merge_s < b.merge_s for r, b in zip(rows, base, strict=True))
    # 5 ms more communication in every row: every decode step, so every time per output token, 5 ms longer
    assert _tpot_ms(more) - _tpot_ms(rows) == pytest.approx(5.0, rel=1e-6)


def test_the_summary_names_the_rows():
    data = shipped_scenario_dict("fixed-length-multi-gpu-sp")
    numbers = strategies(scenario_from_dict(data), _with_rows(SEED))["sequence_parallel"]["numbers_from"]
    entry = next(n for n in numbers if n["field"] == "sequence_parallel.2.decode_rows")
    assert entry["value"] == 3 and entry["batch"] == [1, 16] and entry["source"] == "seed"
    plain = strategies(scenario_from_dict(data), SEED)["sequence_parallel"]["numbers_from"]
    assert not any(n["field"].endswith("decode_rows") for n in plain)


def test_fast_path_loop_and_reference_agree_with_rows():
    data = shipped_scenario_dict("quickstart")
    data["workload"]["requests"] = 60
    data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 2.0}
    data["cluster"] = {"gpus": 4}
    data["strategy"] = {"sequence_parallel": {"degree": 2}}
    scenario, profile = scenario_from_dict(data), _with_rows(SEED)
    fast = simulate(scenario, profile, seed=3)
    loop = simulate(scenario, profile, seed=3, timeseries_interval_s=1.0)
    reference = simulate(scenario, profile, seed=3, fast=False)
    assert (fast.loop, loop.loop) == ("replica", "stepper")
    records = [run.runs[0].records for run in (fast, loop, reference)]
    assert {r.replica for r in records[0]} == {0, 1} and all(r.completed for r in records[0])
    plain = [[dataclasses.replace(r, merge_s=0.0) for r in rs] for rs in records]
    assert plain[0] == plain[1] == plain[2]
    # merge_s is summed in another order by each loop: equal to float rounding; the rows' merge is what is booked
    for x, y, z in zip(*records, strict=True):
        assert x.merge_s > 0
        assert x.merge_s == pytest.approx(y.merge_s, rel=1e-12) and x.merge_s == pytest.approx(z.merge_s, rel=1e-12)
