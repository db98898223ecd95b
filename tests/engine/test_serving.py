"""Serving loop: a scenario workload replayed in wall-clock time; every request ends in a sane record."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from tripath.cli.serve_parser import main
from tripath.core.errors import InputError
from tripath.core.records import COMPLETED, REJECTED
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.serving import write_records_csv
from tripath.engine.workload_replay import PromptSource, serve
from tripath.simulator.scenario.scenario import load_scenario
from tripath.simulator.scenario.workload import generate_requests

pytestmark = pytest.mark.usefixtures("one_torch_thread")


SCENARIO = """
name = "engine-replay"
description = "short replay for the engine test"
[workload]
requests = 14
[workload.arrival]
kind = "poisson"
rate_per_s = 40.0
[workload.tasks]
math = 0.5
dialogue = 0.5
[workload.prompt_tokens]
kind = "uniform"
low = 8
high = 560
[workload.output_tokens]
kind = "uniform"
low = 1
high = 12
[batching]
max_batch_size = 4
max_batched_tokens = 256
"""


@pytest.fixture(scope="module")
def scenario_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("scn") / "replay.toml"
    path.write_text(SCENARIO)
    return path


def test_replay_accounts_for_every_request(scenario_path, tmp_path):
    scenario = load_scenario(scenario_path)
    requests = generate_requests(scenario.workload, np.random.default_rng(1), 40.0)  # 3 of 14 too long
    model = LlamaModel(PRESETS["tiny-gqa"]).eval()  # max_position_embeddings = 512
    config = EngineConfig(scenario.batching.max_batch_size, scenario.batching.max_batched_tokens, 8, 200)
    engine = Engine(model, config)
    result = serve(engine, requests, PromptSource(np.random.default_rng(1), 256, path=None))
    assert [r.request_id for r in result.records] == [r.request_id for r in requests]
    too_long = {r.request_id for r in requests if r.prompt_tokens + r.output_tokens > 512}
    assert too_long, "the workload should include requests longer than the model allows"
    for spec, rec in zip(requests, result.records, strict=True):
        assert (rec.task, rec.prompt_tokens, rec.output_tokens) == (
            spec.task,
            spec.prompt_tokens,
            spec.output_tokens,
        )
        assert rec.arrival_s == spec.arrival_s
        if spec.request_id in too_long:
            assert rec.status == REJECTED and "max_position_embeddings" in rec.reject_reason
            assert math.isnan(rec.first_token_s)
        else:
            assert rec.status == COMPLETED and rec.replica == 0
            assert rec.arrival_s <= rec.admitted_s <= rec.first_token_s <= rec.finish_s
    assert max(s.batch_size for s in result.steps) <= 4
    assert max(s.num_tokens for s in result.steps) <= 256
    # every generated token of every completed request was produced by some step
    produced = sum(s.decode_seqs for s in result.steps) + sum(len(s.first_tokens) for s in result.steps)
    assert produced == sum(r.output_tokens for r in result.records if r.status == COMPLETED)
    out = tmp_path / "records.csv"
    write_records_csv(result.records, out)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == len(requests) and rows[0].keys() >= {"request_id", "first_token_s", "reject_reason"}


def test_prompt_source_cuts_and_repeats_task_prompts(tmp_path):
    path = tmp_path / "eval_prompts.jsonl"
    lines = [{"task": "math", "prompt": "1+2="}, {"task": "code", "prompt": "def f():"}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    source = PromptSource(np.random.default_rng(0), 264, path=path)
    assert source.source == "eval_prompts"
    assert source.prompt("math", 10) == list(b"1+2=1+2=1+")
    assert source.prompt("math", 2) == list(b"1+")
    assert len(source.prompt("summarization", 7)) == 7  # unknown task: any shipped prompt
    random_ids = PromptSource(np.random.default_rng(0), 264, path=None).prompt("math", 50)
    assert random_ids == PromptSource(np.random.default_rng(0), 264, path=None).prompt("math", 50)
    assert all(0 <= t < 256 for t in random_ids)
    path.write_text('{"task": "math"}\n')
    with pytest.raises(InputError, match="line 1"):
        PromptSource(np.random.default_rng(0), 264, path=path)


def test_cli_writes_records(scenario_path, tmp_path, capsys):
    out = tmp_path / "r.csv"
    steps = tmp_path / "s.csv"
    args = [
        str(scenario_path),
        "--preset",
        "tiny-mha",
        "--requests",
        "4",
        "--out",
        str(out),
        "--device",
        "cpu",
    ]
    assert main(args + ["--steps-out", str(steps), "--num-blocks", "256", "--block-size", "8"]) == 0
    assert len(list(csv.DictReader(out.open()))) == 4
    assert "wall_s" in steps.read_text().splitlines()[0]
    assert "completed" in capsys.readouterr().out


def test_engine_generate_matches_manual_loop():
    torch.manual_seed(0)
    model = LlamaModel(PRESETS["tiny-mha"]).eval()
    engine = Engine(model, EngineConfig(block_size=8, num_blocks=64))
    out = engine.generate([[1, 2, 3], [4, 5]], [3, 5])
    assert [len(o) for o in out] == [3, 5]
    assert not engine.sequences  # released
    assert engine.kv_manager.pool.num_free == 64


class FakeClock:
    """Advances 10 ms per reading and jumps forward when slept: a deterministic timeline."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        self.now += 0.01
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_idle_engine_sleeps_until_the_next_arrival():
    from tripath.core.request import RequestSpec

    model = LlamaModel(PRESETS["tiny-mha"]).eval()
    engine = Engine(model, EngineConfig(block_size=8, num_blocks=64))
    requests = [RequestSpec(0, 0.0, 5, 2), RequestSpec(1, 5.0, 4, 1)]
    clock = FakeClock()
    result = serve(engine, requests, PromptSource(np.random.default_rng(0), 256, path=None), clock, clock.sleep)
    first, second = result.records
    # request 0 ran at once (2 steps: prefill + 1 decode); then the loop slept until t = 5 s
    assert first.finish_s < 1.0 and len(clock.slept) == 1 and clock.slept[0] > 4.0
    assert 5.0 <= second.admitted_s < second.first_token_s == second.finish_s < 5.1
    assert len(result.steps) == 3
