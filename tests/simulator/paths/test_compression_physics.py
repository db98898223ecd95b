"""KV-compression physics: bytes per token, admissible batch, decode overhead, the acceptance coupling."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tests.helpers import SEED, TINY
from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.compression import CompressionPhysics
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep
from tripath.simulator.scenario.strategy import CompressionSpec, SpeculativeSpec, StrategySpec, TieredSpec
from tripath.simulator.step_model import Decode

# TINY: measured modes: int8, int4, mixed-int4, window


def _step(profile, strategy, tasks=("code",), seed=0):
    return PathStep(RunCosts.from_profile(profile, strategy, list(tasks), profile.kv_capacity_bytes),
                    np.random.default_rng(seed))


def _with_mode(profile, name, **values):
    """``profile`` with a compression mode whose coefficients are ``values`` (unit given as unit_<field>)."""
    fields = {}
    for field in ("kv_bytes_ratio", "decode_overhead_ratio", "quality_loss", "acceptance_drop"):
        neutral = 1.0 if field in ("kv_bytes_ratio", "decode_overhead_ratio") else 0.0  # unit "ratio": x 1
        fields[field] = Coefficient(values.get(field, neutral),
                                    values.get(f"unit_{field}", "ratio"), "derived", "test mode")
    mode = dataclasses.replace(next(iter(TINY.compression.values())), decode_extra=None, **fields)
    return dataclasses.replace(profile, compression={**profile.compression, name: mode})


@pytest.mark.parametrize("mode", ["int8", "int4", "mixed-int4", "window"])
def test_compression_raises_the_admissible_tokens_by_one_over_ratio(mode):
    ratio = TINY.compression[mode].kv_bytes_ratio.value
    base = _step(TINY, StrategySpec(speculative=SpeculativeSpec()))  # any path on, full-precision KV
    comp = _step(TINY, StrategySpec(compression=CompressionSpec(mode)))
    assert comp.kv_bytes_per_token == math.ceil(3072 * ratio)
    # 1 / ratio more tokens, less the rounding of bytes per token up to a whole byte
    assert comp.device_kv_tokens / base.device_kv_tokens == pytest.approx(1 / ratio, rel=1 / (3072 * ratio))


def test_step_ratio_multiplies_the_decode_step():
    # without decode_extra (a profile from before the (batch, context) grid): the ratio prices the step
    tiny = dataclasses.replace(TINY, compression={**TINY.compression, "int8": dataclasses.replace(
        TINY.compression["int8"], decode_extra=None)})
    r = tiny.compression["int8"].decode_overhead_ratio.value  # unit "ratio": step with int8 / without
    cost = IterationCost.from_profile(tiny)
    step = _step(tiny, StrategySpec(compression=CompressionSpec("int8")))
    result = step.step([], [Decode(0, 0, 1000, 4), Decode(1, 0, 3000, 4)], 4000)
    plain_ms = float(cost.decode_ms(2, 6016))  # measured profile: real_engine reads 2 x 3000 in 16-token blocks
    # the served step's host work outside the forward (costs.step_overhead) is not scaled by the ratio
    assert result.seconds == pytest.approx((r * plain_ms + cost.overhead_ms(2, 2)) / 1000, rel=1e-9)


def test_fraction_overhead_applies_to_the_attention_part():
    profile = _with_mode(SEED, "int4x", kv_bytes_ratio=0.25, decode_overhead_ratio=0.2,
                         unit_decode_overhead_ratio="1")
    step = _step(profile, StrategySpec(compression=CompressionSpec("int4x")), tasks=("dialogue",))
    result = step.step([], [Decode(0, 0, 8000, 4)], 8000)
    fixed, attention = 2.15916 + 0.884316, 0.00964886 * 8000  # seed decode_v1 at B = 1, S = 8000
    assert result.seconds == pytest.approx((fixed + 1.2 * attention) / 1000, rel=1e-9)
    assert step.kv_bytes_per_token == 327_680 // 4 and step.device_kv_tokens == 4 * 8192


def test_compression_pages_fewer_bytes():
    profile = _with_mode(SEED, "half", kv_bytes_ratio=0.5)
    plain = _step(SEED, StrategySpec(tiered=TieredSpec()), tasks=("dialogue",))
    half = _step(profile, StrategySpec(tiered=TieredSpec(), compression=CompressionSpec("half")),
                 tasks=("dialogue",))
    # 24,500 live: 16K off the full-precision device, 8K off the compressed one (it holds 16K), at half the bytes
    # (whole chunks: ceil(16,308 / 256) = 64 and ceil(8,116 / 256) = 32 chunks; no chunk boundary crossed)
    moved_plain = plain.step([], [Decode(0, 0, 24_500, 4)], 24_500).paging_bytes["device_host"]
    moved_half = half.step([], [Decode(0, 0, 24_500, 4)], 24_500).paging_bytes["device_host"]
    assert moved_plain == 16_384 * 327_680
    assert moved_half == 8192 * 163_840


def test_acceptance_drop_lowers_tokens_per_round():
    profile = _with_mode(SEED, "lossy", kv_bytes_ratio=0.5, acceptance_drop=0.2)
    on = StrategySpec(speculative=SpeculativeSpec(), compression=CompressionSpec("lossy"))
    step = _step(profile, on, tasks=("dialogue",), seed=4)
    decodes = [Decode(i, 0, 100, 1000) for i in range(40_000)]
    emitted = step.step([], decodes, 4_000_000).emitted
    a = 0.75 - 0.2  # dialogue's seed acceptance minus the drop
    expected = (1 - a**6) / (1 - a)
    assert abs(emitted.mean() - expected) < 4 * emitted.std(ddof=1) / math.sqrt(len(emitted))


def test_unknown_mode_names_the_field_and_the_profile():
    with pytest.raises(ValueError, match=r"strategy\.compression\.mode: mode 'int2' not measured.*int8"):
        _step(TINY, StrategySpec(compression=CompressionSpec("int2")))


def test_quality_loss_is_carried():
    assert CompressionPhysics("int8",
                              TINY.compression["int8"]).quality_loss == TINY.compression["int8"].quality_loss.value


def test_zero_step_ratio_is_an_input_error():
    profile = _with_mode(SEED, "free", decode_overhead_ratio=0.0)
    with pytest.raises(InputError, match=r"compression\.free\.decode_overhead_ratio: .* must be > 0"):
        CompressionPhysics("free", profile.compression["free"])


def test_attention_ratio_multiplies_the_attention_part_by_the_value():
    # unit "attention_ratio": attention time with the mode / without, so attention x value (here below 1)
    mode = dataclasses.replace(_with_mode(SEED, "int8x", decode_overhead_ratio=0.53,
                                          unit_decode_overhead_ratio="attention_ratio").compression["int8x"],
                               prefill_overhead_ratio=None, prefill_overhead_points=())  # a published GPU mode's
    physics = CompressionPhysics("int8x", mode)

    def decode(batch, total_context):  # a small cost model: 10 ms fixed, 2 ms a sequence, 0.01 ms a cached token
        return 10.0 + 2.0 * batch + 0.01 * total_context

    compressed = physics.decode_fn(decode)
    assert compressed(4, 1000) == pytest.approx(10.0 + 8.0 + 0.53 * 10.0, rel=1e-12)
    assert compressed(1, 0) == decode(1, 0)  # no context: nothing to read, nothing saved
    many = compressed(2, np.array([0.0, 500.0, 2000.0]))  # the fast path's arrays
    assert many == pytest.approx(14.0 + 0.53 * 0.01 * np.array([0.0, 500.0, 2000.0]), rel=1e-12)
    assert physics.prefill_fn(decode) is decode  # prefill unchanged (no prefill fields)


def test_attention_ratio_through_a_step_on_the_seed():
    profile = _with_mode(SEED, "int8x", kv_bytes_ratio=0.5, decode_overhead_ratio=0.5,
                         unit_decode_overhead_ratio="attention_ratio")
    step = _step(profile, StrategySpec(compression=CompressionSpec("int8x")), tasks=("dialogue",))
    result = step.step([], [Decode(0, 0, 8000, 4)], 8000)
    fixed, attention = 2.15916 + 0.884316, 0.00964886 * 8000  # seed decode_v1 at B = 1, S = 8000
    assert result.seconds == pytest.approx((fixed + 0.5 * attention) / 1000, rel=1e-9)


def test_zero_attention_ratio_is_an_input_error():
    profile = _with_mode(SEED, "free", decode_overhead_ratio=0.0, unit_decode_overhead_ratio="attention_ratio")
    with pytest.raises(InputError, match=r"compression\.free\.decode_overhead_ratio: .*'attention_ratio'.* > 0"):
        CompressionPhysics("free", profile.compression["free"])
