"""The optional profile fields between_prompt_sd / n_prompts and draft_prefill_ratio: how calibration computes
them from its rows (hand-computed), their validation, and profiles without them keeping their bytes."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tests.helpers import TINY as SHIPPED
from tripath.calibrate.samples import Sample
from tripath.calibrate.sweeps.prompt_spread import between_prompt_sd
from tripath.calibrate.sweeps.speculative import accept_sweep, prompt_sweep, speculative_sections
from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient
from tripath.profile.profile import Profile, Speculative, TaskAcceptance

# the shipped profile as calibrated before these fields existed (a fresh calibration has both)
TINY = dataclasses.replace(
    SHIPPED, speculative=dataclasses.replace(SHIPPED.speculative, draft_prefill_ratio=None),
    acceptance={t: dataclasses.replace(e, between_prompt_sd=None, n_prompts=None,
                                       by_k={k: dataclasses.replace(v, between_prompt_sd=None, n_prompts=None)
                                             for k, v in e.by_k.items()})
                for t, e in SHIPPED.acceptance.items()})


def test_between_prompt_sd_by_hand():
    # a_i = 0.8, 0.5, 1.0 over 10 trials each; m = 23 / 30; S^2 = ((1/30)^2 + (8/30)^2 + (7/30)^2) / 2
    sd, n = between_prompt_sd([(8, 10), (5, 10), (10, 10)])
    m = 23 / 30
    s2 = ((0.8 - 23 / 30) ** 2 + (0.5 - 23 / 30) ** 2 + (1.0 - 23 / 30) ** 2) / 2
    assert n == 3 and sd == pytest.approx(math.sqrt(s2 - m * (1 - m) / 10))
    assert sd == pytest.approx(0.21318, abs=1e-5)


def test_between_prompt_sd_edges():
    assert between_prompt_sd([(8, 10)]) is None  # one prompt: no spread to tell
    assert between_prompt_sd([(8, 10), (0, 0)]) is None  # a prompt with no trial is not judged
    # scatter within the sampling noise: 0, not a negative variance
    assert between_prompt_sd([(40, 50), (41, 50), (39, 50)]) == (0.0, 3)
    # all accepted: m = 1, nothing can spread
    assert between_prompt_sd([(10, 10), (20, 20)]) == (0.0, 2)
    # the widest possible scatter is capped below sqrt(m (1 - m)), which a Beta cannot reach
    sd, _ = between_prompt_sd([(0, 1000), (1000, 1000)])
    assert sd == pytest.approx(0.99 * 0.5)


def _rows(task: int, k: int, prompt_counts: list[tuple[int, int]], prefill: tuple[float, float]) -> list[Sample]:
    rows = [Sample("spec_target", 2, task, k, 10.0, 10.0, 10.0, 5), Sample("spec_draft", 2, task, k, 2.0, 2.0, 2.0, 5),
            Sample("spec_verify", 2, task, k, 15.0, 15.0, 15.0, 5),
            Sample(accept_sweep(k), 2, task, 0, 5, 5, 5, 10), Sample(accept_sweep(k), 2, task, 1, 8, 8, 8, 10),
            Sample("spec_prefill_target", 2, task, k, prefill[0], prefill[0], prefill[0], 3),
            Sample("spec_prefill_draft", 2, task, k, prefill[1], prefill[1], prefill[1], 3),
            Sample("spec_prefill_tokens", 2, task, k, 300, 100, 500, 3)]
    rows += [Sample(prompt_sweep(k), 2, task, i, acc, acc, acc, n) for i, (acc, n) in enumerate(prompt_counts)]
    return rows


def test_sections_carry_the_spread_and_the_prefill_ratio():
    counts = [(8, 10), (5, 10), (10, 10)]
    samples = _rows(0, 1, counts, (40.0, 6.0)) + _rows(1, 1, counts[:1], (20.0, 4.0))  # task 1: one prompt only
    spec, acceptance = speculative_sections(samples, "d", 1)
    assert acceptance["code"].between_prompt_sd == pytest.approx(between_prompt_sd(counts)[0])
    assert acceptance["code"].n_prompts == 3
    assert acceptance["dialogue"].between_prompt_sd is None  # one prompt: the field stays absent
    # median over the two (task, K) runs of draft / target prompt-pass work: 6/40 = 0.15 and 4/20 = 0.2
    assert spec.draft_prefill_ratio.value == pytest.approx(0.175)
    assert spec.prefill_ratio == pytest.approx(0.175)
    assert "100-500 tokens" in spec.draft_prefill_ratio.note
    # without the prefill rows (an older samples CSV): no ratio, the prompt pass priced at c as before
    old = [s for s in samples if not s.sweep.startswith("spec_prefill")]
    spec_old, _ = speculative_sections(old, "d", 1)
    assert spec_old.draft_prefill_ratio is None and spec_old.prefill_ratio == spec_old.cost_ratio.value == 0.2


def test_fields_round_trip_and_are_absent_from_profiles_without_them():
    raw = TINY.to_dict()
    assert "draft_prefill_ratio" not in raw["speculative"]
    assert all("between_prompt_sd" not in e for e in raw["acceptance"].values())
    code = dataclasses.replace(TINY.acceptance["code"], between_prompt_sd=0.11, n_prompts=12)
    spec = dataclasses.replace(TINY.speculative, draft_prefill_ratio=Coefficient(0.14, "target prompt passes",
                                                                                 "measured", "test"))
    both = dataclasses.replace(TINY, speculative=spec, acceptance={**TINY.acceptance, "code": code})
    again = Profile.from_dict(json.loads(json.dumps(both.to_dict())))
    assert again.acceptance["code"].between_prompt_sd == 0.11 and again.acceptance["code"].n_prompts == 12
    assert again.speculative.draft_prefill_ratio.value == 0.14
    assert again.to_dict() == both.to_dict()


@pytest.mark.parametrize("changes, field", [
    ({"between_prompt_sd": 0.1}, "between_prompt_sd"),  # without n_prompts
    ({"between_prompt_sd": 0.1, "n_prompts": 1}, "n_prompts"),
    ({"between_prompt_sd": -0.1, "n_prompts": 5}, "between_prompt_sd"),
    ({"between_prompt_sd": 0.4, "n_prompts": 5}, "between_prompt_sd"),  # mean 0.8: sqrt(0.16) = 0.4 is the cap
])
def test_bad_spread_is_refused(changes, field):
    with pytest.raises(InputError) as err:
        TaskAcceptance(0.8, 1, None, "measured", **changes)
    assert err.value.field == field


def test_bad_prefill_ratio_is_refused():
    with pytest.raises(InputError) as err:
        Speculative("d", 4, Coefficient(0.2, "target steps", "measured"), Coefficient(1.4, "target steps", "measured"),
                    draft_prefill_ratio=Coefficient(0.0, "target prompt passes", "measured"))
    assert "draft_prefill_ratio" in err.value.field
