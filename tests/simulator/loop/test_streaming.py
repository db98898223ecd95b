"""The streamed baseline cluster gives cluster.py's records bit for bit, holding only requests in flight."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from tests.helpers import bits
from tripath.core.request import RequestSpec
from tripath.profile.profile import resolve_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.loop.streaming import RequestArrays, StreamingCluster, stream_requests
from tripath.simulator.runner import arrival_rate, cluster_config
from tripath.simulator.scenario.scenario import load_scenario
from tripath.simulator.scenario.workload import generate_arrays, generate_requests


def arrays_of(requests: list[RequestSpec]) -> RequestArrays:
    names = sorted({r.task for r in requests})
    return RequestArrays(np.array([r.arrival_s for r in requests]), np.array([r.prompt_tokens for r in requests]),
                         np.array([r.output_tokens for r in requests]), names,
                         np.array([names.index(r.task) for r in requests]))


@pytest.mark.parametrize(("replicas", "rate", "kv_tokens"), [(1, 8.0, 3000), (3, 30.0, 2500), (2, 4.0, 1 << 20)])
def test_streamed_records_equal_the_cluster(replicas: int, rate: float, kv_tokens: int) -> None:
    rng = np.random.default_rng(replicas)
    n = 500
    arrivals = np.cumsum(np.floor(rng.exponential(1.0 / rate, n) * 1024) / 1024)  # collisions on ticks
    requests = [RequestSpec(i, float(arrivals[i]), int(rng.integers(1, 3000)), int(rng.integers(1, 300)),
                            "code" if i % 3 else "chat") for i in range(n)]
    config = ClusterConfig(replicas, ReplicaConfig(16, 1024, kv_tokens * 2, 2))

    def cost() -> IterationCost:
        return IterationCost.linear(12.5, 0.02, 7.0, 0.35, 0.00013)

    expected = simulate_requests(requests, config, cost())
    got: list = []
    streamed = StreamingCluster(arrays_of(requests), config, cost(), got.append).run()
    assert bits(sorted(got, key=lambda r: r.request_id)) == bits(expected.records)
    assert streamed.replicas == expected.replicas
    assert streamed.extrapolations == expected.extrapolations and streamed.events == expected.events
    assert streamed.completed + streamed.rejected == n
    assert (streamed.rejected > 0) == (kv_tokens < 3300)  # prompt + output reach 3298 tokens
    assert streamed.peak_in_flight < n  # only requests in flight are held


def test_stream_to_csv_from_arrays(tmp_path) -> None:
    """generate_arrays draws what generate_requests draws; the CSV holds every record, exactly."""
    profile = resolve_profile("seed-llama2-70b-a100")
    scenario = load_scenario("quickstart")
    config, _ = cluster_config(scenario, profile)
    rate, _, _ = arrival_rate(scenario, profile, config)
    requests = generate_requests(scenario.workload, np.random.default_rng(5), rate)
    arrays = RequestArrays(*generate_arrays(scenario.workload, np.random.default_rng(5), rate))
    expected = simulate_requests(requests, config, IterationCost.from_profile(profile))
    path = tmp_path / "records.csv"
    result = stream_requests(arrays, config, IterationCost.from_profile(profile), path)
    with open(path, newline="") as handle:
        rows = sorted(csv.DictReader(handle), key=lambda row: int(row["request_id"]))
    assert len(rows) == len(expected.records) == result.completed + result.rejected
    for row, record in zip(rows, expected.records, strict=True):
        assert float(row["finish_s"]) == record.finish_s and float(row["first_token_s"]) == record.first_token_s
        assert (row["task"], int(row["replica"])) == (record.task, record.replica)
    assert [p.name for p in tmp_path.iterdir()] == ["records.csv"]  # no temp file left
