"""The saturation estimate with paths on, against hand-computed values, and load_fraction's meaning in a run.

Each expected value is recomputed here from the profile's own formulas (decode_ms, prefill_ms,
the SP rows and merge fit, paging_ms, acceptance means) with the arithmetic written out, not by
calling the code under test's helpers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers import SEED, TINY, shipped_scenario_dict
from tripath.core import metrics
from tripath.simulator.capacity import saturation
from tripath.simulator.paths.capacity import path_saturation
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict

P, O = 1000.0, 200.0  # fixed lengths: the means are exact


def _data(profile: str, strategy: dict, tasks: dict | None = None, load: float = 0.5, n: int = 50,
          gpus: int = 1) -> dict:
    data = shipped_scenario_dict("quickstart")
    data["profile"] = profile
    data["workload"]["requests"] = n
    data["workload"]["arrival"] = {"kind": "poisson", "load_fraction": load}
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": int(P)}
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": int(O)}
    data["workload"]["tasks"] = tasks or {"dialogue": 1.0}
    data["cluster"] = {"gpus": gpus}
    data["strategy"] = strategy
    return data


def _sat(profile, strategy: dict, **kw):
    name = "cpu-tiny" if profile is TINY else "seed-llama2-70b-a100"
    scenario = scenario_from_dict(_data(name, strategy, **kw))
    return path_saturation(scenario, RunCosts.for_scenario(scenario, profile), P, O, 1, 64)


def test_compression_bytes_per_token_and_decode_overhead():
    sat = _sat(TINY, {"compression": {"mode": "int8"}})
    mode = TINY.compression["int8"]
    # the formula, from the profile's own figures (so a fresh calibration does not break it): full-precision
    # bytes per token = 2 (K and V) x layers x KV heads x head dim x dtype bytes, times the measured ratio
    model = TINY.model
    full = 2 * model.layers * model.kv_heads * model.head_dim * model.dtype_bytes
    assert full == model.kv_bytes_per_token
    b = math.ceil(full * mode.kv_bytes_ratio.value)
    batch = min(64, (TINY.kv_capacity_bytes // b) // 1200)  # whole requests of P + O = 1,200 tokens that fit
    assert sat.batch == batch
    s = batch * (P + (O + 1) / 2)
    fixed = TINY.prefill_ms(0, 0)
    step = mode.decode_overhead_ratio.value  # unit "ratio": the whole decode step scales
    # prefill writes into the compressed store: its chunk work x prefill_overhead_ratio (1 when not measured),
    # or the per-length ratio interpolated at the prompt's P tokens where the profile has it
    pre = 1.0 if mode.prefill_overhead_ratio is None else mode.prefill_overhead_ratio.value
    if mode.prefill_overhead_points:
        pre = float(np.interp(P, [n for n, _ in mode.prefill_overhead_points],
                              [r for _, r in mode.prefill_overhead_points]))
    decode = step * TINY.decode_ms(batch, s)
    if mode.decode_extra is not None:  # a (batch, context) fit: its extra ms is added instead (dequant_cost.py)
        q = {n: c.value for n, c in mode.decode_extra.coefficients.items()}
        decode = TINY.decode_ms(batch, s) + q["q0"] + q["q_seq"] * batch + q["q_ctx"] * s + q["q_len"] * s / batch
    if "step_overhead" in TINY.costs:  # overhead_v1, once per decode step of B sequences adding B tokens
        o = {n: c.value for n, c in TINY.costs["step_overhead"].coefficients.items()}
        decode += o["o0"] + o["o_seq"] * batch + o["o_tok"] * batch
    ms = (O - 1) * decode + batch * pre * (TINY.prefill_ms(P, 0) - fixed)
    assert sat.requests_per_s_per_replica == pytest.approx(1000 * batch / ms, rel=1e-12)


def test_sequence_parallel_split_speedup_merge_and_p_budgets():
    sat = _sat(SEED, {"sequence_parallel": {"degree": 2}})
    batch = min(64, (2 * SEED.kv_capacity_bytes // 327_680) // 1200)  # 2 x 8,192 tokens / 1,200 = 13
    assert sat.batch == batch == 13
    s = batch * (P + (O + 1) / 2)
    merge = SEED.sequence_parallel[2].merge.coefficients
    m0, m_ctx = merge["m0"].value, merge["m_ctx"].value
    d0, ds = SEED.decode_ms(batch, 0), SEED.decode_ms(batch, s)
    decode = d0 + (ds - d0) / 2 + (m0 + m_ctx * s)
    fixed = SEED.prefill_ms(0, 0)
    prefill_variable = (SEED.prefill_ms(P, 0) - fixed) / 1.8 + (m0 + m_ctx * P)  # every row's speedup is 1.8
    ms = (O - 1) * decode + batch * prefill_variable
    assert sat.requests_per_s_per_replica == pytest.approx(1000 * batch / ms, rel=1e-9)


@pytest.mark.parametrize("k", [1, 4])
def test_speculative_tokens_per_round_and_round_cost(k):
    tasks = {"dialogue": 3.0, "math": 1.0}  # i.i.d. acceptance 0.75 and 0.55 (the seed has no per-position)
    sat = _sat(SEED, {"speculative": {"k": k}}, tasks=tasks)
    e = (3 * (1 - 0.75 ** (k + 1)) / 0.25 + (1 - 0.55 ** (k + 1)) / 0.45) / 4
    c = SEED.speculative.cost_ratio.value
    f = k * c + SEED.verify_cost_ratio(k)
    batch = min(64, 8192 // 1200)
    s = batch * (P + (O + 1) / 2)
    fixed = SEED.prefill_ms(0, 0)
    ms = (O - 1) / e * f * SEED.decode_ms(batch, s) + batch * (1 + c) * (SEED.prefill_ms(P, 0) - fixed)
    assert sat.detail["tokens_per_round"] == pytest.approx(e, rel=1e-12)
    assert sat.requests_per_s_per_replica == pytest.approx(1000 * batch / ms, rel=1e-12)


def test_adaptive_falls_back_below_its_threshold():
    """fallback_acceptance 0.95 is above every task's acceptance: the estimate decodes plainly (K = 0), and the
    draft model still prefills every prompt."""
    sat = _sat(SEED, {"speculative": {"adaptive": True, "fallback_acceptance": 0.95}})
    assert sat.detail["k"] == 0
    batch = 6
    s = batch * (P + (O + 1) / 2)
    c = SEED.speculative.cost_ratio.value
    fixed = SEED.prefill_ms(0, 0)
    ms = (O - 1) * SEED.decode_ms(batch, s) + batch * (1 + c) * (SEED.prefill_ms(P, 0) - fixed)
    assert sat.requests_per_s_per_replica == pytest.approx(1000 * batch / ms, rel=1e-12)


def test_tiered_capacity_and_paging_per_round():
    """Host only (ssd 0), 10 GiB: the batch fills device + host; each round pages the off-device KV in."""
    sat = _sat(SEED, {"tiered": {"host_capacity_gib": 10.0, "ssd_capacity_gib": 0.0, "chunk_tokens": 256}})
    b, device = 327_680, 8192
    host = 10 * 2**30 // b  # 32,768 tokens
    batch = min(64, (device + host) // 1200)  # 34
    assert sat.batch == batch == 34
    s = batch * (P + (O + 1) / 2)
    live = round(s)
    off = min(live, math.ceil((live - device) / 256) * 256)
    written = round(batch * 1.0)
    off_after = min(live + written, math.ceil((live + written - device) / 256) * 256)
    moved = (off + (off_after - off)) * b  # paged in: all of it (every sequence reads its context); out: growth
    paging = SEED.paging_ms("device_host", moved, 256)
    assert sat.detail["paging_ms_per_round"] == pytest.approx(paging, rel=1e-12)
    fixed = SEED.prefill_ms(0, 0)
    ms = (O - 1) * (SEED.decode_ms(batch, s) + paging) + batch * (SEED.prefill_ms(P, 0) - fixed)
    assert sat.requests_per_s_per_replica == pytest.approx(1000 * batch / ms, rel=1e-12)


def test_baseline_keeps_capacity_py():
    result = simulate(scenario_from_dict(_data("seed-llama2-70b-a100", {}, n=5)), SEED)
    expected = saturation(SEED, P, O, 1, 64, SEED.kv_capacity_bytes)
    assert result.saturation == expected and result.saturation.detail is None
    assert result.rate_per_s == 0.5 * expected.requests_per_s


def _queueing_fifths(load: float) -> tuple[float, float, float]:
    data = _data("seed-llama2-70b-a100", {"speculative": {"k": 4}}, load=load, n=500)
    records = simulate(scenario_from_dict(data), SEED, seed=1).runs[0].records
    waits = metrics.latencies(records, "queueing")
    service = float(np.mean([r.finish_s - r.admitted_s for r in records]))
    fifth = len(waits) // 5
    return float(waits[:fifth].mean()), float(waits[-fifth:].mean()), service


def test_load_fraction_half_is_stable_and_one_and_a_half_is_not():
    """With speculation on, the path-aware estimate makes load 0.5 a stable queue (waits stay below one
    service time to the end) and 1.5 an overloaded one (waits grow with the arrivals)."""
    first, last, service = _queueing_fifths(0.5)
    assert last < service
    first, last, service = _queueing_fifths(1.5)
    assert last > 5 * max(first, service)


def test_tiered_on_a_measured_profile_prices_the_engine_rule():
    """cpu-tiny (measured: real_engine's tier rule): the estimate's paging per round is the tiered read's extra
    of B* sequences at the mean context (6 layers, each read once per step), and nothing moves while every
    page fits the device pool; by hand from paging.gather's paging_v1 fit."""
    scenario = scenario_from_dict(_data("cpu-tiny", {"tiered": {"host_capacity_gib": 1.0, "ssd_capacity_gib": 0.0,
                                                                   "chunk_tokens": 256}}))
    sat = path_saturation(scenario, RunCosts.for_scenario(scenario, TINY), P, O, 1, 12)  # max batch 12
    batch = sat.batch
    assert batch == 12
    each = round(batch * (P + (O + 1) / 2) / batch)
    layers, per_token = 6, 3072 / 6  # one layer's K and V of one token
    device_pages = int(TINY.kv_capacity_bytes) // 3072 * layers // 256
    assert layers * batch * math.ceil(each / 256) <= device_pages  # all resident: no misses, no moves
    gather = TINY.paging["gather"].cost_for(256).coefficients
    one_read = gather["setup_ms"].value + each * per_token / (gather["bandwidth_gbps"].value * 1e6)
    assert sat.detail["paging_ms_per_round"] == pytest.approx(batch * layers * one_read, rel=1e-9)
