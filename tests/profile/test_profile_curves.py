"""The profile's optional per-K and per-chunk-size sections: round trip, accessors, old profiles unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient, CostModel
from tripath.profile.inspect import format_show
from tripath.profile.profile import PagingLink, Profile, Speculative, TaskAcceptance, load_profile, resolve_profile


def _coef(v: float) -> Coefficient:
    return Coefficient(v, "target steps", "measured", "test")


def _spec(by_k: dict[int, float]) -> Speculative:
    return Speculative("draft", 4, _coef(0.2), _coef(by_k.get(4, 1.6)), None, "",
                       {k: _coef(v) for k, v in by_k.items()})


def _acc(k: int, mean: float) -> TaskAcceptance:
    return TaskAcceptance(mean, k, tuple([mean] * k), "measured")


def _paging(bandwidth_gbps: float, setup_ms: float = 0.01) -> CostModel:
    coefs = {"setup_ms": Coefficient(setup_ms, "ms", "fitted", ""),
             "bandwidth_gbps": Coefficient(bandwidth_gbps, "GB/s", "fitted", "")}
    return CostModel("paging_v1", coefs, ("bytes",), {"bytes": (0.0, 1e6)})


def test_verify_at_interpolates_between_measured_k() -> None:
    spec = _spec({1: 1.2, 2: 1.4, 4: 1.6, 6: 2.0})
    assert spec.verify_at(4) == 1.6
    assert spec.verify_at(3) == pytest.approx(1.5)  # halfway between 1.4 and 1.6
    assert spec.verify_at(5) == pytest.approx(1.8)
    assert spec.verify_at(8) == pytest.approx(2.4)  # last segment's slope 0.2 per K
    low = _spec({2: 1.4, 4: 1.6})
    assert low.verify_at(1) == pytest.approx(1.2)  # from v(0) = 1 to v(2) = 1.4
    flat = _spec({2: 1.4, 4: 1.3})
    assert flat.verify_at(8) == pytest.approx(1.3)  # a falling last segment is held at the largest K's value


def test_verify_at_without_sweep_is_the_single_value() -> None:
    spec = Speculative("draft", 4, _coef(0.2), _coef(1.6))
    assert [spec.verify_at(k) for k in (1, 4, 8)] == [1.6, 1.6, 1.6]
    assert "verify_by_k" not in spec.to_dict()


def test_acceptance_at_picks_exact_or_nearest_k() -> None:
    base = TaskAcceptance(0.8, 4, None, "measured", "", {k: _acc(k, m) for k, m in
                                                          ((1, 0.9), (2, 0.85), (4, 0.8), (6, 0.7))})
    assert base.at(2).mean == 0.85
    assert base.at(3).mean == 0.85  # tie between 2 and 4: the smaller K
    assert base.at(8).mean == 0.7
    assert base.at(5).k == 4
    single = TaskAcceptance(0.8, 4, None, "measured")
    assert single.at(1) is single


def test_acceptance_by_k_must_agree_with_the_entry() -> None:
    with pytest.raises(InputError, match="by_k.4.mean"):
        TaskAcceptance(0.8, 4, None, "measured", "", {4: _acc(4, 0.5)})
    with pytest.raises(InputError, match="by_k.3"):
        TaskAcceptance(0.8, 4, None, "measured", "", {3: _acc(2, 0.5)})


def test_paging_cost_for_chunk_size() -> None:
    link = PagingLink(_paging(10.0), 1.0, {64: _paging(2.0), 1024: _paging(20.0)})
    assert link.cost_for(None) is link.cost
    assert link.cost_for(64).values()["bandwidth_gbps"] == 2.0
    assert link.cost_for(128).values()["bandwidth_gbps"] == 2.0  # log2 distance 1 vs 3
    assert link.cost_for(512).values()["bandwidth_gbps"] == 20.0


def test_profile_with_curves_round_trips() -> None:
    base = resolve_profile("seed-llama2-70b-a100")
    acc = {t: dataclasses.replace(a, by_k={1: _acc(1, 0.9), a.k: dataclasses.replace(a, by_k={}, note="")})
           for t, a in base.acceptance.items()}
    assert base.speculative is not None
    spec = dataclasses.replace(base.speculative, verify_by_k={1: _coef(1.1), 8: _coef(2.5)})
    prof = dataclasses.replace(base, speculative=spec, acceptance=acc)
    again = Profile.from_dict(json.loads(prof.to_json()))
    assert again.to_json() == prof.to_json()
    assert again.verify_cost_ratio(8) == 2.5
    assert again.acceptance_for("math", 1).mean == 0.9
    with pytest.raises(InputError, match="acceptance.poetry"):
        again.acceptance_for("poetry", 1)
    text = format_show(again)  # `tripath profile show` prints the curves
    assert "v(K) per K: 1: 1.1, 8: 2.5 [measured]" in text and "  a per K: 1: 0.9, 5: " in text


def test_old_profiles_load_and_fall_back() -> None:
    """A single-K profile (the seed, written before the K sweep) reads the same values at every K."""
    seed = resolve_profile("seed-llama2-70b-a100")
    assert seed.speculative is not None
    v = seed.speculative.verify_cost_ratio.value
    assert [seed.verify_cost_ratio(k) for k in (1, 5, 8)] == [v, v, v]
    for task, entry in seed.acceptance.items():
        assert seed.acceptance_for(task, 7) is entry
    assert "by_k" not in seed.to_json() and "verify_by_k" not in seed.to_json()


def test_bad_by_k_key_names_the_field(tmp_path: Path) -> None:
    raw = json.loads(resolve_profile("seed-llama2-70b-a100").to_json())
    raw["speculative"]["verify_by_k"] = {"two": _coef(1.0).to_dict()}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(InputError, match="speculative.verify_by_k.two"):
        load_profile(path)
