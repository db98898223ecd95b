"""Prefix caching in the simulator: hits, what a hit costs, eviction, routing, tiers, and the cache off."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SEED, TINY
from tripath.core.errors import InputError
from tripath.simulator.paths.prefix import PrefixCache, PrefixSetup, route
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.prefix_workload import RequestPrefixes
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.scenario.strategy import DEVICE_HOST, HOST_SSD, PrefixCacheSpec
from tripath.simulator.summary import summary

BT = 256


def _scenario(prompt: int = 1000, output: int = 1, requests: int = 2, rate: float = 0.001, gpus: int = 1,
              share: float = 1.0, routing: str = "affinity", **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "prefix",
        "workload": {"requests": requests, "arrival": {"kind": "constant", "rate_per_s": rate},
                     "prompt_tokens": {"kind": "fixed", "value": prompt},
                     "output_tokens": {"kind": "fixed", "value": output},
                     "prefix": {"kind": "share", "share": {"default": share}}},
        "cluster": {"gpus": gpus},
        "strategy": {"prefix_cache": {"block_tokens": BT, "routing": routing}},
    }
    data.update(extra)
    return data


def _run(data: dict[str, Any], profile: Any = SEED, seed: int = 0) -> Any:
    return simulate(scenario_from_dict(data, "inline.toml"), profile, seed=seed)


def test_second_identical_prompt_prefills_only_its_suffix_over_the_cached_prefix() -> None:
    result = _run(_scenario())
    first, second = result.runs[0].records
    hit = (1000 - 1) // BT * BT  # 3 blocks: the last prompt token is always computed
    assert first.first_token_s - first.arrival_s == pytest.approx(SEED.prefill_ms(1000, 0) / 1000.0, rel=1e-12)
    assert second.first_token_s - second.arrival_s == pytest.approx(SEED.prefill_ms(1000 - hit, hit) / 1000.0,
                                                                    rel=1e-12)
    section = summary(result)["prefix_cache"]
    assert section["prefill_tokens_saved"]["mean"] == hit
    assert section["hit_rate"]["tokens"]["mean"] == pytest.approx(hit / 2000)
    assert section["hit_rate"]["blocks"]["mean"] == pytest.approx(3 / 6)
    assert section["ttft_ms"]["cached"]["share_of_completed"]["mean"] == 0.5


def test_a_full_block_prompt_still_computes_its_last_token() -> None:
    run = _run(_scenario(prompt=4 * BT)).runs[0]
    assert run.prefix.cached_tokens == {0: 0, 1: 3 * BT}


def test_no_share_no_hits_and_the_cache_off_is_the_baseline_byte_for_byte() -> None:
    result = _run(_scenario(share=0.0, requests=20, rate=0.05, output=20))
    assert summary(result)["prefix_cache"]["prefill_tokens_saved"]["mean"] == 0
    on = _scenario(requests=20, rate=0.05, output=20)
    off = copy.deepcopy(on)
    off["strategy"]["prefix_cache"]["enabled"] = False
    bare = copy.deepcopy(on)
    del bare["strategy"]
    off_result, bare_result = _run(off), _run(bare)
    assert off_result.runs[0].records == bare_result.runs[0].records
    assert "prefix_cache" not in summary(off_result)
    assert json.dumps(summary(off_result), default=str) == json.dumps(summary(bare_result), default=str)


def test_without_sharing_the_cache_changes_no_latency() -> None:
    """Unshared prompts: the loop with the cache serves every request as the loop without it does."""
    data = _scenario(share=0.0, requests=30, rate=0.05, output=30)
    on = _run(data).runs[0].records
    del data["strategy"]
    off = _run(data).runs[0].records
    assert [(r.first_token_s, r.finish_s) for r in on] == [(r.first_token_s, r.finish_s) for r in off]


def test_same_seed_same_result() -> None:
    data = _scenario(requests=40, rate=0.5, output=20, share=0.6)
    data["workload"]["prompt_tokens"] = {"kind": "uniform", "low": 500, "high": 3000}
    data["workload"]["prefix"]["prefixes"] = 3
    a, b = _run(data, seed=3), _run(data, seed=3)
    assert a.runs[0].records == b.runs[0].records
    assert a.runs[0].prefix.counters == b.runs[0].prefix.counters


def test_eviction_keeps_the_index_consistent_and_within_the_budget() -> None:
    """cpu-tiny's budget holds few long prompts: cached blocks are evicted LRU, never beyond the budget."""
    data = _scenario(requests=60, rate=2.0, output=8, share=0.5)
    data["workload"]["prompt_tokens"] = {"kind": "uniform", "low": 300, "high": 1500}
    data["workload"]["prefix"]["prefixes"] = 6
    data["cluster"] = {"gpus": 1, "device_memory_gib": 0.0305}  # ~5,000 tokens of KV
    result = _run(data, TINY)
    run = result.runs[0]
    assert all(r.completed for r in run.records if r.status != "rejected")
    assert run.prefix.counters.evictions > 0
    for stats in run.replicas:
        assert stats.peak_kv_bytes <= stats.kv_capacity_bytes


def test_cache_state_after_a_run_is_consistent() -> None:
    spec = PrefixCacheSpec(block_tokens=2)
    keys = ((b"a", b"b", b"c"), (b"a", b"b", b"d"), (b"x",))
    setup = PrefixSetup.build(spec, RequestPrefixes(2, keys, "test"))
    cache = PrefixCache(setup, capacity_tokens=20, kv_bytes_per_token=1, work_ms=lambda t, c: float(t))
    plan = cache.plan(0, 7, 8)  # 3 full blocks, 1 private prompt token + 1 output
    assert plan is not None and plan.hits == 0
    assert cache.commit(0, 7, plan) == 0
    cache.scheduled(0, 7)
    cache.finish(0)
    plan = cache.plan(1, 7, 8)
    assert plan is not None and plan.hits == 2  # a, b shared; d differs
    assert cache.commit(1, 7, plan) == 4
    assert cache.occupied_tokens() == 2 * 3 + 2  # its 3 blocks + one private block
    cache.index.check()
    cache.finish(1)
    assert cache.occupied_tokens() == 0
    cache.index.check()
    assert cache.plan(2, 3, 100) is None  # needs more than the 10 blocks


class _FakeTiers:
    """A device of 4 tokens, host of 4, SSD of 100; loading costs ``ms_per_byte``."""

    device_tokens, host_tokens = 4, 4

    def __init__(self, ms_per_byte: float) -> None:
        self.ms_per_byte = ms_per_byte

    def link_ms(self, link: str, nbytes: int) -> float:
        return self.ms_per_byte * nbytes * (2 if link == HOST_SSD else 1)


@pytest.mark.parametrize(("ms_per_byte", "load"), [(0.01, True), (100.0, False)])
def test_off_device_hits_are_loaded_or_recomputed_whichever_is_cheaper(ms_per_byte: float, load: bool) -> None:
    spec = PrefixCacheSpec(block_tokens=2)
    keys = ((b"p", b"q", b"r", b"s"), (b"u", b"v", b"w"), (b"p", b"q", b"r", b"s"))
    setup = PrefixSetup.build(spec, RequestPrefixes(2, keys, "test"))
    cache = PrefixCache(setup, capacity_tokens=108, kv_bytes_per_token=1, work_ms=lambda t, c: float(t),
                        tiers=_FakeTiers(ms_per_byte))
    for request, prompt in ((0, 9), (1, 7)):
        plan = cache.plan(request, prompt, prompt)
        assert plan is not None
        cache.commit(request, prompt, plan)
        cache.scheduled(request, prompt)
        cache.finish(request)
    # released tail first, newest first: u v on the device's 2 blocks, w p on host's 2, then q r s on SSD
    plan = cache.plan(2, 9, 9)
    assert plan is not None and plan.hits == 4
    assert plan.tiers == ["host", "ssd", "ssd", "ssd"]
    load_ms = ms_per_byte * (4 * 2 + 2 * 3 * 2)  # 4 blocks over device_host, the 3 SSD blocks over host_ssd too
    assert plan.load is (load_ms <= 9 - 1)
    assert plan.load is load
    cache.commit(2, 9, plan)
    c = cache.counters
    if load:
        assert plan.start_tokens == 8 and c.loads == 1 and c.loaded_bytes == {DEVICE_HOST: 8, HOST_SSD: 6}
        assert cache.take_load()[0] == pytest.approx(load_ms / 1000.0)
    else:
        assert plan.start_tokens == 0 and c.recomputes == 1 and c.recomputed_blocks == 4
        assert cache.take_load() == (0.0, {})


def test_affinity_routes_to_the_cached_prefix_within_the_slack() -> None:
    spec = PrefixCacheSpec(block_tokens=2, affinity_slack=1)
    keys = ((b"a", b"b"), (b"a", b"b"))
    setup = PrefixSetup.build(spec, RequestPrefixes(2, keys, "test"))
    caches = [PrefixCache(setup, 100, 1, lambda t, c: 0.0) for _ in range(2)]
    plan = caches[1].plan(0, 5, 5)
    assert plan is not None
    caches[1].commit(0, 5, plan)
    caches[1].scheduled(0, 5)
    assert route(caches, [0, 1], 1, 5, spec) == 1  # one more outstanding: within the slack
    assert route(caches, [0, 2], 1, 5, spec) == 0  # beyond it: the least loaded
    least = PrefixCacheSpec(block_tokens=2, routing="least_loaded")
    assert route(caches, [0, 1], 1, 5, least) == 0


def test_affinity_gathers_a_shared_prefix_on_fewer_replicas_than_least_loaded() -> None:
    data = _scenario(requests=80, rate=1.0, output=10, gpus=4, share=0.9)
    data["workload"]["prefix"]["prefixes"] = 4
    affinity = summary(_run(data))["prefix_cache"]["hit_rate"]["tokens"]["mean"]
    data["strategy"]["prefix_cache"]["routing"] = "least_loaded"
    least = summary(_run(data))["prefix_cache"]["hit_rate"]["tokens"]["mean"]
    assert affinity >= least > 0


def _trace(tmp_path: Path, rows: list[tuple[int, int, list[int]]]) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 1000 * i, "input_length": n, "output_length": 1,
                                        "hash_ids": ids}) + "\n" for i, (n, _, ids) in enumerate(rows)))
    return str(path)


@pytest.mark.parametrize("block_tokens", [512, 256])
def test_mooncake_hash_ids_are_the_block_identity(tmp_path: Path, block_tokens: int) -> None:
    trace = _trace(tmp_path, [(1536, 1, [7, 8, 9]), (1536, 1, [7, 8, 10]), (1536, 1, [5, 8, 9])])
    data = {"name": "m", "workload": {"arrival": {"kind": "trace", "trace": trace, "time_scale": 100.0},
                                      "prompt_tokens": {"kind": "trace"}, "output_tokens": {"kind": "trace"}},
            "strategy": {"prefix_cache": {"block_tokens": block_tokens}}}
    run = _run(data).runs[0]
    # request 1 shares ids 7, 8 (1,024 tokens, within its 1,535-token cap); request 2's first id differs
    assert run.prefix.cached_tokens == {0: 0, 1: 1024, 2: 0}


def test_a_trace_without_block_ids_says_so_and_runs_without_reuse() -> None:
    data = {"name": "a", "workload": {"requests": 20, "arrival": {"kind": "trace", "trace": "azure-conv-2023"},
                                      "prompt_tokens": {"kind": "trace"}, "output_tokens": {"kind": "trace"}},
            "cluster": {"gpus": 4}, "strategy": {"prefix_cache": {}}}
    section = summary(_run(data))["prefix_cache"]
    assert "no prefix structure" in section["note"]
    assert section["prefill_tokens_saved"]["mean"] == 0


@pytest.mark.parametrize(("patch", "field"), [
    ({"strategy": {"prefix_cache": {"routing": "random"}}}, "strategy.prefix_cache.routing"),
    ({"strategy": {"prefix_cache": {"block": 16}}}, "strategy.prefix_cache.block"),
    ({"strategy": {"prefix_cache": {"block_tokens": 0}}}, "strategy.prefix_cache.block_tokens"),
    ({"workload": {"prefix": {"kind": "trace"}}}, "workload.prefix.kind"),
    ({"workload": {"prefix": {"kind": "shared", "turns": 2}}}, "workload.prefix.system_prompts"),
    ({"workload": {"prefix": {"kind": "share", "share": {"code": 0.5}}}}, "workload.prefix.share.code"),
    ({"workload": {"prefix": {"kind": "share", "share": {"default": 1.5}}}}, "workload.prefix.share.default"),
    ({"workload": {"prefix": {"kind": "share", "share": {"default": 0.5}, "turns": 2}}}, "workload.prefix.turns"),
])
def test_bad_prefix_tables_name_the_field(patch: dict[str, Any], field: str) -> None:
    data = _scenario()
    for table, values in patch.items():
        for key, value in values.items():
            data[table][key] = value
    with pytest.raises(InputError) as err:
        scenario_from_dict(data, "inline.toml")
    assert err.value.field == field and err.value.source == "inline.toml"


def test_prefix_caching_needs_preemption_none() -> None:
    data = _scenario(batching={"preemption": "recompute"})
    with pytest.raises(InputError) as err:
        _run(data)
    assert err.value.field == "batching.preemption"


def test_tiered_prefix_run_completes_and_counts_off_device_hits() -> None:
    """Seed profile, KV budget of a few prompts, tiers behind it: evicted-from-device prefixes come back."""
    data = _scenario(requests=60, rate=0.3, output=20, share=0.8)
    data["workload"]["prompt_tokens"] = {"kind": "uniform", "low": 2000, "high": 6000}
    data["workload"]["prefix"]["prefixes"] = 8
    data["strategy"]["tiered"] = {"host_capacity_gib": 4.0, "ssd_capacity_gib": 0.0}
    run = _run(data).runs[0]
    c = run.prefix.counters
    assert all(r.completed for r in run.records)
    assert c.hit_blocks > 0
    off = c.hit_blocks_per_tier["host"] + c.hit_blocks_per_tier["ssd"]
    assert off > 0 and c.loads > 0 and c.recomputes == 0  # the seed's PCIe link is cheaper than re-prefilling
    # every loaded block crossed device_host once: bytes = blocks x block tokens x KV bytes per token
    assert c.loaded_bytes[DEVICE_HOST] == off * BT * int(SEED.model.kv_bytes_per_token)
    assert sum(r.paging_s for r in run.records) > 0.0  # the loads stalled their admission iterations


def test_a_prompt_admitted_whole_is_findable_by_the_next_admission_of_the_same_iteration(tmp_path: Path) -> None:
    """As in the engine, blocks are findable once scheduled: the continuous policy schedules a whole prompt at
    admission, so a twin arriving at the same instant hits it."""
    path = tmp_path / "twins.jsonl"
    row = {"timestamp": 0, "input_length": 1536, "output_length": 2, "hash_ids": [1, 2, 3]}
    path.write_text((json.dumps(row) + "\n") * 2)
    data = {"name": "twins", "workload": {"arrival": {"kind": "trace", "trace": str(path)},
                                          "prompt_tokens": {"kind": "trace"}, "output_tokens": {"kind": "trace"}},
            "strategy": {"prefix_cache": {}}}
    assert _run(data).runs[0].prefix.cached_tokens == {0: 0, 1: 1024}


def test_a_reservation_beyond_the_whole_blocks_is_rejected_not_stuck() -> None:
    """cpu-tiny with ~5,000 tokens of KV in 256-token blocks: a request whose tokens fit but whose blocks do not
    is turned away at arrival, as one too big for the token budget is."""
    data = _scenario(prompt=100, output=1, requests=2)
    data["cluster"] = {"gpus": 1, "device_memory_gib": 0.0305}
    tokens = _run(data, TINY).kv_capacity_bytes // int(TINY.model.kv_bytes_per_token)
    assert tokens % BT  # the budget ends inside a block
    data["workload"]["prompt_tokens"]["value"] = tokens - 1  # fits the tokens, not the whole blocks
    run = _run(data, TINY).runs[0]
    assert [r.status for r in run.records] == ["rejected", "rejected"]
    assert "prefix-cache blocks" in run.records[0].reject_reason
