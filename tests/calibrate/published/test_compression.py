"""KV-compression sections of the published profiles: bytes per token, decode attention, sources, round trip."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.helpers import TINY, peak_in_flight, shipped_scenario_dict
from tripath.calibrate.published.compression import MODES, compression_sections, stored_bytes_per_token
from tripath.core.errors import InputError
from tripath.profile.profile import Profile, resolve_profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict

PUBLISHED = ("published-llama2-7b-a100", "published-llama2-70b-tp2-a100", "published-llama2-7b-h100",
             "published-llama2-70b-tp2-h100")

# Hand-computed: elements per token of K (and again of V) = layers x kv_heads x head_dim; fp8 one byte each;
# int8 / int4 b/8 bytes each + a 2-byte scale and a 2-byte zero per 16 tokens of a key channel (4/16 bytes per
# element) and per 32 channels of a value token (4/32 bytes per element).
#   7B:  32 x 32 x 128 = 131,072   fp8 2 x 131,072 = 262,144
#        int8 131,072 x (1 + 0.25) + 131,072 x (1 + 0.125) = 163,840 + 147,456 = 311,296
#        int4 131,072 x (0.5 + 0.25) + 131,072 x (0.5 + 0.125) = 98,304 + 81,920 = 180,224
#   70B: 80 x 8 x 128 = 81,920     fp8 163,840; int8 102,400 + 92,160 = 194,560; int4 61,440 + 51,200 = 112,640
BYTES = {
    "published-llama2-7b-a100": {"fp8": 262_144, "int8": 311_296, "int4": 180_224},
    "published-llama2-70b-tp2-a100": {"fp8": 163_840, "int8": 194_560, "int4": 112_640},
}


@pytest.mark.parametrize("name", sorted(BYTES))
@pytest.mark.parametrize("mode", MODES)
def test_bytes_per_token_by_hand(name, mode):
    profile = resolve_profile(name)
    assert stored_bytes_per_token(profile, mode) == BYTES[name][mode]
    section = compression_sections(profile)[mode]
    assert section.kv_bytes_ratio.value * profile.model.kv_bytes_per_token == BYTES[name][mode]
    assert section.kv_bytes_ratio.source == "derived"


@pytest.mark.parametrize("name", PUBLISHED)
def test_compressed_kv_never_raises_bytes_and_attention_is_never_faster_than_its_reads(name):
    sections = compression_sections(resolve_profile(name))
    assert set(sections) == set(MODES)
    assert sections["int4"].kv_bytes_ratio.value < sections["fp8"].kv_bytes_ratio.value \
        < sections["int8"].kv_bytes_ratio.value <= 1.0
    for mode in sections.values():
        attention = mode.decode_overhead_ratio
        assert attention.unit == "attention_ratio" and attention.source == "derived"
        assert mode.kv_bytes_ratio.value <= attention.value <= 1.0
        assert mode.prefill_overhead_ratio is None and not mode.prefill_overhead_points  # prefill unchanged
        assert mode.decode_extra is None


def test_attention_ratio_by_hand():
    # A100: 2.039 TB/s HBM, 19.5 TFLOP/s FP32 -> 9.75 T instructions/s; fp16 = 2 bytes per element.
    # int4: 4 ops x 2.039 / (2 x 9.75) = 0.418256... > its bytes ratio 0.34375: the arithmetic bounds it.
    # int8: 2 ops -> 0.209128 < 0.59375: the reads bound it. fp8 (no fp8 convert on A100: 4 ops) 0.418 < 0.5.
    a100 = compression_sections(resolve_profile("published-llama2-7b-a100"))
    assert a100["int4"].decode_overhead_ratio.value == pytest.approx(4 * 2.039 / (2 * 9.75), rel=1e-6)
    assert a100["int8"].decode_overhead_ratio.value == 0.59375
    assert a100["fp8"].decode_overhead_ratio.value == 0.5
    # H100: 3.35 TB/s, 67 TFLOP/s FP32 -> 33.5 T/s: int4 4 x 3.35 / 67 = 0.2 < 0.34375, memory-bound.
    h100 = compression_sections(resolve_profile("published-llama2-7b-h100"))
    assert h100["int4"].decode_overhead_ratio.value == 0.34375
    # the bound depends on the GPU, not the model (elements and bytes scale together)
    a100_70b = compression_sections(resolve_profile("published-llama2-70b-tp2-a100"))
    assert {m: s.decode_overhead_ratio.value for m, s in a100_70b.items()} == \
        {m: s.decode_overhead_ratio.value for m, s in a100.items()}


def test_quality_is_published_with_its_model_and_acceptance_is_labelled_derived():
    sections = compression_sections(resolve_profile("published-llama2-7b-a100"))
    assert sections["int8"].quality_loss.value == pytest.approx(100 * (0.4657 - 0.4648))  # MMLU points
    assert sections["fp8"].quality_loss.value == pytest.approx(68.293 - 67.683)  # HumanEval-Python-EN points
    assert sections["int4"].quality_loss.value == pytest.approx(43.54 - 43.53)  # LongBench average points
    assert "WizardCoder-34B" in sections["fp8"].quality_loss.note
    assert "Mistral-7B-Instruct-v0.2" in sections["int4"].quality_loss.note
    for mode in sections.values():
        assert mode.quality_loss.source == "published" and "points" in mode.quality_loss.unit
        assert "Measured on " in mode.quality_loss.note  # the model the figure comes from, named
        assert mode.acceptance_drop.value == 0.0 and mode.acceptance_drop.source == "derived"
        assert "no published figure" in mode.acceptance_drop.note


@pytest.mark.parametrize("name", PUBLISHED)
def test_sections_round_trip_in_a_profile(name):
    profile = resolve_profile(name)
    sections = compression_sections(profile)
    with_modes = dataclasses.replace(profile, compression=sections)
    back = Profile.from_dict(json.loads(with_modes.to_json()))
    assert back.compression == sections
    assert back.to_json() == with_modes.to_json()


def test_a_gpu_without_a_published_rate_is_an_input_error():
    with pytest.raises(InputError, match=r"hardware\.device_name: no published FP32 rate"):
        compression_sections(TINY)


def test_int8_on_a_published_profile_admits_more_requests_when_memory_binds():
    name = "published-llama2-7b-a100"
    profile = resolve_profile(name)
    profile = dataclasses.replace(profile, compression=compression_sections(profile))
    runs = {}
    for label, strategy in (("fp16", {}), ("int8", {"compression": {"mode": "int8"}})):
        data = shipped_scenario_dict("summarization-very-long")  # 16-32K-token prompts
        data["profile"] = name
        data["workload"]["requests"] = 40
        data["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 5.0}  # every request waits: memory binds
        data["batching"]["max_batch_size"] = 64  # the batch cap never binds before the KV does
        data["strategy"] = strategy
        runs[label] = simulate(scenario_from_dict(data), profile, seed=1).runs[0]
    for run in runs.values():
        assert all(r.completed for r in run.records)
        assert run.replicas[0].peak_kv_bytes <= profile.kv_capacity_bytes
    # fp16 holds 63,832,580,096 / 524,288 = 121,750 tokens: at most 7 prompts of >= 16,384 tokens at once;
    # int8 holds 63,832,580,096 / 311,296 = 205,054 tokens: at most 12
    fp16, int8 = peak_in_flight(runs["fp16"].records), peak_in_flight(runs["int8"].records)
    assert fp16 <= 121_750 // 16_384 and int8 <= 205_054 // 16_384
    assert int8 > fp16
