"""scripts/measurements/step_residuals.py: a served step's shape, priced as the simulator prices it, checked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers import load_script
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.simulator.costs import IterationCost
from tripath.simulator.step_model import BaselineStep

sr = load_script("scripts/measurements/step_residuals.py")

# prefill ms = 2 + 0.1 T (context ignored); decode ms = 3 + 0.5 B + 0.01 S; padded to 16-token blocks
PRE = (2.0, 0.1)
DEC = (3.0, 0.5, 0.01)


def _model(block_tokens: int | None = 16) -> BaselineStep:
    cost = IterationCost(lambda t, c: PRE[0] + PRE[1] * t, lambda b, s: DEC[0] + DEC[1] * b + DEC[2] * s,
                         block_tokens=block_tokens)
    return BaselineStep(cost, 1, 1 << 30)


def test_decode_only_priced_at_padded_keys() -> None:
    # contexts cached + 1 = 20 and 40: padded to ceil(40 / 16) * 16 = 48 keys each, 96 in all
    seconds, overhead = sr.price(_model(), ((19, 1), (39, 1)))
    assert seconds == pytest.approx((3.0 + 0.5 * 2 + 0.01 * 96) / 1000.0)
    assert overhead == 0.0
    seconds, _ = sr.price(_model(None), ((19, 1), (39, 1)))  # unpadded: Σ contexts = 60
    assert seconds == pytest.approx((3.0 + 0.5 * 2 + 0.01 * 60) / 1000.0)


def test_mixed_and_prefill_priced_as_shared_pass_plus_token_work() -> None:
    # one decode (context 10 -> 16 padded keys) with a 30-token prompt: decode + (prefill(30) - prefill(0))
    seconds, _ = sr.price(_model(), ((9, 1), (0, 30)))
    assert seconds == pytest.approx((3.0 + 0.5 + 0.16 + 0.1 * 30) / 1000.0)
    # prefill only, two chunks (one continues a prompt: chunked_s): fixed once + each chunk's token work
    seconds, _ = sr.price(_model(), ((0, 30), (64, 20)))
    assert seconds == pytest.approx((2.0 + 0.1 * 30 + 0.1 * 20) / 1000.0)


def test_kinds_and_summary_ratios() -> None:
    assert sr.kind_of(1, 0) == "decode B=1"
    assert sr.kind_of(3, 0) == "decode B=2-4"
    assert sr.kind_of(0, 2) == "prefill"
    assert sr.kind_of(2, 1) == "mixed"
    model = _model()
    rows = [sr.row_for(model, ((15, 1),), 0.006, 0.008), sr.row_for(model, ((15, 1),), 0.004, 0.004),
            sr.row_for(model, ((0, 30),), 0.010, 0.012)]
    s = sr.summarize(rows)
    priced_dec = (3.0 + 0.5 + 0.16) / 1000.0
    assert s["decode B=1"]["steps"] == 2
    assert s["decode B=1"]["thread_median"] == pytest.approx(0.005 / priced_dec)
    assert s["decode B=1"]["wall_sum_ratio"] == pytest.approx(0.012 / (2 * priced_dec))
    assert s["decode B=1"]["busy_share"] == pytest.approx(0.012 / 0.024)
    assert s["prefill"]["thread_mean"] == pytest.approx(0.010 / ((2.0 + 3.0) / 1000.0))
    assert s["all"]["core_share"] == pytest.approx(0.020 / 0.024)
    assert math.isclose(sum(v["busy_share"] for k, v in s.items() if k != "all"), 1.0)


@pytest.mark.usefixtures("one_torch_thread")
def test_engine_records_each_sequence_cached_and_new_tokens() -> None:
    model = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()
    engine = Engine(model, EngineConfig(4, 64, 16, 32), torch.Generator().manual_seed(0))
    engine.add_request(list(range(5)), 3)
    engine.add_request(list(range(12)), 2)
    shapes = []
    while engine.has_unfinished:
        shapes.append(engine.step().chunk_shapes)
    # step 1: both prompts whole; then one token each after what is cached; request 1 stops after 2 tokens
    assert shapes == [((0, 5), (0, 12)), ((5, 1), (12, 1)), ((6, 1),)]
