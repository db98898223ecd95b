"""The speculative sweep on tiny random models: rows land in the samples CSV, the profile's
speculative and acceptance sections are filled and consistent with the counts, and a rerun resumes."""

from __future__ import annotations

import json

import pytest
import torch

from calibrate.samples import SampleLog, read_samples
from calibrate.sweep_speculative import SpecSettings, measure_speculative, speculative_sections
from real_engine.config import PRESETS
from real_engine.model import LlamaModel

SETTINGS = SpecSettings(k=3, prompts=2, new_tokens=12)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    torch.set_num_threads(1)
    target = LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()
    prompts = {"code": [[1, 5, 9, 13, 2, 7], [1, 3, 3, 3, 8]], "math": [[1, 4, 4, 6, 6, 10, 12]]}
    path = tmp_path_factory.mktemp("spec") / "x.samples.csv"
    # the target drafting for itself must have every draft accepted: a = 1 exactly (greedy)
    with SampleLog.open(path, {"t": 1}) as log:
        measured = measure_speculative(target, target, prompts, SETTINGS, log)
    return path, measured, target, prompts


def test_rows_and_sections(swept):
    path, measured, _, _ = swept
    assert measured == 2
    samples = read_samples(path)
    assert {s.sweep for s in samples} == {"spec_target", "spec_draft", "spec_verify", "spec_accept"}
    spec, acceptance = speculative_sections(samples, "self", SETTINGS.k)
    assert set(acceptance) == {"code", "math"}
    for acc in acceptance.values():
        assert acc.mean == 1.0 and acc.per_position == (1.0, 1.0, 1.0) and acc.k == 3
        assert acc.source == "measured"
    assert spec is not None and spec.k == 3
    # the draft IS the target here: a draft pass costs about one target step; a verify of K+1 = 4 tokens
    # costs at least as much as a single-token pass (not far below it even with timing noise)
    assert 0.3 < spec.cost_ratio.value < 3.0
    assert spec.verify_cost_ratio.value > 0.5
    json.dumps(spec.to_dict())  # serialisable


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
    rows = {s.x2: s for s in samples if s.sweep == "spec_accept"}
    accepted = sum(int(rows[i].median_ms) for i in range(1, SETTINGS.k + 1))
    assert acc.mean == pytest.approx(accepted / (accepted + int(rows[0].median_ms)))
