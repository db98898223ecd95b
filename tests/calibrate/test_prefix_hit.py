"""The prefix-hit sweep (tripath/calibrate/sweeps/prefix_hit.py): its steps have the shapes it claims, and
prefill_v1 prices a hit and a whole prompt by hand."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import TINY
from tripath.calibrate.samples import Sample
from tripath.calibrate.sweeps.prefix_hit import HIT, MISS, measure_prefix_hits, prefix_checks
from tripath.calibrate.timer import TimerConfig
from tripath.core.data_dirs import MODELS_DIR
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.profile.cost_model import Coefficient, CostModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _prefill(c0: float, c_tok: float, c_attn: float) -> CostModel:
    coefficients = {name: Coefficient(value, "ms", "seed", "") for name, value in
                    (("c0", c0), ("c_tok", c_tok), ("c_attn", c_attn))}
    return CostModel("prefill_v1", coefficients, ("new_tokens", "context_tokens"),
                     {"new_tokens": (1.0, 1024.0), "context_tokens": (0.0, 1024.0)})


def test_checks_price_the_hit_as_a_chunk_over_the_cached_prefix() -> None:
    """T = 32 after C = 256: 1 + 0.1 x 32 + 0.001 x 32 x (256 + 16.5) = 12.92 ms; the whole 288-token prompt:
    1 + 28.8 + 0.001 x 288 x 144.5 = 71.416 ms, so the hit saves 58.496 ms by prefill_v1."""
    samples = [Sample(HIT, 0, 32, 256, 10.0, 9.0, 11.0, 3), Sample(MISS, 0, 288, 0, 60.0, 59.0, 61.0, 3),
               Sample(HIT, 0, 64, 512, 5.0, 5.0, 5.0, 1)]  # no whole-prompt row: left out
    (check,) = prefix_checks(samples, _prefill(1.0, 0.1, 0.001))
    assert (check.new_tokens, check.cached_tokens, check.hit_ms, check.miss_ms) == (32, 256, 10.0, 60.0)
    assert check.hit_predicted_ms == pytest.approx(12.92, rel=1e-12)
    assert check.miss_predicted_ms == pytest.approx(71.416, rel=1e-12)
    assert (check.saved_ms, check.saved_predicted_ms) == (50.0, pytest.approx(58.496, rel=1e-12))
    # with cpu-tiny's step overhead (o0 + o_seq N + o_tok T, N = 1): it adds to each step its own T's share
    costs = TINY.costs
    with_overhead = prefix_checks(samples, costs["prefill"], costs["step_overhead"])[0]
    alone = prefix_checks(samples, costs["prefill"])[0]
    o = {n: c.value for n, c in costs["step_overhead"].coefficients.items()}
    assert with_overhead.hit_predicted_ms - alone.hit_predicted_ms == pytest.approx(
        o["o0"] + o["o_seq"] + o["o_tok"] * 32, rel=1e-9)
    assert with_overhead.miss_predicted_ms - alone.miss_predicted_ms == pytest.approx(
        o["o0"] + o["o_seq"] + o["o_tok"] * 288, rel=1e-9)
    with pytest.raises(ValueError, match="prefill_v1"):
        prefix_checks(samples, TINY.costs["decode"])


def test_sweep_on_the_tiny_model_serves_hits_of_the_stated_shape() -> None:
    model = load_checkpoint(str(MODELS_DIR / "tiny-target"))[1].to(torch.float32)
    samples = measure_prefix_hits(model, TimerConfig(warmup=1, reps=2), points=((16, 64), (8, 128)))
    # the sweep itself refuses a step whose StepRecord.chunk_shapes is not ((C, T),) / ((0, C + T),)
    assert [(s.sweep, s.x1, s.x2, s.reps) for s in samples] == [
        (HIT, 16, 64, 2), (MISS, 80, 0, 2), (HIT, 8, 128, 2), (MISS, 136, 0, 2)]
    assert all(0 < s.min_ms <= s.median_ms <= s.max_ms for s in samples)
    with pytest.raises(ValueError, match="multiple of 16"):
        measure_prefix_hits(model, TimerConfig(0, 1), points=((8, 20),))
