"""The adaptive batching controller (AIMD) holds the P99 under the SLA where fixed limits do not.

Costs are IterationCost.linear: decode 10 + 1 x B ms, so TPOT is about 10 + B ms and the TPOT
target of 30 ms allows batches of about 20. Before the load step (5 req/s) the batch stays small
under any limit; after it (16 req/s, near the 64-batch saturation of ~17 req/s) a fixed limit
of 64 lets the batch grow to ~40 and TPOT to ~50 ms. Workloads are seeded: deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from tripath.core import metrics
from tripath.core.request import RequestSpec
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.adaptive_batching import Adaptive, AimdController, AimdSettings
from tripath.simulator.loop.batching import Windowed
from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.loop.stepper import StepperSetup
from tripath.simulator.step_model import BaselineStep


def serve(requests: list[RequestSpec], policy) -> list:
    def cost() -> IterationCost:
        return IterationCost.linear(5.0, 0.01, 10.0, 1.0, 0.0)

    setup = StepperSetup(lambda i: BaselineStep(cost(), 1, 1 << 30), lambda i: policy)
    config = ClusterConfig(1, ReplicaConfig(64, 1 << 20, 1 << 30, 1))
    return list(simulate_requests(requests, config, cost(), setup=setup).records)


def arrivals(seed: int, phases: list[tuple[int, float]]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.cumsum(np.concatenate([rng.exponential(1.0 / rate, n) for n, rate in phases]))


def p99_ms(records: list, metric: str) -> float:
    return float(np.percentile(metrics.latencies(records, metric), 99.0)) * 1000.0


def test_batch_size_backs_off_after_a_load_step() -> None:
    times = arrivals(1, [(300, 5.0), (900, 16.0)])
    step = float(times[300])
    requests = [RequestSpec(i, float(t), 100, 50) for i, t in enumerate(times)]
    fixed = serve(requests, Windowed(64, 0.0, joins=True))
    controller = AimdController(AimdSettings(64, 0.0, (("tpot", 0.030),)))
    adaptive = serve(requests, Adaptive(controller))
    # Before the step the controller never moves (the P99 is far below the target): same records.
    assert all(t > step for t, _, _ in controller.history)
    assert [r.finish_s for r in fixed[:300]] == [r.finish_s for r in adaptive[:300]]
    settled = step + 10.0  # after the first back-off has worked through the running batch

    def late(records: list) -> list:
        return [r for r in records if r.arrival_s >= settled]

    assert p99_ms(late(fixed), "tpot") > 40.0
    assert p99_ms(late(adaptive), "tpot") <= 30.0
    sizes = [b for _, b, _ in controller.history]
    assert min(sizes) < 20 and sizes[-1] > min(sizes)  # backed off below ~20, then probed up additively


def test_wait_window_shrinks_when_ttft_breaks_the_sla() -> None:
    """A 200 ms window at low load makes every request wait it; the controller halves it away."""
    times = arrivals(2, [(400, 4.0)])
    requests = [RequestSpec(i, float(t), 100, 10) for i, t in enumerate(times)]
    fixed = serve(requests, Windowed(64, 0.200, joins=True))
    controller = AimdController(AimdSettings(64, 0.200, (("ttft", 0.100),), wait_step_s=0.001))
    adaptive = serve(requests, Adaptive(controller))
    assert p99_ms(fixed, "ttft") > 200.0
    after = [r for r in adaptive if r.arrival_s > controller.history[1][0]]  # two back-offs in
    assert p99_ms(after, "ttft") <= 100.0
    assert controller.history[0][2] == pytest.approx(0.100)


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        AimdSettings(64, 0.0, ())
    with pytest.raises(ValueError):
        AimdSettings(64, 0.0, (("tpot", 0.03),), decrease=1.0)
