"""tripath matrix | plan | whatif | stack | breakeven: JSON output, origins, input errors -> exit 2."""

from __future__ import annotations

import json

from tripath.cli.main import main

SCENARIO = """
name = "cli-small"
profile = "seed-llama2-70b-a100"
[workload]
requests = 40
[workload.arrival]
kind = "poisson"
rate_per_s = 0.5
[workload.tasks]
dialogue = 1.0
[workload.prompt_tokens]
kind = "fixed"
value = 1024
[workload.output_tokens]
kind = "fixed"
value = 32
[batching]
policy = "dynamic"
max_batch_size = 8
[sla]
ttft_p99_ms = 3000.0
tpot_p99_ms = 100.0
"""


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def scenario_file(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text(SCENARIO)
    return str(path)


def test_breakeven_json_says_its_origin(capsys):
    code, out, _ = run(capsys, "breakeven", "--profile", "seed-llama2-70b-a100", "--k", "5", "--batch", "1", "--json")
    assert code == 0
    data = json.loads(out)
    assert "not simulated" in data["numbers_from"]
    assert data["tasks"]["math"]["pays"] is False


def test_plan_json(capsys, tmp_path):
    code, out, _ = run(capsys, "plan", scenario_file(tmp_path), "--qps", "1", "--candidates", "baseline",
                       "speculative", "--gpu-price", "2.5", "--json", "--workers", "1", "--no-cache")
    assert code == 0
    data = json.loads(out)
    assert data["numbers_from"].startswith("simulated on a 'seed' profile")
    rows = {r["candidate"]["name"]: r for r in data["candidates"]}
    for row in rows.values():
        if row.get("gpus") is not None:
            assert row["cost_usd_per_hour"] == row["gpus"] * 2.5


def test_whatif_and_stack_text(capsys, tmp_path):
    path = scenario_file(tmp_path)
    code, out, _ = run(capsys, "whatif", path, "--vary", "batching.max_wait_ms=0,10", "--replications", "2",
                       "--workers", "1", "--cache-dir", str(tmp_path / "c"))
    assert code == 0 and "batching.max_wait_ms=10" in out and "simulated on a 'seed' profile" in out
    code, out, _ = run(capsys, "stack", path, "--replications", "1", "--workers", "1", "--no-cache")
    assert code == 0 and "negative coupling:" in out


def test_input_errors_exit_2_with_one_line(capsys, tmp_path):
    path = scenario_file(tmp_path)
    code, out, err = run(capsys, "whatif", path, "--vary", "batching.max_wait_ms")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "whatif", path, "--vary", "batching.nonsense=1", "--no-cache")
    assert code == 2 and "nonsense" in err
    code, _, err = run(capsys, "plan", path, "--qps", "1", "--candidates", "warp-drive", "--no-cache")
    assert code == 2 and "warp-drive" in err
    code, _, err = run(capsys, "matrix", "--profile", "no-such-profile", "--no-cache")
    assert code == 2 and "no-such-profile" in err


def test_matrix_json_and_text_show_primary_path_and_memory(capsys, tmp_path):
    cache = str(tmp_path / "c")  # the text run below is served from the cache the JSON run filled
    code, out, _ = run(capsys, "matrix", "--profile", "seed-llama2-70b-a100", "--requests", "20", "--json",
                       "--workers", "1", "--cache-dir", cache)
    assert code == 0
    cells = {c["scenario"]: c for c in json.loads(out)["cells"]}
    dialogue = cells["dialogue-medium"]
    assert dialogue["attribution"]["needed_for_memory"] == ["tiered"]  # 8-16K on an 8K-token budget
    assert dialogue["seed_claim"] == "gain" and cells["very-long-single-gpu"]["seed_claim"] == "memory"
    assert all(c["seed_match"] in ("agrees", "same path, other reason", "differs") for c in cells.values())
    code, out, _ = run(capsys, "matrix", "--profile", "seed-llama2-70b-a100", "--requests", "20",
                       "--workers", "1", "--cache-dir", cache)
    assert code == 0 and "needed for memory: tiered" in out and "a gain claim" in out and "why: " in out


def test_matrix_and_plan_on_a_tp2_profile_size_the_one_gpu_cells(capsys):
    code, out, err = run(capsys, "matrix", "--profile", "published-llama2-70b-tp2-a100", "--requests", "10",
                         "--workers", "1", "--no-cache")
    assert code == 0 and "error" not in err
    assert out.count("sized to 2 GPUs: the seed's rows count GPUs that each hold one model replica") == 4
    assert out.count("sized to 4 GPUs") == 1  # the 2-GPU row
    assert "tiered never engaged" in out  # 8-16K at batch 1 fits the TP2 KV budget: said, not a silent copy
    code, out, _ = run(capsys, "plan", "dialogue-medium", "--profile", "published-llama2-70b-tp2-a100", "--qps",
                       "0.005", "--requests", "10", "--candidates", "baseline", "tiered", "--max-replicas", "2",
                       "--workers", "1", "--no-cache")
    assert code == 0 and "replica(s) = 2 GPU(s)" in out and "cluster.gpus (1) is not used" in out
    assert "tiered never engaged" in out
