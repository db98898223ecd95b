"""docs/gpu_validation.md is what the shipped profiles give: its generated block is recomputed here.

The stages' scenarios are checked by hand against the measured runs' settings (reference/vllm-h100-serving.md)."""

from __future__ import annotations

import pytest

from tests.helpers import load_script
from tripath.planning.validation.tables import render_tables
from tripath.planning.validation.vllm_serving import STAGES, StageResult, stage_scenario
from tripath.simulator.scenario.scenario import scenario_from_dict


@pytest.mark.slow  # 79 s on a loaded 2-core machine
def test_the_doc_holds_the_recomputed_tables() -> None:
    script = load_script("scripts/gpu_validation.py")
    text = script.DOC.read_text(encoding="utf-8")
    block = text.split(script.START, 1)[1].split(script.END, 1)[0].strip("\n")
    assert block == render_tables(), "docs/gpu_validation.md is stale: run scripts/gpu_validation.py --write"


def test_a_stage_is_simulated_with_the_measured_runs_settings() -> None:
    general = STAGES[0]
    scenario = scenario_from_dict(stage_scenario(general), None)
    workload, batching = scenario.workload, scenario.batching
    # inference-perf's "constant" load drew exponential gaps; it cycled 100 prompts, which vLLM V1 cached
    assert workload.arrival.kind == "poisson" and workload.arrival.rate_per_s == 8.0 and workload.duration_s == 600
    assert workload.prefix.kind == "cycle" and workload.prefix.prompts == 100
    assert scenario.strategy.prefix_cache is not None and scenario.strategy.prefix_cache.block_tokens == 16
    assert (workload.prompt_tokens.low, workload.prompt_tokens.high) == (559, 589)  # measured prompt_len min, max
    assert workload.output_tokens.kind == "fixed" and workload.output_tokens.value == 248  # ignore_eos
    assert (batching.policy, batching.max_batch_size, batching.max_batched_tokens) == ("chunked", 128, 2048)
    assert scenario.cluster.gpus == 4
    assert sum(s.overloaded for s in STAGES) == 1 and len(STAGES) == 6  # 4 workloads, 7 stages less the summary


def test_errors_are_relative_and_per_token_is_twice_the_reported_tpot() -> None:
    stage = STAGES[0]
    result = StageResult(stage, (55.2 * 1.5, 63.2, 121.0), (18.54, 18.9, 2 * 12.8 * 0.5), stage.e2e_ms, 1955.0, 1, 0.0)
    errors = result.errors()
    assert abs(errors["ttft"][0] - 0.5) < 1e-12
    assert abs(errors["per_token"][0]) < 1e-12 and abs(errors["per_token"][2] + 0.5) < 1e-12
    assert errors["e2e"] == (0.0, 0.0, 0.0) and result.throughput_error == 0.0
