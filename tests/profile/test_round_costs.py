"""speculative.round_costs: a round's cost by batch and context from two step curves; hand-computed values, the
JSON round trip, and one clear error per malformed field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tripath.core.errors import InputError
from tripath.profile.profile import Coefficient, load_profile, resolve_profile, save_profile
from tripath.profile.speculative import RoundCosts, Speculative, StepCurve

ATTN = Coefficient(0.001, "ms/token", "fitted", "test")
TARGET = StepCurve("t", 1, ((1, 10.0), (5, 10.0), (25, 30.0)), ATTN, "published", "test")
DRAFT = StepCurve("d", 1, ((1, 1.0), (25, 3.4)), Coefficient(0.0001, "ms/token", "derived", "test"), "derived",
                  "test")
ROUNDS = RoundCosts(TARGET, DRAFT, "test")


def test_curve_is_piecewise_linear_flat_below_and_extends_its_last_segment() -> None:
    assert TARGET.linear_ms(1) == 10.0 and TARGET.linear_ms(0.5) == 10.0
    assert TARGET.linear_ms(15) == pytest.approx(20.0)  # halfway from (5, 10) to (25, 30)
    assert TARGET.linear_ms(35) == pytest.approx(40.0)  # the last segment's slope 1 ms/token
    assert TARGET.pass_ms(15, 2000) == pytest.approx(20.0 + 2.0)


def test_ratios_by_batch_and_context_by_hand() -> None:
    # B = 5, S = 2000: plain = target(5) + 2 = 12; verify K = 4: target(25) + 2 = 32; draft(5) + 0.2 = 1.4 + 0.2
    assert ROUNDS.verify_ms(5, 0, 2000) == pytest.approx(12.0)
    assert ROUNDS.verify_ratio(4, 5, 2000) == pytest.approx(32.0 / 12.0)
    assert ROUNDS.cost_ratio(5, 2000) == pytest.approx(1.6 / 12.0)
    assert ROUNDS.round_factor(4, 5, 2000) == pytest.approx((4 * 1.6 + 32.0) / 12.0)
    assert ROUNDS.round_factor(4, 5, 2000, draft=False) == pytest.approx(32.0 / 12.0)
    assert ROUNDS.round_factor(0, 5, 2000) == 1.0
    # batch 1: the verify of 5 tokens costs one step on this curve (flat to T = 5)
    assert ROUNDS.verify_ratio(4, 1, 2000) == pytest.approx(1.0)


def _with_rounds(spec: Speculative) -> Speculative:
    return dataclasses.replace(spec, round_costs=ROUNDS)


def test_section_round_trips_through_save_and_load(tmp_path: Path) -> None:
    seed = resolve_profile("seed-llama2-70b-a100")
    profile = dataclasses.replace(seed, speculative=_with_rounds(seed.speculative))
    path = tmp_path / "p.json"
    save_profile(profile, path)
    back = load_profile(path)
    assert back.speculative.round_costs == ROUNDS
    assert back.to_json() == path.read_text()
    assert "round_costs" not in seed.to_json()  # absent: omitted, so shipped files keep their bytes


@pytest.mark.parametrize(("edit", "field", "problem"), [
    (lambda rc: rc["target"].update(points=[[1, 2.0], [1, 3.0]]), "speculative.round_costs.target.points[1][0]",
     "tokens must increase"),
    (lambda rc: rc["draft"].update(points=[[1, 2.0]]), "speculative.round_costs.draft.points", "at least 2"),
    (lambda rc: rc["draft"]["points"][0].append(3), "speculative.round_costs.draft.points[0]", "a pair"),
    (lambda rc: rc["target"]["attention_per_token"].update(unit="ms"),
     "speculative.round_costs.target.attention_per_token.unit", "ms/token"),
    (lambda rc: rc["target"].update(points=[[1, 0.0], [2, 3.0]]), "speculative.round_costs.target.points[0][1]",
     "> 0"),
    (lambda rc: rc.pop("draft"), "speculative.round_costs.draft", "missing"),
])
def test_malformed_section_names_file_and_field(tmp_path: Path, edit, field: str, problem: str) -> None:
    seed = resolve_profile("seed-llama2-70b-a100")
    raw = json.loads(dataclasses.replace(seed, speculative=_with_rounds(seed.speculative)).to_json())
    edit(raw["speculative"]["round_costs"])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(InputError) as err:
        load_profile(path)
    assert err.value.field == field and problem in str(err.value) and str(path) in str(err.value)


def test_round_costs_and_round_per_sequence_together_are_refused() -> None:
    seed = resolve_profile("seed-llama2-70b-a100")
    w = Coefficient(0.3, "target steps", "measured", "test")
    with pytest.raises(InputError, match="give one"):
        dataclasses.replace(_with_rounds(seed.speculative), round_per_sequence=w)
