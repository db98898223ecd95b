"""`tripath calibrate --compression --draft` on tiny random checkpoints: the profile's compression section
holds measured ratios per mode within the schema's bounds, and a rerun resumes from the samples on disk."""

from __future__ import annotations

import dataclasses
import json
import math

import torch

from tripath.calibrate.presets import Preset
from tripath.calibrate.samples import read_samples
from tripath.calibrate.sweeps.compression import MEASURED_MODES, PREFILL_LENGTHS, REF_SWEEP, STORED_MODES
from tripath.calibrate.sweeps.compression_decode import DECODE_BATCHES
from tripath.calibrate.timer import TimerConfig
from tripath.cli.main import main
from tripath.engine.kv.modes import MODES
from tripath.engine.model.checkpoint import save_checkpoint
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.profile.profile import load_profile

GRID = Preset("test", prefill_new=(8, 32, 64), prefill_context=(0, 32), decode_batch=(1, 2, 4),
              decode_context=(16, 64), timer=TimerConfig(warmup=0, reps=2))


def test_calibrate_compression_section_and_resume(tmp_path, monkeypatch, capsys):
    for name, preset, seed in (("target", "tiny-gqa", 1), ("draft", "tiny-mha", 2)):
        config = dataclasses.replace(PRESETS[preset], vocab_size=264)  # the byte tokenizer's vocabulary
        save_checkpoint(LlamaModel(config, torch.Generator().manual_seed(seed)), config, tmp_path / name)
    prompts = tmp_path / "eval.jsonl"
    # prompts longer than a quantization group (32 tokens), so int8/int4 groups are really stored quantized
    prompts.write_text("".join(json.dumps({"task": t, "prompt": p * 12, "reference": "x"}) + "\n"
                               for t, p in (("code", "def f(x): "), ("math", "2 + 2 = 4. "))))
    monkeypatch.setattr("tripath.calibrate.presets.PRESETS", {"quick": GRID})
    out = tmp_path / "cpu-t.json"
    argv = ["calibrate", "--model", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--compression",
            "--threads", "1", "--eval-prompts", str(prompts), "--out", str(out), "--force", "--no-progress", "--json"]
    assert main(argv) == 0, capsys.readouterr()
    capsys.readouterr()
    profile = load_profile(out)
    comp = profile.compression
    assert set(comp) == set(MEASURED_MODES)
    # int8 stores 1 byte per value plus per-group scales/zeros (fp32 model: 4 bytes), int4 half of that
    assert comp["int4"].kv_bytes_ratio.value < comp["int8"].kv_bytes_ratio.value < 1.0
    assert comp["int8"].kv_bytes_ratio.value < 0.5  # 1 byte of 4 + metadata, most tokens quantized
    for mode in comp.values():
        for name in mode.FIELDS:
            coef = getattr(mode, name)
            assert math.isfinite(coef.value) and coef.source == "measured"
        assert 0.0 < mode.kv_bytes_ratio.value <= 1.0 and mode.decode_overhead_ratio.value > 0
        assert 0.0 <= mode.quality_loss.value <= 1.0 and -1.0 <= mode.acceptance_drop.value <= 1.0
    assert not any("compression" in n and "Not measured" in n for n in profile.notes)
    every = [s for s in read_samples(tmp_path / "cpu-t.samples.csv") if s.sweep.startswith("comp_")]
    rows = [s for s in every if not s.sweep.startswith("comp_decode_") and s.sweep != REF_SWEEP]
    # the (batch, context) decode grid: a 512-position model holds 128 and 384 tokens per sequence of it, on fp
    # and the 3 store modes; two contexts separate the per-step and per-length terms: decode_extra is fitted
    grid = {(s.sweep, s.x1, s.x2) for s in every if s.sweep.startswith("comp_decode_")}
    assert grid == {(f"comp_decode_{m}", b, c * b) for m in ("fp", "int8", "int4", "mixed-int4")
                    for b in DECODE_BATCHES for c in (128, 384)}
    assert all((comp[m].decode_extra is not None) == (m in STORED_MODES) for m in comp)
    prefill = [s for s in rows if s.sweep == "comp_prefill"]  # fp and the 3 store modes at each length <= 512
    lengths = [n for n in PREFILL_LENGTHS if n <= 512]  # the test model holds 512
    assert len(rows) - len(prefill) == 4 * (1 + len(MEASURED_MODES))  # fp and each mode, four rows each
    assert sorted({s.x2 for s in prefill}) == lengths and len(prefill) == len(lengths) * 4
    # each store mode's fp reference, timed alternately with it at every length
    refs = {(s.x1, s.x2) for s in every if s.sweep == REF_SWEEP}
    assert refs == {(MODES.index(m), n) for m in STORED_MODES for n in lengths}
    assert all(comp[m].prefill_overhead_ratio.value > 0 for m in ("int8", "int4", "mixed-int4"))
    assert comp["window"].prefill_overhead_ratio is None  # not written through the compressed store
    assert main(argv) == 0  # rerun: every point is on disk, nothing is measured again
    assert json.loads(capsys.readouterr().out)["measured_points"] == 0
