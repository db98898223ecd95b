"""`tripath profile acceptance`: a vLLM metrics dump to an overlay, a scenario table or a merged profile."""

from __future__ import annotations

import json
import tomllib

import pytest

from tripath.cli.main import main
from tripath.profile.profile import load_profile

DUMP = """vllm:spec_decode_num_drafts_total{model_name="m"} 200.0
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 400.0
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 250.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 100.0
"""
# per position 150/200, 100/150; a = 250 / (250 + 200 - 100)
A = 250 / 350


@pytest.fixture
def dump(tmp_path):
    path = tmp_path / "metrics.txt"
    path.write_text(DUMP, encoding="utf-8")
    return path


def test_overlay_scenario_and_json(dump, capsys):
    assert main(["profile", "acceptance", str(dump), "--task", "code"]) == 0
    entry = json.loads(capsys.readouterr().out)["acceptance"]["code"]
    assert entry["mean"] == pytest.approx(A, rel=1e-15) and entry["per_position"] == [0.75, 100 / 150]
    assert main(["profile", "acceptance", str(dump), "--task", "code", "--as", "scenario"]) == 0
    table = tomllib.loads(capsys.readouterr().out)["strategy"]["speculative"]["acceptance"]
    assert table == {"code": pytest.approx(A, rel=1e-5)}
    assert main(["profile", "acceptance", str(dump), "--task", "code", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mean_acceptance_length"] == 1 + 250 / 200 and out["draft_acceptance_rate"] == 250 / 400


def test_into_writes_the_merged_profile(dump, tmp_path, capsys):
    out = tmp_path / "merged.json"
    assert main(["profile", "acceptance", str(dump), "--task", "code", "--into", "seed-llama2-70b-a100",
                 "--out", str(out)]) == 0
    merged = load_profile(out)
    assert merged.acceptance["code"].source == "measured" and merged.acceptance["math"].mean == 0.55
    assert main(["profile", "acceptance", str(dump), "--task", "code", "--into", "seed-llama2-70b-a100"]) == 2
    assert "--out" in capsys.readouterr().err


def test_a_bad_dump_exits_2_with_the_line(dump, capsys):
    dump.write_text(DUMP.replace("400.0", "-400.0"), encoding="utf-8")
    assert main(["profile", "acceptance", str(dump), "--task", "code"]) == 2
    err = capsys.readouterr().err
    assert f"{dump}: line 2: " in err and "Traceback" not in err
    assert main(["profile", "acceptance", str(dump.with_name("none.txt")), "--task", "code"]) == 2
    assert "metrics dump not found" in capsys.readouterr().err
