"""RunTally folds records into what tripath/core/metrics.py computes over the whole list, bit for bit, and
measures the waiting queue as its definition says (a brute-force count over the records)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tests.helpers import SEED, shipped_scenario_dict
from tripath.core import metrics
from tripath.core.records import RequestRecord, rejected_record
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.tally import OVERLOAD_MIN_ARRIVALS, RunTally, tally_records

TARGETS = (400.0, 60.0, 20_000.0)  # ttft, tpot, e2e ms: each met by some requests and missed by others


def _run(requests: int, load: float, gpus: int = 1, memory_gib: float | None = None) -> tuple:
    data = shipped_scenario_dict("quickstart")
    data["workload"]["requests"] = requests
    data["workload"]["arrival"] = {"kind": "poisson", "load_fraction": load}
    data["cluster"] = {"gpus": gpus} | ({} if memory_gib is None else {"device_memory_gib": memory_gib})
    run = simulate(scenario_from_dict(data), SEED, seed=2).runs[0]
    return run.records, run.replicas


def _same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float):
        return a.hex() == b.hex()
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _one_token(records: tuple[RequestRecord, ...]) -> list[RequestRecord]:
    """The records with every 7th completed request turned into a one-token answer (no TPOT)."""
    return [dataclasses.replace(r, output_tokens=1) if r.completed and i % 7 == 0 else r
            for i, r in enumerate(records)]


@pytest.mark.parametrize("targets", [TARGETS, (None, None, None), (None, 60.0, None)])
def test_the_tally_equals_the_metrics_over_the_list(targets: tuple) -> None:
    records, replicas = _run(400, 0.9, gpus=2, memory_gib=SEED.model.weight_bytes / 2**30 + 1.0)
    records = _one_token(records)
    assert any(not r.completed for r in records) and any(r.output_tokens == 1 for r in records)
    tally = tally_records(records, *targets)
    for metric in metrics.LATENCY_METRICS:
        assert tally.latencies(metric).tobytes() == metrics.latencies(records, metric).tobytes(), metric
    assert tally.counts() == metrics.counts(records)
    attained = metrics.sla_attainment(records, *targets)
    assert _same(tally.attainment(), attained) and list(tally.attainment()) == list(attained)
    if targets[0] is not None:
        assert 0.0 < attained["ttft"] < 1.0 and 0.0 < attained["all"] < 1.0  # the terms discriminate
    assert _same(tally.throughput(), metrics.throughput(records))
    assert _same(tally.utilisation(replicas), metrics.utilisation(records, replicas))
    assert tally.makespan() == metrics.makespan(records)


def test_a_run_with_nothing_completed() -> None:
    records = [rejected_record(i, "t", float(i), 10, 10, "too big") for i in range(3)]
    tally = tally_records(records, *TARGETS)
    assert tally.counts() == metrics.counts(records) == {"arrived": 3, "completed": 0, "rejected": 3}
    assert _same(tally.throughput(), metrics.throughput(records))  # NaN: no makespan
    assert _same(tally.attainment(), metrics.sla_attainment(records, *TARGETS))
    assert tally.latencies("ttft").size == 0 and dict(tally.reasons) == {"too big": 3}
    assert tally.path_means() == {"draft_rounds": 0.0, "accepted_tokens": 0.0, "paging_ms": 0.0, "merge_ms": 0.0,
                                  "preemptions": 0.0}
    assert _same(tally_records([]).attainment(), {"ttft": None, "tpot": None, "e2e": None, "all": None})


def _waiting(records: list[RequestRecord] | tuple[RequestRecord, ...]) -> np.ndarray:
    """W(i) = #{j <= i completed: admitted_j > arrival_i}, counted pair by pair."""
    arrival = np.array([r.arrival_s for r in records])
    admitted = np.array([r.admitted_s if r.completed else -math.inf for r in records])
    return np.array([int(np.sum(admitted[: i + 1] > arrival[i])) for i in range(len(records))])


@pytest.mark.parametrize(("load", "overloaded"), [(0.6, False), (1.5, True)])
def test_the_waiting_queue_is_its_definition(load: float, overloaded: bool) -> None:
    records, _ = _run(1200, load)
    tally = tally_records(records)
    waiting = _waiting(records)
    middle = (len(records) - 1) // 2
    assert tally.peak_waiting == waiting.max() > 0
    assert tally.queue_growth == (waiting[-1] - waiting[middle]) / (len(records) - 1 - middle)
    assert tally.overloaded == overloaded


def test_a_short_or_unordered_run_says_nothing_of_a_trend() -> None:
    records, _ = _run(2 * OVERLOAD_MIN_ARRIVALS - 2, 2.0)  # overloaded, but too few arrivals after the middle
    short = tally_records(records)
    assert short.peak_waiting > 0 and short.queue_growth == 0.0 and not short.overloaded
    records, _ = _run(1200, 1.5)
    assert tally_records(records).overloaded
    swapped = list(records)
    swapped[100], swapped[700] = swapped[700], swapped[100]
    assert swapped[100].arrival_s > swapped[101].arrival_s
    unordered = RunTally(len(swapped))
    for r in swapped:
        unordered.add(r)
    assert not unordered.queue_measured and not unordered.overloaded
