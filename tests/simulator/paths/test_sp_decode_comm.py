"""SP communication on the wall clock: the sweep's speedup (merge priced apart) and decode_comm fit, the
simulator's decode charge, the replay clock that counts waits in collectives, and the ranks' core share."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from tests.helpers import SEED
from tripath.calibrate.samples import Sample
from tripath.calibrate.sweeps.seqpar import seqpar_section, speedup
from tripath.engine.seqpar.attention import PhaseTimes
from tripath.fidelity.seqpar_serving import RankUse, SeqParServed, SpReplayClock
from tripath.profile.cost_model import Coefficient, CostModel
from tripath.profile.sections import SequenceParallel
from tripath.simulator.paths.seqpar import SpPhysics

# SEED: sequence_parallel[2] without decode_comm
C0, C_CTX = 5.0, 0.001  # a hand-made decode communication model: ms = C0 + C_CTX * C


def _comm_model() -> CostModel:
    return CostModel("sp_merge_v1", {"m0": Coefficient(C0, "ms", "fitted", ""),
                                     "m_ctx": Coefficient(C_CTX, "ms/token", "fitted", "")},
                     ("context_tokens",), {"context_tokens": (512.0, 1024.0)})


def _with_comm(profile):
    sp = dict(profile.sequence_parallel)
    sp[2] = dataclasses.replace(sp[2], decode_comm=_comm_model())
    return dataclasses.replace(profile, sequence_parallel=sp)


def _decode(batch: float, context: float) -> float:
    return 2.0 + 0.5 * batch + 0.01 * context


def test_decode_adds_the_measured_communication():
    profile = _with_comm(SEED)
    sp = SpPhysics(profile.sequence_parallel[2])
    without = SpPhysics(SEED.sequence_parallel[2])
    got, base = sp.decode_fn(_decode)(1, 900), without.decode_fn(_decode)(1, 900)
    assert got - base == pytest.approx(C0 + C_CTX * 900, rel=1e-12)
    contexts = np.array([600.0, 900.0, 1000.0])  # the fast path's array evaluation equals the scalar one
    assert sp.decode_fn(_decode)(1, contexts).tolist() == pytest.approx([sp.decode_fn(_decode)(1, c) for c in contexts])
    assert sp.comm_source.startswith("decode_comm") and without.comm_source.startswith("none")
    assert without.decode_comm_array(contexts) == 0.0


def test_decode_comm_round_trips_and_old_sections_have_no_key():
    section = _with_comm(SEED).sequence_parallel[2]
    raw = section.to_dict()
    assert raw["decode_comm"]["coefficients"]["m0"]["value"] == C0
    assert SequenceParallel.parse(raw, None, "sp", 2) == section
    assert "decode_comm" not in SEED.sequence_parallel[2].to_dict()


def _sample(sweep: str, n: int, p: int, median: float, low: float) -> Sample:
    return Sample(sweep, 0, n, p, median, low, median + 1.0, 3)


def test_section_speedup_excludes_the_merge_and_fits_comm_to_medians():
    samples = []
    for n, one, many, merge, comm in ((512, 100.0, 62.0, 2.0, 6.0), (1024, 200.0, 115.0, 5.0, 6.5)):
        samples += [_sample("seqpar_prefill", n, 1, one + 10, one), _sample("seqpar_prefill", n, 2, many + 10, many),
                    _sample("seqpar_merge", n, 2, merge, merge - 1), _sample("seqpar_decode", n, 2, 12.0, 11.0),
                    _sample("seqpar_decode_merge", n, 2, 0.8, 0.7), _sample("seqpar_decode_comm", n, 2, comm + 3, comm)]
    sp = seqpar_section(samples, "test")[2]
    # minimum P = 1 over (minimum P = 2 less the median merge): 100 / 60 and 200 / 110
    assert [r.speedup for r in sp.rows] == pytest.approx([100 / 60, 200 / 110], rel=1e-12)
    assert [r.merge_ms for r in sp.rows] == [2.0, 5.0]
    # comm: the median over repetitions (waits vary between them on an idle machine too), not the minimum:
    # two points, a line through them: 9.0 at 512, 9.5 at 1024 -> m_ctx = 0.5 / 512, m0 = 8.5
    assert sp.decode_comm is not None
    assert sp.decode_comm.evaluate(context_tokens=512) == pytest.approx(9.0, rel=1e-6)
    assert sp.decode_comm.evaluate(context_tokens=1024) == pytest.approx(9.5, rel=1e-6)
    assert "median_ms" in sp.decode_comm.fit.data and "wall clock" in sp.note and "decode_comm" in sp.note


def test_speedup_keeps_the_whole_prefill_when_the_merge_exceeds_it():
    one, many, merge = (_sample("x", 512, p, m, m) for p, m in ((1, 10.0), (2, 6.0), (2, 7.0)))
    assert speedup(one, many, merge) == pytest.approx(10.0 / 6.0)


def test_phase_times_split_waiting_from_cpu():
    times = PhaseTimes()
    with times.communicating():
        time.sleep(0.05)  # blocked: wall time, no CPU
    assert times.comm_s >= 0.05 and times.comm_cpu_s < 0.02
    assert times.comm_wait_s == pytest.approx(times.comm_s - times.comm_cpu_s)
    times.reset()
    assert (times.comm_s, times.comm_cpu_s, times.comm_wait_s) == (0.0, 0.0, 0.0)


def test_replay_clock_counts_waits_in_collectives_and_idle_gaps():
    clock = SpReplayClock()
    first = PhaseTimes()
    clock.attach(first)
    start = clock()
    first.comm_s, first.comm_cpu_s = 0.5, 0.1  # 0.4 s blocked in collectives
    clock.sleep(2.0)
    clock.attach(PhaseTimes())  # the next sequence: the first one's waits stay counted
    elapsed = clock() - start
    assert 2.4 <= elapsed < 2.4 + 0.05  # plus only this thread's CPU time between the calls


def test_core_share_is_cpu_over_wall_outside_collectives_fewest_rank():
    busy = RankUse(wall_s=10.0, cpu_s=6.0, comm_s=5.0, comm_cpu_s=1.0)  # outside: 5 s of CPU in 5 s of wall
    starved = RankUse(wall_s=10.0, cpu_s=4.0, comm_s=2.0, comm_cpu_s=0.0)  # 4 s of CPU in 8 s
    assert busy.core_share == pytest.approx(1.0) and starved.core_share == pytest.approx(0.5)
    assert SeqParServed([], 0.0, 0.0, (busy, starved)).core_share == pytest.approx(0.5)
    assert RankUse(1.0, 0.5, 1.0, 0.5).core_share is None


def test_machine_share_caps_the_core_share_with_other_processes_cpu():
    # a 10 s window on 2 ranks: the machine was busy 16 s, the ranks' processes used 7 + 6 s, so others used
    # 3 s of the 2 x 10 s of cores the ranks needed: machine share 1 - 3 / 20 = 0.85
    rank0 = RankUse(10.0, 6.0, 5.0, 1.0, process_cpu_s=7.0, window_s=10.0, machine_busy_s=16.0)
    rank1 = RankUse(10.0, 6.0, 4.0, 0.0, process_cpu_s=6.0, window_s=10.0)
    served = SeqParServed([], 0.0, 0.0, (rank0, rank1))
    assert served.machine_share == pytest.approx(0.85)
    assert served.core_share == pytest.approx(0.85)  # both ranks had a core outside their collectives (1.0, 1.0)
    quiet = SeqParServed([], 0.0, 0.0, (dataclasses.replace(rank0, machine_busy_s=13.0), rank1))
    assert quiet.machine_share == pytest.approx(1.0) and quiet.core_share == pytest.approx(1.0)
    # no /proc/stat reading: the ranks' shares alone, as before
    assert SeqParServed([], 0.0, 0.0, (dataclasses.replace(rank0, machine_busy_s=None), rank1)).machine_share is None
