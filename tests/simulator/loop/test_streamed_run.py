"""A streamed run (runner.simulate_recording) writes the in-memory run's records.csv and summary.json byte for byte.

The streamed run holds no records: the workload stays as arrays, records go to disk in request order as they
finish, and the summary is built from tallies folded on the way (tripath/simulator/tally.py).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.cli.inprocess import run_cli
from tests.helpers import SEED, shipped_scenario_dict
from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.core.records import RequestRecord
from tripath.profile.profile import resolve_profile
from tripath.simulator import runner
from tripath.simulator.loop.streaming import InOrder
from tripath.simulator.runner import simulate, simulate_recording, streams
from tripath.simulator.scenario.scenario import Scenario, load_scenario, scenario_from_dict
from tripath.simulator.summary import summary, write_outputs

# weights plus 1 GiB of device memory: 3,276 tokens of KV, so the trace's longest conversations are rejected
SMALL_KV_GIB = SEED.model.weight_bytes / 2**30 + 1.0


def _scenario(profile: str, requests: int, load: float, gpus: int = 1, strategy: dict | None = None,
              memory_gib: float | None = None) -> Scenario:
    data = shipped_scenario_dict("quickstart")
    data["profile"] = profile
    data["workload"]["requests"] = requests
    data["workload"]["arrival"] = {"kind": "poisson", "load_fraction": load}
    data["cluster"] = {"gpus": gpus} | ({} if memory_gib is None else {"device_memory_gib": memory_gib})
    data["sla"]["ttft_p99_ms"] = 500.0
    if strategy is not None:
        data["strategy"] = strategy
    return scenario_from_dict(data)


CASES = {  # what each case must show, so that none passes vacuously
    "overloaded": (_scenario("seed-llama2-70b-a100", 500, 1.5), {"overload"}),
    "three replicas, rejections": (_scenario("seed-llama2-70b-a100", 600, 0.8, gpus=3, memory_gib=SMALL_KV_GIB),
                                   {"rejected"}),
    "compression and SP": (_scenario("cpu-tiny", 300, 0.7, gpus=4, strategy={
        "compression": {"mode": "mixed-int4"}, "sequence_parallel": {"degree": 2}}), {"merge"}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_streamed_files_equal_the_in_memory_runs(tmp_path: Path, name: str) -> None:
    scenario, shows = CASES[name]
    profile = resolve_profile(str(scenario.profile))
    assert streams(scenario)
    memory = simulate(scenario, profile, seed=5, replications=2)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_outputs(memory, tmp_path / "a")
    streamed = simulate_recording(scenario, profile, tmp_path / "b" / "records.csv", seed=5, replications=2)
    write_outputs(streamed, tmp_path / "b")
    assert streamed.tallies is not None and all(run.records == () for run in streamed.runs)
    for file in ("records.csv", "summary.json"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes(), file
    report = summary(streamed)
    assert json.dumps(report, sort_keys=True, default=str) == json.dumps(summary(memory), sort_keys=True, default=str)
    assert report["counts"]["arrived"] == 2 * scenario.workload.requests
    assert ("overload" in report) == ("overload" in shows)
    assert (report["counts"]["rejected"] > 0) == ("rejected" in shows)
    assert (report["per_request_paths"]["merge_ms"]["mean"] > 0) == ("merge" in shows)


def test_a_streamed_run_without_a_path_writes_nothing_and_write_outputs_refuses_it(tmp_path: Path) -> None:
    scenario, _ = CASES["three replicas, rejections"]
    streamed = simulate_recording(scenario, SEED, None, seed=1)
    assert summary(streamed)["counts"]["arrived"] == scenario.workload.requests
    with pytest.raises(ValueError, match="streamed its records"):
        write_outputs(streamed, tmp_path)
    assert not (tmp_path / "records.csv").exists()


def test_what_does_not_stream_runs_in_memory() -> None:
    """The per-iteration loop, the reference replica, closed loops and time series keep their records."""
    scenario, _ = CASES["three replicas, rejections"]
    chunked = scenario_from_dict(shipped_scenario_dict("quickstart") | {"batching": {"policy": "chunked"}})
    closed = shipped_scenario_dict("quickstart")
    closed["workload"]["arrival"] = {"kind": "closed", "users": 4}
    assert not streams(chunked) and not streams(scenario_from_dict(closed))
    assert not streams(scenario, fast=False) and not streams(scenario, timeseries_interval_s=1.0)
    result = simulate_recording(chunked, SEED, None, seed=1)
    assert result.tallies is None and len(result.runs[0].records) == chunked.workload.requests


def test_the_cli_streams_and_reports_an_overload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`simulate --out` on the fast path never builds the in-memory run; it prints the overload."""
    text = (SCENARIOS_DIR / "quickstart.toml").read_text(encoding="utf-8")
    for old, new in (("requests = 300", "requests = 500"), ("load_fraction = 0.6", "load_fraction = 1.5")):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "overloaded.toml"
    path.write_text(text, encoding="utf-8")
    expected = summary(simulate(load_scenario(path), SEED, seed=0, replications=2))

    def no_memory_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the in-memory simulate ran")

    monkeypatch.setattr(runner, "simulate", no_memory_run)
    code, out, err = run_cli(["simulate", str(path), "--replications", "2", "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "OVERLOADED in 2 of 2 replication(s)" in out
    written = json.loads((tmp_path / "run" / "summary.json").read_text(encoding="utf-8"))
    assert written["overload"]["overloaded_replications"] == 2
    assert written["counts"] == expected["counts"]
    assert written["overload"]["peak_waiting"] == expected["overload"]["peak_waiting"]
    rows = (tmp_path / "run" / "records.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + 2 * 500


def test_a_full_disk_mid_stream_names_records_csv_and_leaves_nothing(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tripath.simulator.loop.streaming import RecordWriter

    written = RecordWriter.__call__

    def full_after_100_rows(self: RecordWriter, record: RequestRecord) -> None:
        if self.rows == 100:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written(self, record)

    monkeypatch.setattr(RecordWriter, "__call__", full_after_100_rows)
    out = tmp_path / "run"
    code, _, err = run_cli(["simulate", "quickstart", "--replications", "2", "--out", str(out)])
    assert code == 2 and err.strip() == f"tripath: error: {out / 'records.csv'}: the disk is full", err
    assert [p.name for p in tmp_path.iterdir()] == []  # no folder, no temp folder, no temp file


def _record(request_id: int) -> RequestRecord:
    nan = float("nan")
    return RequestRecord(request_id, "t", 0.0, 1, 1, 0, nan, nan, nan, "completed")


def test_in_order_passes_records_on_in_request_order() -> None:
    got: list[int] = []
    ordered = InOrder(lambda r: got.append(r.request_id))
    for i in (2, 0, 3, 1, 4):
        ordered(_record(i))
        if i == 3:
            assert got == [0] and ordered.held.keys() == {2, 3}
    assert got == [0, 1, 2, 3, 4] and ordered.peak_held == 2
    ordered.close(5)
    early = InOrder(lambda r: None)
    for i in (0, 1, 3):
        early(_record(i))
    with pytest.raises(AssertionError, match="2 of 4, 1 still held"):
        early.close(4)


def test_streamed_ledger_holds_no_times_for_waiting_requests() -> None:
    """An overloaded run's waiting requests cost the ledger nothing beyond the arrays: its dicts hold only
    admitted requests in flight (at most the batch limit), while thousands wait."""
    from tripath.simulator.loop.streaming import RequestArrays, StreamingCluster
    from tripath.simulator.scenario.workload import generate_arrays

    scenario = _scenario("seed-llama2-70b-a100", 3000, 1.5)
    run = runner._setup(scenario, SEED)
    arrays = RequestArrays(*generate_arrays(scenario.workload, np.random.default_rng(0), run.rate))
    most = 0
    cluster: StreamingCluster

    def sink(record: RequestRecord) -> None:
        nonlocal most
        most = max(most, len(cluster.ledger.admitted), len(cluster.ledger.first_token))

    cluster = StreamingCluster(arrays, run.config, run.costs.cost.fresh(), sink)
    result = cluster.run()
    assert result.peak_in_flight > 500  # thousands waited ...
    assert 0 < most <= scenario.batching.max_batch_size  # ... the dicts held the batch only
