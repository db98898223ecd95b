"""Projection scales each coefficient by the roofline ratio of the resource that bounds it, and says so."""

from __future__ import annotations

import json

import pytest

from tripath.calibrate.hardware import SPECS
from tripath.calibrate.published.projection import project_profile
from tripath.cli.main import main
from tripath.core.errors import InputError
from tripath.profile.profile import load_profile, resolve_profile

A100, H100 = SPECS["a100-80gb"], SPECS["h100-sxm"]


@pytest.fixture(scope="module")
def seed():
    return resolve_profile("seed-llama2-70b-a100")


@pytest.fixture(scope="module")
def projected(seed):
    return project_profile(seed, H100)


def _value(profile, cost, name):
    return profile.costs[cost].coefficients[name].value


def test_ratios_by_bound_resource(seed, projected):
    flops = 312.0 / 989.4  # A100 / H100 dense BF16 peaks: compute-bound times shrink by this
    memory = 2.039 / 3.35  # HBM bandwidths: memory-bound times shrink by this
    for cost, name, ratio in (("prefill", "c_tok", flops), ("prefill", "c_attn", flops), ("decode", "d_seq", flops),
                              ("decode", "d0", memory), ("decode", "d_ctx", memory), ("prefill", "c0", 1.0)):
        assert _value(projected, cost, name) == pytest.approx(_value(seed, cost, name) * ratio, rel=1e-5), name
    # paging bandwidth is a rate: PCIe 5.0 x16 / PCIe 4.0 x16 = 63 / 31.5 = 2
    bw = projected.paging["device_host"].cost.coefficients["bandwidth_gbps"].value
    assert bw == pytest.approx(seed.paging["device_host"].cost.coefficients["bandwidth_gbps"].value * 2.0)
    # NVLink 3 -> 4 per direction: 300 / 450 on every merge time
    for before, after in zip(seed.sequence_parallel[2].rows, projected.sequence_parallel[2].rows, strict=True):
        assert after.merge_ms == pytest.approx(before.merge_ms * 300 / 450, rel=1e-5)
        assert after.speedup == before.speedup


def test_labelled_projected_everywhere(projected):
    assert projected.source == "projected" and projected.key.hardware == "h100-sxm"
    assert projected.notes[0].startswith("PROJECTED, not measured")
    for cost in projected.costs.values():
        assert cost.fit is None and cost.note.startswith("PROJECTED")
        assert all(c.source == "projected" and "PROJECTED" in c.note for c in cost.coefficients.values())
    assert projected.memory.source == "projected"


def test_memory_keeps_what_the_source_reserved(seed, projected):
    reserved = seed.hardware.device_memory_bytes - seed.kv_capacity_bytes
    assert projected.kv_capacity_bytes == H100.memory_bytes - reserved


def test_cli_project_show_compare(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["profile", "project", "seed-llama2-70b-a100", "--to", "h200", "--out", str(out)]) == 0
    profile = load_profile(out)
    assert profile.source == "projected" and profile.hardware.device_name == "NVIDIA H200"
    capsys.readouterr()
    assert main(["profile", "show", str(out)]) == 0
    assert "PROJECTED: scaled from another profile" in capsys.readouterr().out
    assert main(["profile", "compare", "seed-llama2-70b-a100", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["b"]["source"] == "projected"
    # H200 HBM3e 4.8 TB/s: d_ctx x 2.039 / 4.8
    assert report["costs"]["decode"]["coefficients"]["d_ctx"]["ratio"] == pytest.approx(2.039 / 4.8, rel=1e-4)


def test_profile_without_a_published_roofline_is_refused(tmp_path, capsys):
    cpu = tmp_path / "cpu.json"
    seed = resolve_profile("seed-llama2-70b-a100")
    data = json.loads(seed.to_json())
    data["hardware"]["device_name"] = "some CPU"
    cpu.write_text(json.dumps(data))
    with pytest.raises(InputError, match="no published roofline"):
        project_profile(load_profile(cpu), A100)
    assert main(["profile", "project", str(cpu), "--to", "h100-sxm", "--out", str(tmp_path / "x.json")]) == 2
    assert not (tmp_path / "x.json").exists()
