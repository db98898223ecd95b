"""recommend's fast path (bound-first searches, largest first, on a process pool; the two robustness bisections in
parallel) gives exactly the serial full search's recommendation, with fewer simulations."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.helpers import SEED as PROFILE
from tests.planning.test_recommend import QPS, small_scenario
from tripath.planning.cache import ResultCache
from tripath.planning.candidates import by_names
from tripath.planning.capacity import SearchSpec, cost_estimate, from_cache, plan
from tripath.planning.executor import LocalPoolExecutor
from tripath.planning.recommend import SearchOptions, recommend
from tripath.planning.sweep import NotCached

MAX_REPLICAS = 4


def simulations(cache: ResultCache) -> int:
    """How many distinct simulations ran (one cache entry each)."""
    return sum(1 for _ in cache.directory.rglob("*.json"))


# every candidate meets (SP at 1 replica) / only the SP ones meet, at 3 / none meets
SLAS = [(30000.0, 1000.0), (1500.0, 80.0), (200.0, 80.0)]


@pytest.mark.parametrize(("ttft_ms", "tpot_ms"), SLAS)
def test_parallel_bound_first_equals_the_serial_full_search(tmp_path, ttft_ms, tpot_ms):
    data = small_scenario(ttft_ms=ttft_ms, tpot_ms=tpot_ms)
    old_cache, new_cache = ResultCache(tmp_path / "serial"), ResultCache(tmp_path / "parallel")
    serial = plan(data, None, PROFILE, QPS, replications=1, max_replicas=MAX_REPLICAS, attainment_levels=(),
                  executor=LocalPoolExecutor(1), cache=old_cache, bound_first=False, longest_first=False)
    fast = plan(data, None, PROFILE, QPS, replications=1, max_replicas=MAX_REPLICAS, attainment_levels=(),
                executor=LocalPoolExecutor(2), cache=new_cache, bound_first=True)
    # every row the same but for the search trace: the same outcome dicts, the same sizes
    strip = [{k: v for k, v in row.items() if k != "search"} for row in serial.rows]
    assert [{k: v for k, v in row.items() if k != "search"} for row in fast.rows] == strip
    missed = [row for row in fast.rows if "search" in row and row["replicas"] is None]
    for row in missed:  # a miss at the bound is the one simulation of that candidate
        assert [(s["replicas"], s["meets_sla"]) for s in row["search"]] == [(MAX_REPLICAS, False)]
    for row in fast.rows:
        if row.get("replicas") is not None:
            assert (row["search"][0]["replicas"], row["search"][0]["meets_sla"]) == (MAX_REPLICAS, True)
    if missed:
        assert simulations(new_cache) < simulations(old_cache)
    met = [row for row in fast.rows if row.get("replicas") is not None]
    assert (bool(met), bool(missed)) == {SLAS[0]: (True, False), SLAS[1]: (True, True),
                                         SLAS[2]: (False, True)}[(ttft_ms, tpot_ms)]


def test_submission_order_does_not_change_the_plan():
    data = small_scenario(ttft_ms=1500.0)
    given = plan(data, None, PROFILE, QPS, replications=1, max_replicas=MAX_REPLICAS, attainment_levels=(0.9,),
                 executor=LocalPoolExecutor(2), longest_first=False)
    largest = plan(data, None, PROFILE, QPS, replications=1, max_replicas=MAX_REPLICAS, attainment_levels=(0.9,),
                   executor=LocalPoolExecutor(2), longest_first=True)
    assert largest.to_dict() == given.to_dict()
    assert [r["candidate"]["name"] for r in largest.rows] == [c.name for c in by_names(PROFILE, None)]


def test_cost_estimate_ranks_the_per_iteration_loop_and_more_gpus_higher():
    text = json.dumps(small_scenario(), sort_keys=True)

    def estimate(name: str, max_replicas: int = MAX_REPLICAS) -> float:
        candidate = by_names(PROFILE, [name])[0]
        return cost_estimate(SearchSpec(text, None, PROFILE.to_json(), candidate, QPS, max_replicas=max_replicas))

    assert estimate("speculative") > estimate("sequence_parallel") > estimate("baseline") > 0.0
    assert estimate("sequence_parallel+tiered") == 2 * estimate("tiered")  # SP degree 2: twice the GPUs
    assert estimate("baseline", 2 * MAX_REPLICAS) == 2 * estimate("baseline")


def test_preload_traces_reads_the_scenarios_traces_into_this_process(monkeypatch):
    from tripath.planning import sweep
    from tripath.simulator.scenario import traces

    read: list[str] = []
    real = traces.load_trace

    def counting(name, base_dir=None):
        read.append(name)
        return real(name, base_dir)

    monkeypatch.setattr(sweep, "load_trace", counting)
    data = {**small_scenario(), "workload": {**small_scenario()["workload"],
            "prompt_tokens": {"kind": "empirical", "trace": "mooncake-conversation", "column": "prompt"},
            "output_tokens": {"kind": "empirical", "trace": "mooncake-conversation", "column": "output"}}}
    sweep.preload_traces(data)
    assert read == ["mooncake-conversation"]  # once, though two columns use it
    sweep.preload_traces({"name": "broken", "workload": {"requests": -1}})  # left to the jobs to report
    assert read == ["mooncake-conversation"]


def test_a_warm_rerun_and_a_partly_warm_one_give_the_cold_answer(tmp_path):
    data = small_scenario(ttft_ms=1500.0)
    cache = ResultCache(tmp_path)
    options = SearchOptions(replications=1, max_replicas=MAX_REPLICAS)
    sized = recommend(data, None, [PROFILE], QPS, options=replace(options, with_robustness=False),
                      executor=LocalPoolExecutor(2), cache=cache)
    assert sized.robustness is None
    sized_only = simulations(cache)
    cold = recommend(data, None, [PROFILE], QPS, options=options, executor=LocalPoolExecutor(2),
                     cache=cache)  # sizing cached
    assert simulations(cache) > sized_only
    entries = simulations(cache)
    warm = recommend(data, None, [PROFILE], QPS, options=options, executor=LocalPoolExecutor(2), cache=cache)
    assert simulations(cache) == entries  # nothing simulated again
    assert warm.to_dict() == cold.to_dict()
    assert cold.to_dict() == recommend(data, None, [PROFILE], QPS, options=options,
                                       executor=LocalPoolExecutor(1)).to_dict()


class Recording(LocalPoolExecutor):
    """A one-worker executor that records what reaches it, and checks that each job needs a simulation: a search
    or a headroom walk the cache holds whole must be done in the caller, never sent here."""

    def __init__(self) -> None:
        super().__init__(1)
        self.jobs: list[object] = []

    def map(self, fn, specs, progress=None):
        for spec in specs:
            if isinstance(spec, SearchSpec):
                assert from_cache(spec) is None
            else:
                with pytest.raises(NotCached):
                    replace(spec, cached_only=True).walk()
        self.jobs += list(specs)
        return super().map(fn, specs, progress)


def test_only_what_needs_a_simulation_reaches_the_executor_and_the_answer_is_the_cold_one(tmp_path):
    cache = ResultCache(tmp_path)
    options = SearchOptions(replications=1, max_replicas=MAX_REPLICAS)
    cold_run = Recording()
    cold = recommend(small_scenario(ttft_ms=1500.0), None, [PROFILE], QPS, options=options, executor=cold_run,
                     cache=cache)
    assert cold_run.jobs  # an empty cache: everything went to the executor
    again = Recording()
    assert recommend(small_scenario(ttft_ms=1500.0), None, [PROFILE], QPS, options=options, executor=again,
                     cache=cache).to_dict() == cold.to_dict()
    assert again.jobs == []  # the same inputs: every search and both headroom walks read from the cache here
    looser = small_scenario(ttft_ms=3000.0)  # another SLA: cached probes re-judged, the rest simulated
    changed = Recording()
    result = recommend(looser, None, [PROFILE], QPS, options=options, executor=changed, cache=cache)
    assert len(changed.jobs) < len(cold_run.jobs)
    assert result.to_dict() == recommend(looser, None, [PROFILE], QPS, options=options).to_dict()  # no cache
