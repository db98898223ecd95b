"""The profile contract: formulas against hand-computed values, validation errors that name the
file and the field, byte-exact round trips, atomic saves, and name resolution."""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
from pathlib import Path

import pytest

from tripath.core.errors import InputError
from tripath.profile import profile as profile_module
from tripath.profile.formulas import (
    FORMULAS,
    decode_v1,
    paging_v1,
    prefill_v1,
    sp_merge_v1,
)
from tripath.profile.profile import (
    Coefficient,
    CompressionMode,
    CostModel,
    FitQuality,
    Hardware,
    MemoryBudget,
    ModelSpec,
    PagingLink,
    Profile,
    ProfileKey,
    Provenance,
    SequenceParallel,
    Speculative,
    SpRow,
    TaskAcceptance,
    load_profile,
    load_samples,
    resolve_profile,
    save_profile,
    save_samples,
)

# A small model: 2 layers x 2 KV heads x 4 dims x 2 bytes x (K and V) = 64 bytes of KV per token.
KV_PER_TOKEN = 2 * 2 * 2 * 4 * 2


def coef(value: float, unit: str = "ms") -> Coefficient:
    return Coefficient(value, unit, "measured", "test value")


def tiny_profile() -> Profile:
    fit = FitQuality(6, 0.01, 0.02, 0.03, "least squares", "test samples")
    paging = CostModel(
        "paging_v1",
        {"setup_ms": coef(0.5), "bandwidth_gbps": coef(2.0, "GB/s")},
        ("bytes",),
        {"bytes": (0, 1e6)},
    )
    return Profile(
        key=ProfileKey("cpu", "tiny", "fp16", 1, "abc123"),
        source="measured",
        hardware=Hardware("cpu", 1 << 30, 1 << 32, 0, {"device_host": coef(2.0, "GB/s")}),
        model=ModelSpec("tiny", 2, 4, 2, 4, 16, 1000, 2, KV_PER_TOKEN, 2000),
        memory=MemoryBudget(64_000, "measured", "1000 tokens"),
        costs={
            "prefill": CostModel(
                "prefill_v1",
                {"c0": coef(1.0), "c_tok": coef(0.5, "ms/token"), "c_attn": coef(0.01, "ms/pair")},
                ("new_tokens", "context_tokens"),
                {"new_tokens": (1, 512), "context_tokens": (0, 512)},
                fit,
            ),
            "decode": CostModel(
                "decode_v1",
                {"d0": coef(2.0), "d_seq": coef(0.5, "ms/seq"), "d_ctx": coef(0.01, "ms/token")},
                ("batch", "total_context"),
                {"batch": (1, 8), "total_context": (16, 4096)},
                fit,
            ),
        },
        provenance=Provenance(
            "tripath calibrate --device cpu", "abc123", "2.3.0", None, "cpu", "2026-01-01T00:00:00Z"
        ),
        speculative=Speculative("tiny-draft", 3, coef(0.2, "1"), coef(1.0, "1")),
        acceptance={"chat": TaskAcceptance(0.7, 3, (0.8, 0.7, 0.6), "measured")},
        # The bandwidth term for 2048 tokens: 2048 * 64 B / (2 GB/s) = 131072 / 2e6 ms = 0.065536 ms.
        paging={"device_host": PagingLink(paging, 0.065536)},
        sequence_parallel={
            2: SequenceParallel(2, (SpRow(128, 1.5, 0.3), SpRow(256, 1.7, 0.4)), None, "measured")
        },
        compression={
            "int8": CompressionMode(coef(0.5, "1"), coef(0.1, "1"), coef(0.01, "ppl"), coef(0.05, "1"))
        },
        notes=("a test profile",),
    )


# --- formulas, hand-computed -----------------------------------------------------------------------
def test_prefill_formula_counts_causal_query_key_pairs():
    # T=4 new tokens after C=10 cached: pairs = 4*(10 + 5/2) = 50 -> 1 + 0.5*4 + 0.01*50 = 3.5 ms.
    assert prefill_v1(new_tokens=4, context_tokens=10, c0=1, c_tok=0.5, c_attn=0.01) == pytest.approx(3.5)
    for t, c in [(1, 0), (3, 0), (5, 7), (64, 1000)]:  # the closed form equals the brute-force pair count
        pairs = sum(c + i for i in range(1, t + 1))
        assert prefill_v1(new_tokens=t, context_tokens=c, c0=0, c_tok=0, c_attn=1) == pytest.approx(pairs)


def test_decode_paging_and_merge_formulas():
    assert decode_v1(batch=3, total_context=1000, d0=2, d_seq=0.5, d_ctx=0.01) == pytest.approx(13.5)
    # 2e9 bytes at 10 GB/s is 0.2 s = 200 ms, plus 1 ms setup.
    assert paging_v1(bytes=2e9, setup_ms=1.0, bandwidth_gbps=10.0) == pytest.approx(201.0)
    assert sp_merge_v1(context_tokens=1000, m0=3, m_ctx=0.002) == pytest.approx(5.0)


def test_registry_names_match_function_signatures():
    for formula in FORMULAS.values():
        names = formula.fn.__code__.co_varnames[: formula.fn.__code__.co_kwonlyargcount]
        assert tuple(names) == formula.inputs + formula.coefficients + (("table",) if formula.table else ())


# --- the Profile API ------------------------------------------------------------------------------------
def test_profile_costs_domain_and_key():
    p = tiny_profile()
    assert p.key_str() == "cpu/tiny/fp16/tp1/abc123"
    assert p.prefill_ms(4, 10) == pytest.approx(3.5)
    assert p.decode_ms(3, 1000) == pytest.approx(13.5)
    assert p.paging_ms("device_host", 2e6) == pytest.approx(0.5 + 1.0)
    assert p.kv_capacity_bytes == 64_000
    decode = p.costs["decode"]
    assert decode.values() == {"d0": 2.0, "d_seq": 0.5, "d_ctx": 0.01}
    assert decode.in_domain(batch=8, total_context=16)
    assert not decode.in_domain(batch=9, total_context=100)
    assert not decode.in_domain(batch=1, total_context=5000)


def test_round_trip_is_equal_and_byte_identical(tmp_path):
    p = tiny_profile()
    first = tmp_path / "p.json"
    save_profile(p, first)
    loaded = load_profile(first)
    assert loaded == p
    second = tmp_path / "q.json"
    save_profile(loaded, second)
    assert first.read_bytes() == second.read_bytes()
    assert Profile.from_dict(p.to_dict()) == p
    # Sweeps ship profiles to worker processes: pickling must keep them equal and usable.
    clone = pickle.loads(pickle.dumps(p))
    assert clone == p and hash(clone) == hash(p) and clone.decode_ms(3, 1000) == p.decode_ms(3, 1000)


def write_json(tmp_path: Path, d: object, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(d, indent=2))  # json writes NaN / Infinity literals, which Python reads back
    return path


def mutate(path: tuple, value: object):
    def apply(d):
        *parents, last = path
        for key in parents:
            d = d[key]
        if value is DELETE:
            del d[last]
        else:
            d[last] = value

    return apply


DELETE = object()
D = ("costs", "decode")
MALFORMED = [
    (mutate(("colour",), "red"), "colour", "unknown field"),
    (
        mutate(D + ("coefficients", "d0", "colour"), "red"),
        "costs.decode.coefficients.d0.colour",
        "unknown field",
    ),
    (mutate(("model", "layers"), "80"), "model.layers", "must be an integer"),
    (mutate(("model", "layers"), 2.0), "model.layers", "must be an integer"),
    (mutate(("model", "layers"), True), "model.layers", "must be an integer"),
    (
        mutate(D + ("coefficients", "d_ctx", "value"), "1"),
        "costs.decode.coefficients.d_ctx.value",
        "must be a number",
    ),
    (
        mutate(D + ("coefficients", "d_ctx", "value"), -1),
        "costs.decode.coefficients.d_ctx.value",
        "must be a finite number >= 0, got -1",
    ),
    (
        mutate(D + ("coefficients", "d_ctx", "value"), math.nan),
        "costs.decode.coefficients.d_ctx.value",
        "got nan",
    ),
    (
        mutate(D + ("coefficients", "d_ctx", "value"), math.inf),
        "costs.decode.coefficients.d_ctx.value",
        "got inf",
    ),
    (mutate(D + ("coefficients", "d_ctx"), DELETE), "costs.decode.coefficients.d_ctx", "missing"),
    (
        mutate(D + ("coefficients", "d_extra"), {"value": 1, "unit": "ms", "source": "measured"}),
        "costs.decode.coefficients.d_extra",
        "not a coefficient of formula decode_v1",
    ),
    (
        mutate(D + ("coefficients", "d0", "source"), "guessed"),
        "costs.decode.coefficients.d0.source",
        "one of",
    ),
    (mutate(D + ("formula",), "decode_v9"), "costs.decode.formula", "unknown formula 'decode_v9'"),
    (mutate(D + ("inputs",), ["batch"]), "costs.decode.inputs", "takes"),
    (mutate(D + ("domain", "batch"), [8, 1]), "costs.decode.domain.batch", "lo must be <= hi"),
    (mutate(D + ("domain", "batch"), DELETE), "costs.decode.domain.batch", "missing"),
    (mutate(("costs", "prefill"), DELETE), "costs.prefill", "missing required cost model"),
    (mutate(("schema_version",), 2), "schema_version", "unknown version 2"),
    (mutate(("schema_version",), DELETE), "schema_version", "missing required field"),
    (mutate(("memory",), DELETE), "memory", "missing required field"),
    (mutate(("memory", "kv_capacity_bytes"), -5), "memory.kv_capacity_bytes", ">= 1"),
    (mutate(("source",), "rumour"), "source", "one of"),
    (mutate(("model", "kv_bytes_per_token"), 65), "model.kv_bytes_per_token", "must be 2*layers"),
    (mutate(("hardware", "links", "device_host", "unit"), "Gb/s"), "hardware.links.device_host.unit", "GB/s"),
    (
        mutate(("paging", "device_host", "cost", "coefficients", "bandwidth_gbps", "value"), 0),
        "paging.device_host.cost.coefficients.bandwidth_gbps.value",
        ">= 1e-06, got 0",
    ),
    (
        mutate(("paging", "device_host", "ms_per_2k_tokens"), 1.0),
        "paging.device_host.ms_per_2k_tokens",
        "0.065536 ms",
    ),
    (mutate(("acceptance", "chat", "mean"), 1.5), "acceptance.chat.mean", "<= 1"),
    (mutate(("acceptance", "chat", "per_position"), [0.9]), "acceptance.chat.per_position", "k = 3 entries"),
    (mutate(("sequence_parallel", "two"), {}), "sequence_parallel.two", "integer"),
    (
        mutate(("sequence_parallel", "2", "rows", 1, "speedup"), -1.0),
        "sequence_parallel.2.rows[1].speedup",
        ">= 0.001 and <= 1000, got -1.0",
    ),
    (mutate(("speculative", "k"), 0), "speculative.k", ">= 1"),
    (
        mutate(("compression", "int8", "kv_bytes_ratio", "value"), 1.5),
        "compression.int8.kv_bytes_ratio.value",
        "<= 1",
    ),
    (mutate(("compression", "int8", "quality_loss"), DELETE), "compression.int8.quality_loss", "missing"),
    (mutate(("notes",), [3]), "notes[0]", "must be a string"),
]


@pytest.mark.parametrize(
    ("change", "field", "problem"), MALFORMED, ids=[m[1] + ":" + m[2] for m in MALFORMED]
)
def test_malformed_profile_names_file_and_field(tmp_path, change, field, problem):
    d = copy.deepcopy(tiny_profile().to_dict())
    change(d)
    path = write_json(tmp_path, d)
    with pytest.raises(InputError) as info:
        load_profile(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {field}: "), message
    assert problem in message, message
    assert info.value.source == str(path) and info.value.field == field


def test_malformed_json_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "schema_version": 1,\n  "key": \n}\n')
    with pytest.raises(InputError, match=r"broken\.json: line 4: malformed JSON"):
        load_profile(path)


def test_missing_file_and_non_object(tmp_path):
    with pytest.raises(InputError, match=r"nope\.json: no such profile file"):
        load_profile(tmp_path / "nope.json")
    with pytest.raises(InputError, match=r"list\.json: \(top level\): must be an object, got array"):
        load_profile(write_json(tmp_path, [1, 2], "list.json"))


def test_construction_validates_too():
    with pytest.raises(ValueError, match="value: must be a finite number >= 0"):
        Coefficient(-0.1, "ms", "measured")
    with pytest.raises(InputError, match="coefficients.d_ctx: missing"):
        CostModel(
            "decode_v1",
            {"d0": coef(1), "d_seq": coef(1)},
            ("batch", "total_context"),
            {"batch": (1, 1), "total_context": (1, 2)},
        )
    with pytest.raises(InputError, match="tp: must be an integer >= 1"):
        ProfileKey("a", "b", "fp16", 0, "c")


# --- atomic saves ---------------------------------------------------------------------------------------
def test_failed_save_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "p.json"
    save_profile(tiny_profile(), target)
    before = target.read_bytes()
    renames = []

    def failing_replace(src, dst):  # fault injection: the disk fails at the rename
        renames.append((Path(src), Path(dst)))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(profile_module.os, "replace", failing_replace)
    changed = tiny_profile().to_dict()
    changed["notes"] = ["changed"]
    with pytest.raises(InputError, match="cannot write profile"):
        save_profile(Profile.from_dict(changed), target)
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["p.json"]  # the temp file was removed
    assert renames and renames[0][0].parent == target.parent  # the temp file lived beside the target


def test_save_into_missing_folder_writes_nothing(tmp_path):
    with pytest.raises(InputError, match="cannot write profile"):
        save_profile(tiny_profile(), tmp_path / "missing" / "p.json")
    assert os.listdir(tmp_path) == []


def test_samples_round_trip(tmp_path):
    path = tmp_path / "s.csv"
    save_samples(path, ("new_tokens", "ms"), [(128, 1.5), (256, 2.25)])
    assert load_samples(path) == [{"new_tokens": "128", "ms": "1.5"}, {"new_tokens": "256", "ms": "2.25"}]
    with pytest.raises(ValueError, match="has 1 fields"):
        save_samples(path, ("a", "b"), [(1,)])


# --- resolution -----------------------------------------------------------------------------------------
def test_resolve_by_name_by_path_and_unknown(tmp_path):
    assert resolve_profile("seed-llama2-70b-a100").source == "seed"
    path = tmp_path / "mine.json"
    save_profile(tiny_profile(), path)
    assert resolve_profile(str(path)) == tiny_profile()
    assert resolve_profile(path) == tiny_profile()
    with pytest.raises(InputError, match=r"unknown profile 'no-such'; available: .*seed-llama2-70b-a100"):
        resolve_profile("no-such")
