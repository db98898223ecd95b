"""`--model-config NAME` for the LLaMA-2 shapes on a CPU: random weights for 2 decoder layers, timed at 1 and 2 and
extrapolated per layer to the full depth, and the profile says so (model note, profile notes, samples' layers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tripath.calibrate.assemble import full_depth_points
from tripath.calibrate.presets import Preset
from tripath.calibrate.samples import read_samples
from tripath.calibrate.target import LoadedTarget, TargetSpec, model_spec
from tripath.calibrate.timer import TimerConfig
from tripath.cli.main import main
from tripath.engine.model.config import PRESETS
from tripath.profile.profile import load_profile

TINY = Preset("quick", prefill_new=(8, 16, 32), prefill_context=(0, 16), decode_batch=(1, 2),
              decode_context=(8, 16), timer=TimerConfig(warmup=0, reps=1))


def test_llama2_70b_model_section_is_the_full_model() -> None:
    """What a 70B profile records without building 80 layers: the full model's shapes, KV and weight bytes."""
    spec = model_spec(LoadedTarget(TargetSpec(preset="llama2-70b", layers_timed=2, dtype="bfloat16"),
                                   PRESETS["llama2-70b"], {}))
    assert (spec.layers, spec.heads, spec.kv_heads, spec.head_dim) == (80, 64, 8, 128)
    assert spec.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2  # 327,680 B: GQA, bf16
    assert spec.weight_bytes == spec.params * 2 and 68e9 < spec.params < 70e9
    assert "random weights; timed at 1 and 2 decoder layers and extrapolated per layer to 80" in spec.note


@pytest.mark.slow
def test_llama2_7b_model_config_calibrates_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tripath.calibrate.presets.PRESETS", {"quick": TINY})
    out = tmp_path / "cpu-7b.json"
    rc = main(["calibrate", "--model-config", "llama2-7b", "--layers-timed", "2", "--dtype", "bfloat16",
               "--out", str(out), "--force", "--no-progress"])
    assert rc == 0
    profile = load_profile(out)
    assert profile.model.name == "llama2-7b" and profile.model.layers == 32
    assert profile.model.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2  # MHA, bf16 (half the fp32 memory of the test)
    assert "extrapolated per layer to 32" in profile.model.note
    assert any(n.startswith("Scaled: random weights, 2 of 32 decoder layers") for n in profile.notes)
    assert "--model-config llama2-7b --layers-timed 2" in profile.provenance.command
    rows = read_samples(tmp_path / "cpu-7b.samples.csv")
    assert {r.layers for r in rows} == {1, 2} and len(rows) == 2 * (6 + 4)
    # the fit saw full-depth times: t(1) + 31 x max(0, t(2) - t(1)) per point
    by = {(r.sweep, r.layers, r.x1, r.x2): r.min_ms for r in rows}
    x1, x2, ms = full_depth_points(rows, "decode", 32, "min")
    for b, total, full in zip(x1, x2, ms, strict=True):
        one, two = by[("decode", 1, int(b), int(total))], by[("decode", 2, int(b), int(total))]
        assert full == pytest.approx(one + 31 * max(0.0, two - one))
