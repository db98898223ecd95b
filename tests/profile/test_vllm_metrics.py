"""The vLLM metrics import: per-position and mean acceptance computed by hand from a dump written here."""

from __future__ import annotations

import math
import tomllib

import pytest

from tripath.core.errors import InputError
from tripath.core.speculative import expected_tokens
from tripath.profile.profile import resolve_profile
from tripath.profile.vllm_metrics import merge_overlay, overlay, parse_counters, read_acceptance, scenario_table
from tripath.simulator.scenario.strategy import strategy_from_dict

M = 'model_name="llama"'
# two engines, summed: rounds 600 + 400, draft tokens 3 per round, accepted 900 + 600
DUMP = f"""# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",{M}}} 600.0
vllm:spec_decode_num_drafts_total{{engine="1",{M}}} 400.0
vllm:spec_decode_num_drafts_created{{engine="0",{M}}} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{{engine="0",{M}}} 1800.0
vllm:spec_decode_num_draft_tokens_total{{engine="1",{M}}} 1200.0
vllm:spec_decode_num_accepted_tokens_total{{engine="0",{M}}} 900.0
vllm:spec_decode_num_accepted_tokens_total{{engine="1",{M}}} 600.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{M},position="0"}} 500.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="1",{M},position="0"}} 300.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{M},position="1"}} 250.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="1",{M},position="1"}} 200.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{M},position="2"}} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="1",{M},position="2"}} 100.0
vllm:num_requests_running{{engine="0",{M}}} 0.0
"""


def _dump(tmp_path, text: str):
    path = tmp_path / "metrics.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_per_position_and_mean_from_the_counters(tmp_path):
    entry, counters = read_acceptance(_dump(tmp_path, DUMP), "dialogue")
    # rounds 1000; accepted at positions 800, 450, 250 (sum 1500 = accepted tokens)
    assert entry.per_position == pytest.approx((800 / 1000, 450 / 800, 250 / 450), rel=1e-15)
    # a = accepted / (accepted + rounds short of K): 1500 / (1500 + 1000 - 250)
    assert entry.mean == pytest.approx(1500 / 2250, rel=1e-15)
    assert (entry.k, entry.source, counters.model_name) == (3, "measured", "llama")
    assert "dialogue" in entry.note and "metrics.txt" in entry.note


def test_names_without_total_read_the_same(tmp_path):
    plain = DUMP.replace("_total{", "{")
    assert read_acceptance(_dump(tmp_path, plain), "t")[0].mean == pytest.approx(1500 / 2250, rel=1e-15)


def test_without_per_position_the_mean_length_gives_a_through_e(tmp_path):
    text = "\n".join(line for line in DUMP.splitlines() if "per_pos" not in line)
    entry, _ = read_acceptance(_dump(tmp_path, text), "t")
    assert entry.per_position is None and entry.k == 3  # 3000 draft tokens / 1000 rounds
    assert expected_tokens(3, entry.mean) == pytest.approx(1 + 1500 / 1000, rel=1e-12)


@pytest.mark.parametrize(("old", "new", "line", "problem"), [
    ('position="1"}} 250.0', 'position="1"}}', 12, "missing value"),
    ('{engine="1",model_name="llama"}} 400.0', '{engine="1",model_name="llama"}} -400.0', 4, "whole number in 0"),
    ('{engine="0",model_name="llama"}} 900.0', '{engine="0",model_name="llama"}} 9900.0', 8, "more tokens accepted"),
    ('position="2"}} 150.0', 'position="2"}} 450.0', 14, "exceeds position 1"),
    ('{engine="1",model_name="llama"}} 600.0', '{engine="1",model_name="llama"}} 650.0', 8, "differs from the sum"),
])
def test_a_bad_dump_names_the_file_and_line(tmp_path, old, new, line, problem):
    text = DUMP.replace(old.replace("}}", "}"), new.replace("}}", "}"))
    assert text != DUMP
    path = _dump(tmp_path, text)
    with pytest.raises(InputError, match=f"line {line}: .*{problem}") as err:
        read_acceptance(path, "t")
    assert str(err.value).startswith(str(path))


def test_a_missing_counter_and_several_models_are_errors(tmp_path):
    without = "\n".join(line for line in DUMP.splitlines() if "num_drafts" not in line)
    with pytest.raises(InputError, match="vllm:spec_decode_num_drafts: counter not in the dump"):
        parse_counters(without, "m.txt")
    two = DUMP + DUMP.replace('model_name="llama"', 'model_name="other"')
    with pytest.raises(InputError, match="several models .*llama, other"):
        parse_counters(two, "m.txt")
    assert parse_counters(two, "m.txt", model="other").drafts.value == 1000
    with pytest.raises(InputError, match="repeats the series of line 3"):
        parse_counters(DUMP + DUMP.splitlines()[2], "m.txt")


def test_overlay_merges_into_a_profile_and_the_table_parses_as_a_scenario(tmp_path):
    entry, _ = read_acceptance(_dump(tmp_path, DUMP), "dialogue")
    seed = resolve_profile("seed-llama2-70b-a100")
    merged = merge_overlay(seed, overlay({"dialogue": entry}), "overlay.json")
    assert merged.acceptance["dialogue"] == entry and merged.acceptance["math"] == seed.acceptance["math"]
    with pytest.raises(InputError, match="overlay.json: acceptance.dialogue.mean"):
        merge_overlay(seed, {"acceptance": {"dialogue": {**entry.to_dict(), "mean": 1.5}}}, "overlay.json")
    toml = tomllib.loads(scenario_table({"dialogue": entry, "prompt_lookup:code": entry}))
    spec = strategy_from_dict(toml["strategy"]).speculative
    assert [task for task, _ in spec.acceptance] == ["dialogue", "prompt_lookup:code"]
    assert math.isclose(spec.acceptance[0][1], entry.mean, rel_tol=1e-5)
