"""tripath/engine/batching_policy.py Windowed through the one replay loop: static and dynamic groups form exactly when
tripath/simulator/loop/batching.py's rule says.

The engine is real (a random-weight tiny preset); only time is virtual: every engine step costs
0.1 s of a clock the loop reads, and sleeping advances that clock, so the timeline is exact.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tripath.core.request import RequestSpec
from tripath.engine.batching_policy import Windowed
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.step_record import StepRecord
from tripath.engine.workload_replay import PromptSource, serve

STEP_S = 0.1


class VirtualClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


class TimedEngine(Engine):
    """The real engine; each step also advances the virtual clock by STEP_S."""

    def __init__(self, clock: VirtualClock, model: LlamaModel, config: EngineConfig) -> None:
        super().__init__(model, config, torch.Generator().manual_seed(0))
        self.clock = clock

    def step(self) -> StepRecord:
        rec = super().step()
        self.clock.t += STEP_S
        return rec


def run(joins: bool) -> dict[int, tuple[float, float, float]]:
    # A at 0.00, B at 0.05, C at 0.12, D at 0.13; 3 output tokens each (a prefill step, 2 decode steps)
    requests = [RequestSpec(i, t, 5, 3, "default") for i, t in enumerate((0.0, 0.05, 0.12, 0.13))]
    model = LlamaModel(PRESETS["tiny-target"], torch.Generator().manual_seed(0))
    clock = VirtualClock()
    engine = TimedEngine(clock, model, EngineConfig(4, 8192, 16, 64))
    prompts = PromptSource(np.random.default_rng(0), model.config.vocab_size, path=None)
    result = serve(engine, requests, prompts, clock, clock.sleep, False, Windowed(4, 0.1, joins))
    return {r.request_id: (r.admitted_s, r.first_token_s, r.finish_s) for r in result.records}


def test_static_group_waits_for_its_window_and_runs_alone() -> None:
    # t=0.1: A's window closes -> {A, B} (C, D not yet arrived); steps 0.1-0.2, 0.2-0.3, 0.3-0.4.
    # C and D wait for the empty engine: at 0.4 C has waited past its window -> {C, D}, done at 0.7.
    times = run(joins=False)
    for rid in (0, 1):
        assert times[rid] == pytest.approx((0.1, 0.2, 0.4))
    for rid in (2, 3):
        assert times[rid] == pytest.approx((0.4, 0.5, 0.7))


def test_dynamic_group_joins_the_running_batch_when_it_fills_the_free_places() -> None:
    # At the 0.2 boundary C and D fill the 2 free places: they join; prefill 0.2-0.3, done at 0.5.
    times = run(joins=True)
    for rid in (0, 1):
        assert times[rid] == pytest.approx((0.1, 0.2, 0.4))
    for rid in (2, 3):
        assert times[rid] == pytest.approx((0.2, 0.3, 0.5))


def test_bad_settings_are_refused() -> None:
    model = LlamaModel(PRESETS["tiny-target"], torch.Generator().manual_seed(0))
    engine = Engine(model, EngineConfig(4, 8192, 16, 64))
    prompts = PromptSource(np.random.default_rng(0), model.config.vocab_size, path=None)
    with pytest.raises(ValueError, match="max_wait_s"):
        serve(engine, [], prompts, warmup=False, batching=Windowed(4, -1.0, True))
