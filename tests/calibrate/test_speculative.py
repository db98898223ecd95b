"""The speculative sweep (tasks x K) on tiny random models: rows land in the samples CSV, the profile's
speculative and acceptance sections (per K too) are filled and consistent with the counts, and a rerun
resumes."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from tripath.calibrate.samples import Sample, SampleLog, read_samples
from tripath.calibrate.sweeps.spec_batch import BATCH_SWEEPS
from tripath.calibrate.sweeps.speculative import (
    PREFILL_SWEEPS,
    SpecSettings,
    accept_sweep,
    measure_speculative,
    prompt_sweep,
    speculative_sections,
)
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel

SETTINGS = SpecSettings(k=3, prompts=2, new_tokens=12, ks=(1, 2))  # K grid 1, 2, 3


@pytest.fixture(scope="module")
def swept(tmp_path_factory, one_torch_thread):
    target = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()
    prompts = {"code": [[1, 5, 9, 13, 2, 7], [1, 3, 3, 3, 8]], "math": [[1, 4, 4, 6, 6, 10, 12]]}
    path = tmp_path_factory.mktemp("spec") / "x.samples.csv"
    # the target drafting for itself must have every draft accepted: a = 1 exactly (greedy)
    with SampleLog.open(path, {"t": 1}) as log:
        measured = measure_speculative(target, target, prompts, SETTINGS, log)
    return path, measured, target, prompts


def test_rows_and_sections(swept):
    path, measured, _, _ = swept
    assert measured == 2 * 3  # 2 tasks x 3 Ks
    samples = read_samples(path)
    assert {s.sweep for s in samples} == {"spec_target", "spec_draft", "spec_verify", *PREFILL_SWEEPS,
                                          *(accept_sweep(k) for k in (1, 2, 3)), *(prompt_sweep(k) for k in (1, 2, 3)),
                                          *BATCH_SWEEPS}  # rounds at batch B (tripath/calibrate/sweeps/spec_batch.py)
    spec, acceptance = speculative_sections(samples, "self", SETTINGS.k)
    assert set(acceptance) == {"code", "math"}
    for acc in acceptance.values():
        assert acc.mean == 1.0 and acc.per_position == (1.0, 1.0, 1.0) and acc.k == 3
        assert acc.source == "measured"
        assert sorted(acc.by_k) == [1, 2, 3]
        for k, entry in acc.by_k.items():  # the target drafting for itself: every draft accepted at every K
            assert entry.k == k and entry.mean == 1.0 and entry.per_position == (1.0,) * k
    # per-prompt counts: every prompt's own a is 1, so no spread; math has one prompt: no estimate
    assert acceptance["code"].between_prompt_sd == 0.0 and acceptance["code"].n_prompts == 2
    assert acceptance["code"].by_k[1].n_prompts == 2
    assert acceptance["math"].between_prompt_sd is None and acceptance["math"].n_prompts is None
    assert spec is not None and spec.k == 3
    assert sorted(spec.verify_by_k) == [1, 2, 3]
    assert spec.verify_by_k[3].value == spec.verify_cost_ratio.value
    # the draft IS the target here: a draft pass costs about one target step; a verify of K+1 = 4 tokens
    # costs at least as much as a single-token pass (not far below it even with timing noise)
    assert 0.3 < spec.cost_ratio.value < 3.0
    assert spec.verify_cost_ratio.value > 0.5
    json.dumps(spec.to_dict())  # serialisable


def test_per_k_values_are_what_the_rows_say(swept):
    """v(K) in the profile is the median over tasks of verify(K) / plain step timed in the same run."""
    path, _, _, _ = swept
    samples = read_samples(path)
    spec, _ = speculative_sections(samples, "self", SETTINGS.k)
    rows = {s.key: s for s in samples}
    layers = samples[0].layers
    for k in (1, 2, 3):
        ratios = [rows[("spec_verify", layers, t, k)].median_ms / rows[("spec_target", layers, t, k)].median_ms
                  for t in {s.x1 for s in samples if s.sweep == "spec_target"}]
        assert spec.verify_by_k[k].value == pytest.approx(statistics.median(ratios))


def _synthetic(task: int, k: int, verify_ms: float, accepted: list[int], drafts: int, rejections: int) -> list[Sample]:
    rows = [Sample("spec_target", 2, task, k, 10.0, 10.0, 10.0, 5), Sample("spec_draft", 2, task, k, 2.0, 2.0, 2.0, 5),
            Sample("spec_verify", 2, task, k, verify_ms, verify_ms, verify_ms, 5),
            Sample(accept_sweep(k), 2, task, 0, rejections, rejections, rejections, drafts)]
    proposed = drafts
    for i, a in enumerate(accepted, start=1):
        rows.append(Sample(accept_sweep(k), 2, task, i, a, a, a, proposed))
        proposed = a
    return rows


def test_sections_from_hand_made_rows():
    """Hand-computed: v(K) = verify / plain step; a = accepted / (accepted + rejections) per K."""
    samples = (_synthetic(0, 1, 12.0, [8], 10, 2) + _synthetic(0, 2, 13.0, [8, 6], 10, 4)
               + _synthetic(0, 4, 16.0, [9, 7, 7, 5], 10, 5))
    spec, acceptance = speculative_sections(samples, "d", 4)
    assert {k: c.value for k, c in spec.verify_by_k.items()} == pytest.approx({1: 1.2, 2: 1.3, 4: 1.6})
    assert spec.verify_at(3) == pytest.approx(1.45)
    values = [spec.verify_by_k[k].value for k in sorted(spec.verify_by_k)]
    assert values == sorted(values)  # increasing in K, as the rows were made
    code = acceptance["code"]
    assert code.mean == pytest.approx(28 / 33) and code.k == 4
    assert code.by_k[1].mean == pytest.approx(8 / 10) and code.by_k[2].mean == pytest.approx(14 / 18)
    assert code.by_k[2].per_position == pytest.approx((0.8, 0.75))
    assert spec.cost_ratio.value == pytest.approx(0.2)


def test_resume_skips_measured_tasks(swept):
    path, _, target, prompts = swept
    before = path.read_text()
    with SampleLog.open(path, {"t": 1}) as log:
        assert measure_speculative(target, target, prompts, SETTINGS, log) == 0
    assert path.read_text() == before


def test_unrelated_draft_has_partial_acceptance(tmp_path):
    target = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()
    draft = LlamaModel(PRESETS["tiny-mha"], torch.Generator().manual_seed(2)).eval()
    with SampleLog.open(tmp_path / "y.samples.csv", {"t": 2}) as log:
        measure_speculative(target, draft, {"dialogue": [[1, 5, 9, 13, 2, 7]]}, SETTINGS, log)
        samples = list(log.samples)
    _, acceptance = speculative_sections(samples, "other", SETTINGS.k)
    acc = acceptance["dialogue"]
    assert 0.0 <= acc.mean < 1.0  # random unrelated weights: some draft is rejected
    assert all(0.0 <= p <= 1.0 for p in acc.per_position)
    # the MLE a = accepted / (accepted + rejections), recomputed from the raw count rows
    rows = {s.x2: s for s in samples if s.sweep == accept_sweep(SETTINGS.k)}
    accepted = sum(int(rows[i].median_ms) for i in range(1, SETTINGS.k + 1))
    assert acc.mean == pytest.approx(accepted / (accepted + int(rows[0].median_ms)))


def test_thread_clock_rows_and_bad_clock(tmp_path):
    """The thread-clocked sweep writes the same rows (times scaled by each step's CPU / wall share)."""
    target = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()
    settings = SpecSettings(k=2, prompts=1, new_tokens=10, clock="thread")
    with SampleLog.open(tmp_path / "t.samples.csv", {"t": 3}) as log:
        assert measure_speculative(target, target, {"code": [[1, 5, 9, 13]]}, settings, log) == 1
        samples = list(log.samples)
    timed = {s.sweep: s for s in samples if s.sweep in ("spec_target", "spec_draft", "spec_verify")}
    assert set(timed) == {"spec_target", "spec_draft", "spec_verify"}
    assert all(0 < s.min_ms <= s.median_ms <= s.max_ms for s in timed.values())
    with pytest.raises(ValueError, match="clock"):
        SpecSettings(clock="cpu")
