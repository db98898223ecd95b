"""Every shipped profile loads and validates with its source kind; the published ones regenerate
byte for byte from the Vidur rows shipped beside them and match those rows computed by hand."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from tripath.calibrate.samples import read_samples
from tripath.core.data_dirs import DATA_DIR, PROFILES_DIR, REPO_ROOT
from tripath.profile.profile import load_profile, resolve_profile

VIDUR = DATA_DIR / "peer-data" / "vidur"
PUBLISHED = ("published-llama2-7b-a100", "published-llama2-70b-tp2-a100", "published-llama2-7b-h100",
             "published-llama2-70b-tp2-h100")
EXPECTED_SOURCE = {"seed-llama2-70b-a100": "seed", "cpu-tiny": "measured", **{n: "published" for n in PUBLISHED}}


@pytest.mark.parametrize("path", sorted(PROFILES_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_profile_validates(path):
    profile = load_profile(path)
    assert profile.source == EXPECTED_SOURCE.get(path.stem, profile.source)
    if profile.source == "projected":
        assert profile.notes[0].startswith("PROJECTED")
    if path.stem in EXPECTED_SOURCE and profile.source != "seed":  # fits that passed calibrate's 20 % threshold
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
    assert profile.key.tp == (2 if "70b" in name else 1)  # 70B fp16 weights (138 GB) need two 80 GB GPUs
    attention = {profile.costs["prefill"].coefficients["c_attn"].source,
                 profile.costs["decode"].coefficients["d_ctx"].source}
    assert attention == ({"projected"} if name.endswith("h100") else {"fitted"})
    # paging is the published link bandwidth: 2048 tokens x KV bytes / (GB/s x 1e6) ms
    bw = links["device_host"].value
    assert profile.paging["device_host"].ms_per_2k_tokens == pytest.approx(
        2048 * profile.model.kv_bytes_per_token / (bw * 1e6))


def _mlp_row(path, tp, tokens):
    with open(path, encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if int(row["num_tensor_parallel_workers"]) == tp and int(row["num_tokens"]) == tokens:
                return row
    raise AssertionError(f"no row for {tokens} tokens")


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
