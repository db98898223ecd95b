"""tripath recommend: ranking with sense (cost, lossless first, ties to the simpler, never-engaged paths never
above the baseline), layouts and prices, the TTFT floor, headroom, closest when impossible, robustness brackets."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers import SEED as PROFILE
from tripath.planning.candidates import BASELINE, Candidate, by_names, idle_paths
from tripath.planning.capacity import SearchSpec, sized_job
from tripath.planning.headroom import (
    MAX_FACTOR,
    MAX_INDEX,
    confident_factor,
    crossing,
    grid_factor,
    interpolated,
    scaled_step_costs,
)
from tripath.planning.prices import load_prices
from tripath.planning.recommend import (
    RowSummary,
    SearchOptions,
    binding_term,
    p99_prompt,
    rank_key,
    recommend,
    scenario_qps,
    section_sources,
    ttft_floor_ms,
)
from tripath.planning.sweep import run_cached
from tripath.profile.profile import resolve_profile

QPS = 2.5


def small_scenario(ttft_ms: float = 4000.0, tpot_ms: float = 80.0) -> dict:
    """Short fixed-length requests that fit the seed profile's 8K-token KV budget (tests/planning/test_capacity)."""
    return {"name": "small", "workload": {"requests": 40, "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                                          "tasks": {"dialogue": 1.0},
                                          "prompt_tokens": {"kind": "fixed", "value": 1024},
                                          "output_tokens": {"kind": "fixed", "value": 64}},
            "cluster": {"gpus": 1}, "batching": {"max_batch_size": 8},
            "sla": {"ttft_p99_ms": ttft_ms, "tpot_p99_ms": tpot_ms}}


@pytest.fixture(scope="module")
def feasible():
    return recommend(small_scenario(), None, [PROFILE], QPS,
                     options=SearchOptions(replications=1, max_replicas=8, allow_lossy=True))


@pytest.mark.parametrize("flip", [1, 2, 3, 7, 17, 59])
def test_crossing_brackets_the_flip_of_a_monotone_predicate_on_the_grid(flip):
    seen: list[int] = []

    def over(k: int) -> bool:
        seen.append(k)
        return k >= flip

    lo, hi = crossing(over)
    assert (lo, hi) == (flip - 1, flip)
    assert seen[:2] == [1, 2][:len(seen[:2])] and len(seen) == len(set(seen))  # doubling first, no probe twice
    assert len(seen) <= 2 * math.ceil(math.log2(MAX_INDEX)) + 1


def test_crossing_says_none_when_even_the_largest_factor_is_under():
    assert crossing(lambda k: False, max_index=10) == (10, None)
    assert grid_factor(MAX_INDEX) == MAX_FACTOR


def test_interpolated_crossing_is_the_linear_point_of_the_first_term_to_reach_its_target():
    targets = {"ttft": 1000.0, "tpot": 100.0}
    under = {"factor": 1.1, "p99_ms": {"ttft": 800.0, "tpot": 90.0}, "rejected_share": 0.0}
    over = {"factor": 1.2, "p99_ms": {"ttft": 1200.0, "tpot": 140.0}, "targets_ms": targets, "rejected_share": 0.0}
    # ttft reaches 1000 half way (1.15), tpot at 1/5 of the way (1.12): tpot binds
    factor, term = interpolated(under, over)
    assert (factor, term) == (pytest.approx(1.12), "tpot")
    rejected = {**over, "rejected_share": 0.01}
    assert interpolated(under, rejected) == (1.1, None)  # over by a rejection: the under end, no term


def test_confident_factor_is_where_the_first_interval_top_reaches_its_target():
    targets = {"tpot": 100.0}

    def point(factor: float, p99: float, high: float) -> dict:
        return {"factor": factor, "p99_ms": {"tpot": p99}, "ci_high_ms": {"tpot": high}, "targets_ms": targets,
                "rejected_share": 0.0}

    points = [point(1.0, 70.0, 90.0), point(1.05, 75.0, 98.0), point(1.1, 80.0, 108.0), point(1.2, 104.0, 130.0)]
    assert confident_factor(points) == pytest.approx(1.06)  # 98 -> 108 crosses 100 a fifth of the way
    assert interpolated(points[2], points[3])[0] == pytest.approx(1.1 + 0.1 * 20.0 / 24.0)  # the P99 later
    assert confident_factor(points[:2]) == 1.05  # none over: the last factor probed


def test_scaled_step_costs_multiplies_prefill_and_decode_only():
    scaled = scaled_step_costs(PROFILE, 1.5)
    for model in ("prefill", "decode"):
        old, new = PROFILE.costs[model], scaled.costs[model]
        for name, coef in old.coefficients.items():
            assert new.coefficients[name].value == pytest.approx(coef.value * 1.5)
    assert scaled.paging == PROFILE.paging
    with pytest.raises(ValueError):
        scaled_step_costs(PROFILE, 0.0)


def test_binding_term_is_the_smallest_margin():
    terms = {"ttft": {"margin": 0.4}, "tpot": {"margin": 0.05}, "e2e": {"margin": None}}
    assert binding_term(terms) == "tpot"


def row(name: str, paths: list[str], gpus: int, cost: float | None, margin: float) -> dict:
    return {"candidate": {"name": name, "paths": paths}, "gpus": gpus, "cost_usd_per_hour": cost,
            "outcome": {"sla_margin": margin}}


def test_rank_cheapest_then_lossless_then_simpler_whatever_the_margin():
    rows = [row("speculative", ["speculative"], 8, 16.0, 0.5), row("baseline", [], 8, 16.0, 0.01),
            row("compression:int4", ["compression"], 4, 8.0, 0.3), row("tiered", ["tiered"], 4, 8.0, 0.2),
            row("speculative+tiered", ["speculative", "tiered"], 4, 8.0, 0.9)]
    ranked = [r["candidate"]["name"] for r in sorted(rows, key=rank_key)]
    # cheapest first; at one price lossless before lossy, then fewer paths, whatever the margins say
    assert ranked == ["tiered", "speculative+tiered", "compression:int4", "baseline", "speculative"]
    # without prices, GPUs rank
    assert rank_key(row("a", [], 3, None, 0.0))[0] == 3.0


@pytest.mark.parametrize(("paths", "outcome", "idle"), [
    (("speculative",), {"accepted_tokens_per_request": 0.0}, True),
    (("speculative",), {"accepted_tokens_per_request": 12.5}, False),
    (("tiered",), {"paging_ms_per_request": 0.0, "peak_kv_bytes": 10, "kv_capacity_bytes": 100}, True),
    (("tiered",), {"paging_ms_per_request": 3.0, "peak_kv_bytes": 150, "kv_capacity_bytes": 100}, False),
    (("prefix_cache",), {"prefix_cache": {"hit_rate_tokens": 0.0}}, True),
    (("prefix_cache",), {"prefix_cache": {"hit_rate_tokens": 0.4}}, False),
    (("compression",), {}, False),
    (("sequence_parallel",), {}, False),
])
def test_engaged_path_check_for_each_candidate_kind(paths, outcome, idle):
    tables = {"speculative": {}, "tiered": {}, "prefix_cache": {}, "compression": {"mode": "int8"},
              "sequence_parallel": {"degree": 2}}
    candidate = Candidate("x", {p: tables[p] for p in paths})
    assert (idle_paths(candidate, outcome, 8) is not None) == idle


def test_a_never_engaged_path_is_never_recommended_over_the_baseline(feasible):
    rows = {r["candidate"]["name"]: r for r in feasible.rows}
    tiered = rows["tiered"]
    assert tiered.get("idle") is not None  # 1K-token prompts on 8 sequences never fill the KV budget
    assert feasible.recommended != tiered["id"] and feasible.runner_up != tiered["id"]


def test_recommended_is_the_fewest_gpus_meeting_the_sla(feasible):
    rows = [r for r in feasible.rows if r.get("gpus") is not None and not r.get("idle")]
    assert rows, "the small case must be feasible"
    best = feasible.to_dict()["recommended"]
    assert best["gpus"] == min(r["gpus"] for r in rows)
    margins = {t: v["margin"] for t, v in best["terms"].items()}
    outcome = feasible.row(best["id"])["outcome"]
    for term, margin in margins.items():
        target = outcome["sla_targets_ms"][term]
        assert margin == pytest.approx((target - outcome["p99_ms"][term]["mean"]) / target)
    assert best["binding_term"] == min(margins, key=margins.get)
    assert feasible.closest is None
    assert feasible.runner_up != feasible.recommended


def test_lossy_paths_only_when_allowed_and_with_their_quality_cost():
    profile = resolve_profile("aic-llama3.1-70b-tp4-h100")
    data = small_scenario(ttft_ms=60000.0, tpot_ms=1000.0)
    strict = recommend(data, None, [profile], 0.5,
                       options=SearchOptions(replications=1, max_replicas=1, with_robustness=False))
    assert not any("compression" in r["candidate"]["paths"] for r in strict.rows)
    assert set(strict.excluded_lossy) == {c.name for c in by_names(profile, None) if "compression" in c.paths}
    lossy = recommend(data, None, [profile], 0.5, options=SearchOptions(replications=1, max_replicas=1,
                                                                   with_robustness=False, allow_lossy=True))
    assert lossy.excluded_lossy == ()
    comp = {r["candidate"]["name"]: r for r in lossy.rows if "compression" in r["candidate"]["paths"]}
    assert set(comp) == set(strict.excluded_lossy)
    assert comp["compression:fp8"]["quality_loss"]["source"] == "published"  # shown beside it, searched or not
    assert "HumanEval" in comp["compression:fp8"]["quality_loss"]["unit"]


def test_gpu_prices_choose_the_layout_and_an_override_changes_the_choice():
    data = small_scenario(ttft_ms=60000.0, tpot_ms=1000.0)
    names = ["aic-llama3.1-8b-a100", "aic-llama3.1-8b-h100"]
    prices = load_prices()
    quick = SearchOptions(replications=1, max_replicas=2, with_robustness=False)
    cheap = recommend(data, None, names, 0.5, prices, quick)
    best = cheap.row(cheap.recommended)
    assert best["layout"]["gpu"] == "a100-80gb"  # one replica meets on either: the cheaper GPU-hour wins
    assert best["cost_usd_per_hour"] == pytest.approx(best["gpus"] * prices.price("a100-80gb"))
    assert best["usd_per_million_output_tokens"] == pytest.approx(
        best["cost_usd_per_hour"] / (best["outcome"]["output_tokens_per_s"] * 3600.0) * 1e6)
    flipped = recommend(data, None, names, 0.5, prices.with_overrides([("h100-sxm", 0.5)]), quick)
    assert flipped.row(flipped.recommended)["layout"]["gpu"] == "h100-sxm"


def test_ttft_floor_is_the_unloaded_prefill_and_rules_a_layout_out():
    data = small_scenario()
    assert p99_prompt(data, None) == 1024
    floor = ttft_floor_ms(data, None, PROFILE, BASELINE, 1024)
    from tripath.simulator.costs import IterationCost

    assert floor == pytest.approx(IterationCost.from_profile(PROFILE).mixed_s([1024], 0, 0) * 1000.0)
    # a target under the floor: the baseline is never simulated, and nothing meets
    rec = recommend(small_scenario(ttft_ms=floor / 2.0), None, [PROFILE], QPS,
                    options=SearchOptions(replications=1, max_replicas=2, with_robustness=False))
    base = next(r for r in rec.rows if r["candidate"]["name"] == "baseline")
    assert "prefill alone" in base["pruned"] and "outcome" not in base
    assert rec.recommended is None


def _meets(cost: float, rate: float, name: str, replicas: int) -> bool:
    profile = PROFILE if cost == 1.0 else scaled_step_costs(PROFILE, cost)
    candidate = by_names(PROFILE, [name])[0]
    spec = SearchSpec(json.dumps(small_scenario()), None, profile.to_json(), candidate, QPS * rate,
                      attainment_levels=())
    return run_cached(sized_job(spec, replicas, spec.qps)).meets_sla


def test_robustness_brackets_the_cost_and_rate_factors_on_the_grid(feasible):
    robust = feasible.robustness
    best = feasible.row(feasible.recommended)
    assert robust is not None and robust["candidate"] == best["candidate"]["name"]
    n = robust["replicas"]
    for key, axis in (("step_costs", 0), ("arrival_rate", 1)):
        bound = robust[key]
        met, missed = bound["meets_up_to"], bound["misses_at"]
        assert missed is not None and 1.0 <= met < missed
        assert missed - met == pytest.approx(robust["grid_step"])  # neighbours on the grid
        assert met <= bound["estimate"] <= missed
        factors = [(met, 1.0), (missed, 1.0)] if axis == 0 else [(1.0, met), (1.0, missed)]
        assert _meets(*factors[0], robust["candidate"], n)
        assert not _meets(*factors[1], robust["candidate"], n)
        assert 1.0 <= bound["confident"] <= bound["estimate"]
        probed = {p["factor"]: p for p in bound["points"]}
        assert probed[1.0]["over"] is False and probed[missed]["over"] is True
    room = feasible.headroom()
    assert room is not None and room["headroom"] == pytest.approx(
        min(robust[k]["estimate"] for k in ("step_costs", "arrival_rate")) - 1.0)
    assert room["thin"] == (room["headroom"] < 0.10)


def test_impossible_sla_gives_the_closest_candidate_and_by_how_much():
    rec = recommend(small_scenario(ttft_ms=950.0), None, [PROFILE], QPS,
                    options=SearchOptions(replications=1, max_replicas=2))
    assert rec.recommended is None and rec.robustness is None
    ran = [r for r in rec.rows if r.get("outcome") and not r["outcome"].get("error")]
    best_margin = max(r["outcome"]["sla_margin"] for r in ran)
    closest = rec.to_dict()["closest"]
    assert rec.row(closest["id"])["outcome"]["sla_margin"] == best_margin
    ttft = closest["terms"]["ttft"]
    assert ttft["over_by"] == pytest.approx((ttft["p99_ms"] - 950.0) / 950.0)
    assert closest["binding_term"] == "ttft"


def test_scenario_qps_and_sources():
    assert scenario_qps(small_scenario()) == 1.0
    assert scenario_qps({"workload": {"arrival": {"load_fraction": 0.5}}}) is None
    sources = section_sources(PROFILE)
    assert "seed" in sources["costs"] or "fitted" in sources["costs"]


def test_default_scenario_is_a_measured_gpu_profile_chunked_mooncake_lengths_a_rate_and_an_sla():
    from tripath.planning.scenario_dict import load_scenario_dict

    data, _ = load_scenario_dict("default")
    assert data["profile"].startswith("aic-") and resolve_profile(data["profile"]).source == "published"
    assert data["batching"]["policy"] == "chunked"  # vLLM always chunks prefill
    assert scenario_qps(data) is not None and "load_fraction" not in data["workload"]["arrival"]
    assert {data["workload"][c]["trace"] for c in ("prompt_tokens", "output_tokens")} == {"mooncake-conversation"}
    assert data["sla"]["ttft_p99_ms"] > 0 and data["sla"]["tpot_p99_ms"] > 0


def test_batch_ladder_halves_doubles_and_quadruples_the_scenarios_own():
    from tripath.planning.recommend import batch_ladder

    assert batch_ladder(64) == (32, 128, 256)
    assert batch_ladder(1) == (2, 4)  # half of 1 is 1, the scenario's own
    assert batch_ladder(64, (64, 16, 16, 512)) == (16, 512)
    assert batch_ladder(64, ()) == ()


def test_max_batch_is_searched_below_the_cheapest_row_and_exported():
    from tripath.planning.export.files import recommended_sglang, recommended_suggestion
    from tripath.planning.scenario_dict import with_fields

    data = with_fields(small_scenario(), {"batching.max_batch_size": 1})
    fixed = recommend(data, None, [PROFILE], QPS, options=SearchOptions(replications=1, max_replicas=8,
                                                                    with_robustness=False, batch_sizes=()))
    searched = recommend(data, None, [PROFILE], QPS,
                         options=SearchOptions(replications=1, max_replicas=8, with_robustness=False))
    own, best = fixed.row(fixed.recommended), searched.row(searched.recommended)
    assert fixed.batch_search == {"sizes": [], "searched": 0, "met_cheaper": 0}
    assert own["max_batch_size"] == 1 and best["max_batch_size"] == 2  # measured: 5 replicas at 1, 4 at 2
    assert best["gpus"] < own["gpus"] and best["id"].endswith(", max batch 2")
    assert searched.batch_search["sizes"] == [2, 4] and searched.batch_search["met_cheaper"] >= 1
    for row in searched.rows:  # every other batch's row was searched strictly below the cheapest batch-1 row
        if row.get("max_batch_size") != 1 and row.get("outcome"):
            assert row["outcome"]["replicas"] * row["gpus_per_replica"] < own["gpus"]
    summary = searched.to_dict()
    assert summary["recommended"]["max_batch_size"] == 2
    from tripath.planning.recommend_text import batch_search_line

    line = batch_search_line(summary)
    assert line is not None and "searched: 2, 4 " in line
    assert f"{searched.batch_search['met_cheaper']} met cheaper" in line
    assert batch_search_line(fixed.to_dict()) is None  # the phase did not run
    assert "--max-num-seqs 2" in recommended_suggestion(summary, PROFILE, data).command()
    assert "--max-running-requests 2" in recommended_sglang(summary, PROFILE, data).command()


def test_every_row_summary_round_trips_through_its_one_codec(feasible):
    result = feasible.to_dict()
    shown = [result["recommended"], result["runner_up"], result["closest"], *result["others"]]
    for summary in (s for s in shown if s is not None):
        typed = RowSummary.from_dict(summary)
        assert typed.to_dict() == summary and list(typed.to_dict()) == list(summary)
        assert RowSummary.from_dict(json.loads(json.dumps(summary))) == typed
    with pytest.raises(ValueError, match="missing"):
        RowSummary.from_dict({"id": "x"})
