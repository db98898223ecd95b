"""scripts/gpu_check.py without a GPU: importable, and its --dry-run builds and runs the same two calibration
jobs on the CPU with tiny models, so the profiles it would ship carry the K sweep and the chunk-size sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import load_script
from tripath.profile.profile import load_profile


@pytest.mark.slow
def test_dry_run_calibrates_with_the_new_sweeps(tmp_path: Path) -> None:
    gpu_check = load_script("scripts/gpu_check.py")
    assert gpu_check.main(["--out-dir", str(tmp_path), "--dry-run"]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["dry_run"] and [c["pass"] for c in report["checks"]] == [True, True]
    big = load_profile(tmp_path / "dry-run-tiny-mha.json")
    # the preset's page sizes plus the main one (256 tokens, the tiered cache's default), which `cost` is fitted to
    assert all(sorted(link.by_chunk_tokens) == [16, 64, 256] for link in big.paging.values())
    assert big.speculative is None and not big.sequence_parallel
    tiny = load_profile(tmp_path / "dry-run-tiny.json")
    assert tiny.speculative is not None and sorted(tiny.speculative.verify_by_k) == [1, 2]
    assert all(sorted(a.by_k) == [1, 2] for a in tiny.acceptance.values())
    assert "gpu_check.py" in tiny.provenance.command


def test_jobs_for_a_gpu_are_the_full_grids(tmp_path: Path) -> None:
    """What a GPU session runs (built here, not run): 7B shapes, full grid, paging per chunk size; the tiny pair
    with the speculative sweep at K = 1..8. Both fit the script's budget only without the CPU-only sweeps."""
    gpu_check = load_script("scripts/gpu_check.py")
    big, tiny = gpu_check.calibration_jobs(tmp_path, "full", dry_run=False, device_name="NVIDIA H200")
    assert Path(big.out).name == "h200-llama2-7b.json" and Path(tiny.out).name == "h200-tiny.json"
    assert (big.device, big.target.preset, big.target.dtype, big.preset.name) == ("cuda", "llama2-7b", "bfloat16",
                                                                                   "full")
    assert big.paging and big.preset.paging_chunks == (64, 256, 1024) and not big.seqpar and big.draft is None
    assert tiny.device == "cuda" and tiny.draft is not None and tiny.preset.spec_k == tuple(range(1, 9))
    assert not tiny.seqpar and not tiny.compression
