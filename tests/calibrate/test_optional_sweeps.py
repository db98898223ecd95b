"""`tripath calibrate --draft DIR --paging --seqpar` end to end on tiny random checkpoints: the profile on disk
carries measured speculative, acceptance, paging and sequence_parallel sections next to the fitted costs."""

from __future__ import annotations

import dataclasses
import json

import torch

from tripath.calibrate.presets import Preset
from tripath.calibrate.samples import read_samples
from tripath.calibrate.timer import TimerConfig
from tripath.cli.main import main
from tripath.engine.model.checkpoint import save_checkpoint
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.profile.profile import load_profile

GRID = Preset("test", prefill_new=(8, 32, 64), prefill_context=(0, 32), decode_batch=(1, 2, 4),
              decode_context=(16, 64), timer=TimerConfig(warmup=0, reps=2), spec_k=(2, 4), paging_chunks=(64, 256))


def test_calibrate_with_draft_and_paging(tmp_path, monkeypatch, capsys):
    for name, preset, seed in (("target", "tiny-gqa", 1), ("draft", "tiny-mha", 2)):
        config = dataclasses.replace(PRESETS[preset], vocab_size=264)  # the byte tokenizer's vocabulary
        save_checkpoint(LlamaModel(config, torch.Generator().manual_seed(seed)), config, tmp_path / name)
    prompts = tmp_path / "eval.jsonl"
    prompts.write_text("".join(json.dumps({"task": t, "prompt": p, "reference": "x"}) + "\n"
                               for t, p in (("code", "def f(x):"), ("math", "2 + 2 ="), ("math", "3 * 7 ="))))
    monkeypatch.setattr("tripath.calibrate.presets.PRESETS", {"quick": GRID})
    out = tmp_path / "cpu-t.json"
    rc = main(["calibrate", "--model", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--paging",
               "--seqpar", "--eval-prompts", str(prompts), "--out", str(out), "--force", "--no-progress"])
    assert rc == 0, capsys.readouterr()
    profile = load_profile(out)
    assert set(profile.acceptance) == {"code", "math"}
    assert all(0.0 <= a.mean <= 1.0 and a.source == "measured" for a in profile.acceptance.values())
    spec = profile.speculative
    assert spec is not None and spec.draft_model == "draft" and spec.k == 4
    assert spec.cost_ratio.value > 0 and spec.verify_cost_ratio.value > 0
    assert sorted(spec.verify_by_k) == [2, 4]  # the preset's K grid
    assert all(sorted(a.by_k) == [2, 4] and all(0.0 <= e.mean <= 1.0 for e in a.by_k.values())
               for a in profile.acceptance.values())
    assert all(sorted(link.by_chunk_tokens) == [64, 256] for link in profile.paging.values())
    assert {"device_host", "host_ssd", "ssd->host"} <= set(profile.paging)
    assert profile.paging_ms("host_ssd", 2e6) > profile.paging_ms("host_ssd", 1e5) > 0
    assert {s.sweep for s in read_samples(tmp_path / "cpu-t.samples.csv")} >= {"prefill", "decode", "paging",
                                                                                "spec_accept_k4", "paging_c64"}
    sp = profile.sequence_parallel[2]  # tiny-gqa holds 512 positions: only the 512-token length fits
    assert [r.context_tokens for r in sp.rows] == [512] and sp.rows[0].speedup > 0
    assert not any("paging" in n and "Not measured" in n for n in profile.notes)
