"""Every shipped profile loads and validates with its source kind; the published and projected ones
regenerate byte for byte from the Vidur rows shipped beside them and match those rows computed by hand."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from tripath.calibrate.hardware import SPECS
from tripath.calibrate.published.vidur import attention_fit
from tripath.calibrate.samples import read_samples
from tripath.core.data_dirs import DATA_DIR, PROFILES_DIR, REPO_ROOT
from tripath.core.records import COMPLETED
from tripath.profile.profile import load_profile, resolve_profile, save_profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict

VIDUR = DATA_DIR / "peer-data" / "vidur"
PUBLISHED = ("published-llama2-7b-a100", "published-llama2-70b-tp2-a100", "published-llama2-7b-h100",
             "published-llama2-70b-tp2-h100", "published-llama3-8b-a100", "published-llama3-70b-tp4-a100",
             "published-llama2-70b-tp4-h100")
PROJECTED = ("projected-llama3-8b-h100", "projected-llama3-70b-tp4-h100", "projected-llama3-8b-h200",
             "projected-llama3-70b-tp4-h200", "projected-llama2-7b-h200", "projected-llama2-70b-tp2-h200")
LLAMA3 = tuple(n for n in PUBLISHED + PROJECTED if "llama3" in n)
EXPECTED_SOURCE = {"seed-llama2-70b-a100": "seed", "cpu-tiny": "measured", **{n: "published" for n in PUBLISHED},
                   **{n: "projected" for n in PROJECTED}}
HARDWARE = {"a100": "a100-80gb", "h100": "h100-sxm", "h200": "h200"}


@pytest.mark.parametrize("path", sorted(PROFILES_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_profile_validates(path):
    profile = load_profile(path)
    assert profile.source == EXPECTED_SOURCE.get(path.stem, profile.source)
    if profile.source == "projected":
        assert profile.notes[0].startswith("PROJECTED")
    if path.stem in EXPECTED_SOURCE and profile.source not in ("seed", "projected"):  # passed the 20 % threshold
        for cost in profile.costs.values():
            assert cost.fit is not None and cost.fit.holdout_mape < 0.20


@pytest.mark.parametrize("path", sorted(PROFILES_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_profile_rewrites_its_exact_bytes(path):
    assert load_profile(path).to_json().encode("utf-8") == path.read_bytes()


def test_expected_profiles_are_shipped():
    names = {p.stem for p in PROFILES_DIR.glob("*.json")}
    assert set(EXPECTED_SOURCE) <= names


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_profiles_say_what_is_projected(name):
    profile = resolve_profile(name)
    assert profile.key.engine_commit.startswith("vidur-")
    links = profile.hardware.links
    assert {"device_host", "host_ssd", "interconnect"} <= set(links)
    assert all(link.source == "published" and link.note for link in links.values())
    assert profile.key.tp == (4 if "tp4" in name else 2 if "70b" in name else 1)  # 70B fp16 (138 GB): >= 2 GPUs
    assert profile.key.hardware == HARDWARE[name.rsplit("-", 1)[1]]
    attention = {profile.costs["prefill"].coefficients["c_attn"].source,
                 profile.costs["decode"].coefficients["d_ctx"].source}
    # H100: A100 attention x measured ratios; Llama-3 on A100: derived from FLOPs and bytes; else Vidur's rows
    assert attention == ({"projected"} if name.endswith("h100") else {"derived"} if "llama3" in name else {"fitted"})
    # paging: 2048 tokens x KV bytes / (GB/s x 1e6) ms, at the bus figure on A100 (PCIe 4.0 x16, 31.5 GB/s) and
    # at the published H100 DMA rate (50 GB/s) under the PCIe 5.0 x16 bus figure (63 GB/s) on H100
    bw = profile.paging["device_host"].cost.coefficients["bandwidth_gbps"]
    assert (bw.value, links["device_host"].value) == ((50.0, 63.0) if name.endswith("h100") else (31.5, 31.5))
    assert bw.source == "published" and ("33398" in bw.note) == name.endswith("h100")
    assert profile.paging["device_host"].ms_per_2k_tokens == pytest.approx(
        2048 * profile.model.kv_bytes_per_token / (bw.value * 1e6))


@pytest.mark.parametrize("name", PROJECTED)
def test_projected_profiles_say_projected_everywhere(name):
    profile = resolve_profile(name)
    assert profile.source == "projected" and profile.notes[0].startswith("PROJECTED, not measured")
    assert profile.key.hardware == HARDWARE[name.rsplit("-", 1)[1]]
    for cost in profile.costs.values():
        assert cost.fit is None
        assert all(c.source == "projected" and c.note.startswith("PROJECTED") for c in cost.coefficients.values())
    # the budget and paging are those of the target's specification, as for a published profile
    spec = SPECS[profile.key.hardware]
    tp = profile.key.tp
    assert profile.kv_capacity_bytes == int(tp * spec.memory_bytes * 0.9) - profile.model.weight_bytes
    bw = profile.paging["device_host"].cost.coefficients["bandwidth_gbps"]
    assert bw.value == 50.0 and bw.source == ("published" if name.endswith("h100") else "derived")


@pytest.mark.parametrize("name", PUBLISHED + PROJECTED)
def test_profile_round_trips(name, tmp_path):
    profile = resolve_profile(name)
    save_profile(profile, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json") == profile


@pytest.mark.parametrize("name", LLAMA3)
def test_llama3_shapes_and_128k_contexts(name):
    profile = resolve_profile(name)
    kv_per_token = {"llama-3-8b": 2 * 32 * 8 * 128 * 2, "llama-3-70b": 2 * 80 * 8 * 128 * 2}[profile.key.model]
    assert profile.model.kv_bytes_per_token == kv_per_token == (131072 if "8b" in name else 327680)
    assert profile.model.weight_bytes == 2 * profile.model.params  # fp16
    # one 128K-token request (Llama-3.1's window) plus a 4K answer fits one replica's KV budget
    assert profile.kv_capacity_bytes >= (131072 + 4096) * kv_per_token


def test_derived_attention_notes_carry_the_fit_and_its_error():
    fit = attention_fit(VIDUR)
    assert 0 < fit.decode_efficiency <= 1 and 0 < fit.causal_efficiency < fit.context_efficiency <= 1
    for name in ("published-llama3-8b-a100", "published-llama3-70b-tp4-a100", "published-llama2-70b-tp4-h100"):
        profile = resolve_profile(name)
        d_ctx = profile.costs["decode"].coefficients["d_ctx"]
        assert fit.describe() in d_ctx.note
        decode, prefill = fit.mape["llama-2-7b tp1"]
        assert any(f"llama-2-7b tp1 decode {decode:.1%} / prefill {prefill:.1%}" in n for n in profile.notes)


def _mlp_row(path, tp, tokens):
    with open(path, encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if int(row["num_tensor_parallel_workers"]) == tp and int(row["num_tokens"]) == tokens:
                return row
    raise AssertionError(f"no row for {tokens} tokens")


def _mlp_rows(path, tp, tokens):
    with open(path, encoding="utf-8") as handle:
        return [row for row in csv.DictReader(handle)
                if int(row["num_tensor_parallel_workers"]) == tp and int(row["num_tokens"]) == tokens]


LINEAR_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
              "mlp_up_proj", "mlp_act", "mlp_down_proj", "add", "add")


def test_rebuilt_llama3_8b_decode_sample_by_hand():
    # A100 Llama-3-8B decode, batch 1 with 32 cached tokens: 32 x (linear + derived attention) + embedding
    (row,) = _mlp_rows(VIDUR / "data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv", 1, 1)
    linear = sum(float(row[f"time_stats.{op}.median"]) for op in LINEAR_OPS)
    fit = attention_fit(VIDUR)
    kv_bytes = 1 * 33 * 2 * 8 * 128 * 2  # K and V of 33 tokens, 8 KV heads of 128, fp16
    attention = fit.decode_floor_ms + kv_bytes / (2.039e12 * fit.decode_efficiency) * 1e3
    expected = 32 * (linear + attention) + float(row["time_stats.emb.median"])
    samples = {s.key: s for s in read_samples(PROFILES_DIR / "published-llama3-8b-a100.samples.csv")}
    assert samples[("decode", 32, 1, 33)].median_ms == pytest.approx(expected, rel=1e-5)


def test_rebuilt_llama3_70b_tp4_prefill_sample_by_hand():
    # A100 Llama-3-70B tp4, a 512-token chunk with nothing cached: per layer linear + derived attention
    # (16 query heads per GPU) + two 4-GPU all-reduces of 512 x 8192 x 2 bytes (8 MiB), 80 layers, + embedding
    (row,) = _mlp_rows(VIDUR / "data/profiling/compute/a100/meta-llama/Meta-Llama-3-70B/mlp.csv", 4, 512)
    linear = sum(float(row[f"time_stats.{op}.median"]) for op in LINEAR_OPS)
    with open(VIDUR / "data/profiling/network/a100_dgx/all_reduce.csv", encoding="utf-8") as handle:
        (ar,) = [float(r["time_stats.all_reduce.median"]) for r in csv.DictReader(handle)
                 if (r["num_workers"], r["devices_per_node"], r["size"]) == ("4", "4", str(512 * 8192 * 2))]
    fit = attention_fit(VIDUR)
    causal_flops = 4 * 16 * 128 * 512 * 513 / 2
    attention = fit.prefill_floor_ms + causal_flops / (312e12 * fit.causal_efficiency) * 1e3
    expected = 80 * (linear + attention + 2 * ar) + float(row["time_stats.emb.median"])
    samples = {s.key: s for s in read_samples(PROFILES_DIR / "published-llama3-70b-tp4-a100.samples.csv")}
    assert samples[("prefill", 80, 512, 0)].median_ms == pytest.approx(expected, rel=1e-5)


def test_rebuilt_sample_by_hand():
    # A100 Llama-2-7B decode, batch 1 with 32 cached tokens: 32 layers x (linear ops + attention) + embedding
    row = _mlp_row(VIDUR / "data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv", 1, 1)
    ops = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
           "mlp_up_proj", "mlp_act", "mlp_down_proj", "add", "add")
    linear = sum(float(row[f"time_stats.{op}.median"]) for op in ops)
    attention = 0.009  # attention_sampled_rows.csv: decode, batch 1, kv 32
    expected = 32 * (linear + attention) + float(row["time_stats.emb.median"])
    samples = {s.key: s for s in read_samples(PROFILES_DIR / "published-llama2-7b-a100.samples.csv")}
    assert samples[("decode", 32, 1, 33)].median_ms == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_published_profiles_regenerate_byte_for_byte(tmp_path):
    script = REPO_ROOT / "scripts" / "make_vidur_profiles.py"
    subprocess.run([sys.executable, str(script), "--out-dir", str(tmp_path), "--no-plots"], check=True,
                   capture_output=True)
    for name in PUBLISHED:
        for suffix in (".json", ".samples.csv"):
            assert (tmp_path / f"{name}{suffix}").read_bytes() == (PROFILES_DIR / f"{name}{suffix}").read_bytes()
    for name in PROJECTED:
        assert (tmp_path / f"{name}.json").read_bytes() == (PROFILES_DIR / f"{name}.json").read_bytes()


@pytest.mark.parametrize("name", ("published-llama3-8b-a100", "published-llama3-70b-tp4-a100",
                                  "projected-llama3-8b-h200"))
def test_128k_prompts_are_served_not_refused(name):
    profile = resolve_profile(name)
    scenario = scenario_from_dict({
        "name": "128k", "workload": {
            "requests": 3, "arrival": {"kind": "poisson", "rate_per_s": 0.01}, "tasks": {"dialogue": 1.0},
            "prompt_tokens": {"kind": "uniform", "low": 131072, "high": 131072},
            "output_tokens": {"kind": "uniform", "low": 64, "high": 64}},
        "cluster": {"gpus": profile.key.tp},
        "batching": {"policy": "continuous", "max_batch_size": 8, "max_batched_tokens": 8192}})
    (run,) = simulate(scenario, profile).runs
    assert [r.status for r in run.records] == [COMPLETED] * 3
    assert run.extrapolations.prefill_outside > 0  # 128K contexts lie past the measured domain
