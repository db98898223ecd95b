"""SP decode steps are charged the profile's decode_merge (one query's partials per layer) when it has one,
the prefill merge model otherwise; both the price and the booked merge time per request follow it."""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers import SEED
from tripath.profile.cost_model import Coefficient, CostModel
from tripath.simulator.paths.seqpar import SpPhysics

# SEED: sequence_parallel[2]: rows + prefill merge, no decode_merge
D0, D_CTX = 0.9, 0.0001  # a hand-made decode merge model: ms = D0 + D_CTX * C


def _with_decode_merge(profile):
    model = CostModel("sp_merge_v1", {"m0": Coefficient(D0, "ms", "fitted", ""),
                                      "m_ctx": Coefficient(D_CTX, "ms/token", "fitted", "")},
                      ("context_tokens",), {"context_tokens": (512.0, 1024.0)})
    sp = dict(profile.sequence_parallel)
    sp[2] = dataclasses.replace(sp[2], decode_merge=model)
    return dataclasses.replace(profile, sequence_parallel=sp)


def _decode(batch: float, context: float) -> float:
    return 2.0 + 0.5 * batch + 0.01 * context  # fixed 2 + 0.5 B, attention 0.01 per cached token


def test_decode_uses_decode_merge_and_prefill_keeps_its_model():
    profile = _with_decode_merge(SEED)
    sp = SpPhysics(profile.sequence_parallel[2])
    got = sp.decode_fn(_decode)(4, 30_000)
    assert got == pytest.approx(2.0 + 0.5 * 4 + 0.01 * 30_000 / 2 + D0 + D_CTX * 30_000, rel=1e-12)
    prefill_merge = profile.sequence_parallel[2].merge.evaluate(context_tokens=30_000)
    assert sp.merge_ms(30_000) == pytest.approx(prefill_merge, rel=1e-12)  # prefill chunks: unchanged
    assert sp.decode_merge_array(30_000) == pytest.approx(D0 + D_CTX * 30_000, rel=1e-12)
    assert sp.merge_source.startswith("decode_merge")


def test_without_decode_merge_the_prefill_merge_is_charged_and_said():
    sp = SpPhysics(SEED.sequence_parallel[2])
    merge = SEED.sequence_parallel[2].merge.evaluate(context_tokens=30_000)
    assert sp.decode_fn(_decode)(4, 30_000) == pytest.approx(2.0 + 2.0 + 150.0 + merge, rel=1e-12)
    assert "no decode_merge" in sp.merge_source


def test_decode_merge_round_trips_and_old_sections_have_no_key():
    old = SEED.sequence_parallel[2]
    assert "decode_merge" not in old.to_dict()  # an old profile writes back unchanged
    new = _with_decode_merge(SEED).sequence_parallel[2]
    again = type(new).parse(new.to_dict(), None, "sequence_parallel.2", 2)
    assert again.decode_merge is not None and again.decode_merge.evaluate(context_tokens=1000) == pytest.approx(
        D0 + D_CTX * 1000, rel=1e-12)
