"""tripath recommend: --help, --json, text, input errors -> exit 2 with one line, prices, export."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_planning_cli import run, scenario_file
from tripath.cli.main import main
from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.planning import recommend_text as render


def test_help_exits_0(capsys):
    with pytest.raises(SystemExit) as info:
        main(["recommend", "--help"])
    assert info.value.code == 0
    assert "--gpu-price" in capsys.readouterr().out


def test_json_and_text(capsys, tmp_path):
    path = scenario_file(tmp_path)
    common = ["--max-replicas", "2", "--replications", "2", "--budget-requests", "1000", "--workers", "1",
              "--cache-dir", str(tmp_path / "c")]
    code, out, _ = run(capsys, "recommend", path, "--gpu-price", "a100-80gb=2.5", "--json", *common)
    assert code == 0
    data = json.loads(out)
    assert data["qps"] == 0.5 and data["numbers_from"].startswith("simulated on 'seed' profile")
    best = data["recommended"]
    assert best is not None and best["cost_usd_per_hour"] == best["gpus"] * 2.5
    assert best["verdict"]["verdict"] == "meets" and best["verdict"]["replications"] == 2
    assert data["decision_rule"]["tail_minimum_requests"] == 1000
    assert data["robustness"]["step_costs"]["misses_at"] > data["robustness"]["step_costs"]["meets_up_to"]
    assert data["headroom"]["thin"] == (data["headroom"]["headroom"] < 0.10)
    code, out, _ = run(capsys, "recommend", path, "--gpu-price", "a100-80gb=2.5", *common)
    assert code == 0 and f"Recommended: {best['candidate']} on a100-80gb TP1" in out and "<- binds" in out
    assert "P99 reaches its target at step costs" in out and "Headroom: " in out
    assert "\n".join(render.headline_text(data, 2)) in out  # the one renderer's headline, from the --json read back
    assert "Numbers: simulated on" in out
    # every candidate ruled out before simulating is listed once under its reason (here the prefix-cache ones:
    # the scenario's workload has no hash_ids)
    assert data["not_applicable"]
    line = next(x for x in out.splitlines() if x.startswith("not applicable: "))
    for row_id, why in data["not_applicable"].items():
        assert why in line and row_id.split(" on ", 1)[0] in line


def test_input_errors_exit_2_with_one_line(capsys, tmp_path):
    code, out, err = run(capsys, "recommend", str(tmp_path / "missing.toml"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    path = tmp_path / "norate.toml"
    with open(scenario_file(tmp_path)) as f:
        path.write_text(f.read().replace("rate_per_s = 0.5", "load_fraction = 0.5"))
    code, out, err = run(capsys, "recommend", str(path), "--no-cache")
    assert code == 2 and out == "" and "rate_per_s" in err and len(err.strip().splitlines()) == 1
    for bad in (["--gpu-price", "h100=3"], ["--gpu-price", "a100-80gb=-1"], ["--gpus", "tpu"],
                ["--replications", "1"]):
        with pytest.raises(SystemExit) as info:  # argparse's own one-line usage error
            code = main(["recommend", scenario_file(tmp_path), "--no-cache", *bad])
            raise SystemExit(code)
        assert info.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) <= 3


def test_export_writes_what_json_prints_and_a_scenario_that_reruns_it(capsys, tmp_path):
    path = scenario_file(tmp_path)
    common = ["--max-replicas", "2", "--replications", "2", "--budget-requests", "1000", "--workers", "1",
              "--no-robustness", "--cache-dir", str(tmp_path / "c")]
    out_dir = tmp_path / "export"
    code, out, _ = run(capsys, "recommend", path, "--qps", "0.25", "--json", "--export", str(out_dir), *common)
    assert code == 0
    printed = json.loads(out)
    assert json.loads((out_dir / "recommendation.json").read_text()) == printed
    vllm = printed["vllm"]
    assert vllm["label"] == "suggestion" and vllm["command"].startswith("vllm serve ")
    assert (out_dir / "vllm.txt").read_text().endswith(vllm["command"] + "\n")
    assert printed["sglang"]["command"].startswith("python -m sglang.launch_server")
    assert (out_dir / "sglang.txt").is_file()
    # the kept scenario carries the --qps given, so rerunning it gives the same answer
    code, out, _ = run(capsys, "recommend", str(out_dir / "scenario.toml"), "--json", *common)
    again = json.loads(out)
    assert code == 0 and again["qps"] == 0.25
    assert again["recommended"] == printed["recommended"] and again["vllm"] == printed["vllm"]
    code, out, _ = run(capsys, "recommend", path, *common)
    assert code == 0 and "vLLM suggestion" in out and "vllm serve" in out and "SGLang suggestion" in out


def test_export_into_an_unwritable_place_is_one_line(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = run(capsys, "recommend", scenario_file(tmp_path), "--max-replicas", "1", "--replications", "2",
                         "--budget-requests", "1000", "--workers", "1", "--no-robustness", "--no-cache", "--export",
                         str(blocker / "sub"))
    assert code == 2 and out == "" and "--export" in err and len(err.strip().splitlines()) == 1


def test_a_trace_replay_is_recommended_at_the_asked_rate(capsys, tmp_path):
    """A trace scenario keeps its own arrivals, lengths and hash_ids, paced to --qps: every candidate runs
    (none refused for its arrival kind), and prefix caching is a candidate because the trace has block ids."""
    text = (SCENARIOS_DIR / "mooncake-prefix-replay.toml").read_text().replace("requests = 1000", "requests = 40")
    path = tmp_path / "replay.toml"
    path.write_text(text)
    code, out, _ = run(capsys, "recommend", str(path), "--qps", "0.2", "--max-replicas", "1", "--replications",
                       "2", "--budget-requests", "1000", "--no-robustness", "--workers", "1", "--json",
                       "--only-profile", "--cache-dir", str(tmp_path / "c"))
    assert code == 0
    data = json.loads(out)
    assert data["qps"] == 0.2 and data["not_applicable"] == {}  # nothing refused for its arrival kind
    ran = [o["candidate"] for o in data["others"]] + [data[k]["candidate"] for k in ("recommended", "closest")
                                                       if data[k] is not None]
    assert {"baseline", "prefix_cache", "prefix_cache+tiered", "sequence_parallel+prefix_cache"} <= set(ran)
    assert all(o["terms"] for o in data["others"])  # each was simulated: P99 per term
