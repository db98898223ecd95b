"""Queueing theory: with max_batch_size = 1 a replica is an M/G/1 FCFS queue.

Service time of a request = its prefill iteration + (output - 1) decode iterations. With
prefill 10 ms and decode 5 ms (no length dependence) it is S = 10 + 5 (O - 1) ms, and the
queueing delay (admitted - arrival) is the M/G/1 waiting time, whose mean is Pollaczek–Khinchine:

    W = lambda E[S^2] / (2 (1 - rho)),   rho = lambda E[S]
    deterministic service (M/D/1):  W = rho / (2 mu (1 - rho))

The check: the theory's mean lies within the 95% Student-t interval of the replications' mean
waits (each replication: its own Poisson stream; the first requests of each are included, and
the empty-start bias is far below the interval at these lengths).
"""

from __future__ import annotations

import numpy as np
import pytest

from tripath.core import metrics
from tripath.core.metrics import estimate
from tripath.core.request import RequestSpec
from tripath.simulator.capacity import saturation
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig

PREFILL_MS, DECODE_MS = 10.0, 5.0


def service_cost() -> IterationCost:
    return IterationCost.linear(PREFILL_MS, 0.0, DECODE_MS, 0.0, 0.0)


def mean_waits(rate: float, outputs: np.ndarray, n: int, replications: int, seed: int) -> list[float]:
    """Mean queueing delay of each replication; output lengths drawn uniformly from ``outputs``."""
    config = ClusterConfig(1, ReplicaConfig(1, 8192, 10**9, kv_bytes_per_token=1))
    waits = []
    for child in np.random.SeedSequence(seed).spawn(replications):
        rng = np.random.default_rng(child)
        arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
        lengths = rng.choice(outputs, n)
        requests = [RequestSpec(i, float(arrivals[i]), 100, int(lengths[i])) for i in range(n)]
        result = simulate_requests(requests, config, service_cost())
        waits.append(float(metrics.latencies(result.records, "queueing").mean()))
    return waits


def test_md1_mean_wait():
    service_s = (PREFILL_MS + 2 * DECODE_MS) / 1000.0  # three output tokens: 20 ms
    mu = 1.0 / service_s
    rho = 0.7
    theory = rho / (2.0 * mu * (1.0 - rho))  # 23.3 ms
    ci = estimate(mean_waits(rho * mu, np.array([3]), n=4000, replications=10, seed=1))
    assert ci["ci_low"] <= theory <= ci["ci_high"]
    assert ci["ci_high"] - ci["ci_low"] < 0.25 * theory  # the interval is tight enough to mean something


def test_mg1_pollaczek_khinchine_mean_wait():
    outputs = np.arange(1, 10)  # uniform on 1..9 -> S uniform on {10, 15, ..., 50} ms
    service = (PREFILL_MS + DECODE_MS * (outputs - 1)) / 1000.0
    mean_s, mean_s2 = service.mean(), (service**2).mean()  # 30 ms, 1066.7 ms^2
    rho = 0.6
    rate = rho / mean_s
    theory = rate * mean_s2 / (2.0 * (1.0 - rho))  # 26.7 ms
    assert theory == pytest.approx(0.0266667, rel=1e-4)
    ci = estimate(mean_waits(rate, outputs, n=4000, replications=10, seed=2))
    assert ci["ci_low"] <= theory <= ci["ci_high"]
    assert ci["ci_high"] - ci["ci_low"] < 0.25 * theory


class LinearProfile:
    """A profile-shaped object for capacity.saturation: the same round-number costs, KV per token."""

    class model:  # noqa: N801 - mirrors profile.model
        kv_bytes_per_token = 1

    def prefill_ms(self, new_tokens: float, context_tokens: float) -> float:
        return 10.0 + 0.01 * new_tokens

    def decode_ms(self, batch: float, total_context: float) -> float:
        return 5.0 + 1.0 * batch + 0.001 * total_context


def test_saturation_estimate_hand_computed_and_close_to_simulated_throughput():
    # P = 1000, O = 51: B* = min(64, floor(5000 / 1051)) = 4
    sat = saturation(LinearProfile(), 1000, 51, replicas=1, max_batch_size=64, kv_capacity_bytes=5000)
    assert sat.batch == 4
    context = 4 * (1000 + 52 / 2)  # 4104 tokens
    # 50 decodes at B = 4, plus four prefills' variable part
    ms = 50 * (5 + 4 + 0.001 * context) + 4 * (0.01 * 1000)
    assert sat.requests_per_s == pytest.approx(1000 * 4 / ms, rel=1e-12)
    # Overloaded (requests all waiting from the start): the simulated throughput is the saturation rate.
    n = 2000
    requests = [RequestSpec(i, 0.0, 1000, 51) for i in range(n)]
    config = ClusterConfig(1, ReplicaConfig(64, 8192, 5000, kv_bytes_per_token=1))
    cost = IterationCost.linear(10.0, 0.01, 5.0, 1.0, 0.001)
    result = simulate_requests(requests, config, cost)
    measured = metrics.throughput(result.records)["requests_per_s"]
    assert measured == pytest.approx(sat.requests_per_s, rel=0.03)
