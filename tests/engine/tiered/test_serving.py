"""`tripath serve --tiered`: a timed workload replayed through the continuous-batching Engine on tiered KV."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch

from tripath.cli.serve_parser import main
from tripath.core.records import COMPLETED, REJECTED
from tripath.engine.batching_policy import Continuous, Windowed
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.tier_config import TierConfig
from tripath.engine.workload_replay import PromptSource, serve
from tripath.simulator.scenario.scenario import load_scenario
from tripath.simulator.scenario.workload import generate_requests

SCENARIO = """
name = "tiered-replay"
description = "short replay with tiering on"
[workload]
requests = 10
[workload.arrival]
kind = "poisson"
rate_per_s = 200.0
[workload.tasks]
dialogue = 1.0
[workload.prompt_tokens]
kind = "uniform"
low = 100
high = 400
[workload.output_tokens]
kind = "uniform"
low = 2
high = 8
[batching]
max_batch_size = 4
max_batched_tokens = 256
"""
TIER_FLAGS = ["--chunk-tokens", "16", "--device-pages", "48", "--host-pages", "8", "--ssd-pages", "2000",
              "--window-tokens", "32"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture()
def scenario_path(tmp_path):
    path = tmp_path / "replay.toml"
    path.write_text(SCENARIO)
    return path


def test_cli_serves_with_tiering_and_reports_paging_per_step(scenario_path, tmp_path, capsys):
    out, steps, ssd = tmp_path / "r.csv", tmp_path / "s.csv", tmp_path / "ssd"
    args = [str(scenario_path), "--preset", "tiny-gqa", "--out", str(out), "--steps-out", str(steps),
            "--device", "cpu", "--tiered", "--ssd-dir", str(ssd), *TIER_FLAGS]
    assert main(args) == 0
    records = list(csv.DictReader(out.open()))
    assert len(records) == 10 and all(r["status"] == COMPLETED for r in records)
    rows = list(csv.DictReader(steps.open()))
    assert {"paging_bytes_host_ssd", "paging_s_ssd_host", "paging_stall_s"} <= rows[0].keys()
    assert sum(int(r["paging_bytes_host_ssd"]) for r in rows) > 0  # the replay really used the SSD tier
    assert sum(int(r["paging_bytes_ssd_host"]) for r in rows) > 0
    assert ssd.is_dir() and not list(ssd.iterdir())  # the tier's temp directory is gone after the run
    assert "10 completed" in capsys.readouterr().out


def test_bad_tier_flags_are_usage_errors(scenario_path, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:  # refused by the flag's type, before the model loads
        main([str(scenario_path), "--preset", "tiny-gqa", "--device", "cpu", "--tiered", "--device-pages", "-3",
              "--out", str(tmp_path / "r.csv")])
    assert exited.value.code == 2
    assert "argument --device-pages" in capsys.readouterr().err
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.parametrize("batching", [Continuous(), Windowed(4, 0.01, joins=True), Windowed(4, 0.01, joins=False)],
                         ids=["continuous", "dynamic", "static"])
def test_a_tier_fault_becomes_a_record_with_the_reason_and_the_replay_goes_on(scenario_path, tmp_path, batching):
    blocker = tmp_path / "file"
    blocker.write_text("a regular file where the SSD directory should be")
    scenario = load_scenario(scenario_path)
    requests = generate_requests(scenario.workload, np.random.default_rng(3), 200.0)
    model = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(0)).eval()
    tiers = TierConfig(16, 48, 8, 2000, str(blocker / "kv"), window_tokens=32)
    with Engine(model, EngineConfig(4, 256, 16, 1, tiered=tiers)) as engine:
        result = serve(engine, requests, PromptSource(np.random.default_rng(1), 256, path=None), warmup=False,
                       batching=batching)
    failed = [r for r in result.records if r.status == REJECTED]
    done = [r for r in result.records if r.status == COMPLETED]
    assert failed and done  # the requests that spilled to the SSD failed, the others completed
    for r in failed:
        assert r.reject_reason.startswith("tier fault: TierUnwritable") and math.isnan(r.finish_s)
    assert {r.request_id for r in failed} == {rid for s in result.steps for rid in s.failed}
