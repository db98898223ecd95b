"""Hand-computed timelines of each batching policy and of preemption, on IterationCost.linear.

Costs (ms): an iteration with prefills costs base + 0.1 x tokens per chunk, base = 10 without
decodes, else the decode cost 5 + 1 x B (no context term). Each expected time below is derived
in the comment beside it.
"""

from __future__ import annotations

import math

import pytest

from tripath.core.request import RequestSpec
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.batching import Chunked, Continuous, Windowed
from tripath.simulator.loop.cluster import ClusterConfig, simulate_requests
from tripath.simulator.loop.replica import ReplicaConfig
from tripath.simulator.loop.stepper import StepperConfig, StepperSetup
from tripath.simulator.step_model import BaselineStep

T = pytest.approx  # the hand sums are decimal; the simulator's are binary floats


def cost() -> IterationCost:
    return IterationCost.linear(10.0, 0.1, 5.0, 1.0, 0.0)


def run(requests, policy, kv_tokens: int = 1 << 20, config: StepperConfig | None = None, interval=None):
    cluster = ClusterConfig(1, ReplicaConfig(64, 1 << 20, kv_tokens, 1))
    setup = StepperSetup(lambda i: BaselineStep(cost(), 1, kv_tokens), lambda i: policy,
                         config or StepperConfig(), (), interval)
    return simulate_requests(requests, cluster, cost(), setup=setup)


def times(record) -> tuple[float, float, float]:
    return record.admitted_s, record.first_token_s, record.finish_s


def test_dynamic_batch_waits_for_its_window() -> None:
    requests = [RequestSpec(0, 0.0, 100, 3), RequestSpec(1, 0.004, 100, 3), RequestSpec(2, 0.041, 100, 1)]
    a, b, c = run(requests, Windowed(4, 0.010, joins=True)).records
    # 0 and 1 never fill the 4 places: the group forms when 0 has waited 10 ms. Prefill both:
    # 10 + 10 + 10 = 30 ms -> first tokens at 0.040; two decodes of B = 2 (7 ms) -> 0.054.
    assert times(a) == (T(0.010), T(0.040), T(0.054))
    assert times(b) == (T(0.010), T(0.040), T(0.054))
    # 2 arrives at 0.041; its window ends at 0.051, inside the iteration ending 0.054: it joins there.
    # Alone: prefill 10 + 10 = 20 ms -> 0.074, its only token.
    assert times(c) == (T(0.054), T(0.074), T(0.074))


def test_static_batch_runs_to_completion_without_joins() -> None:
    requests = [RequestSpec(0, 0.0, 100, 4), RequestSpec(1, 0.001, 100, 2), RequestSpec(2, 0.002, 100, 2)]
    a, b, c = run(requests, Windowed(2, 0.050, joins=False)).records
    # Full (2 waiting) at 0.001: prefill 30 ms -> 0.031; decode B = 2 (7 ms) -> 0.038, 1 is done.
    assert times(b) == (T(0.001), T(0.031), T(0.038))
    # 0 decodes alone (6 ms): tokens 3 and 4 at 0.044 and 0.050.
    assert times(a) == (T(0.001), T(0.031), T(0.050))
    # 2 may not join the running batch; at 0.050 it is alone, so it waits for its window: 0.002 + 0.050.
    # Prefill 20 ms -> 0.072; one decode (6 ms) -> 0.078.
    assert times(c) == (T(0.052), T(0.072), T(0.078))
    # Dynamic lets 2 join as soon as 1 leaves a place (room 1, one waiting: full) at 0.038.
    dynamic = run(requests, Windowed(2, 0.050, joins=True)).records
    assert dynamic[2].admitted_s == T(0.038)


def test_chunked_prefill_interleaves_with_decodes() -> None:
    requests = [RequestSpec(0, 0.0, 10, 5), RequestSpec(1, 0.0001, 150, 2)]
    a, b = run(requests, Chunked(8, 64)).records
    # 0.000: prefill 0 (10 tokens): 10 + 1 = 11 ms -> 0.011, its first token.
    # 0.011: 0 decodes (1 token of the 64 budget), 1 gets a 63-token chunk: 6 + 6.3 -> 0.0233
    # 0.0233: same, chunk 63 (tokens 63..125): 12.3 ms -> 0.0356
    # 0.0356: last chunk 24 tokens: 6 + 2.4 -> 0.0440, 1's first token
    # 0.0440: both decode (5 + 2): 0.0510; 0 has emitted 5 tokens, 1 has emitted 2: both done.
    assert times(a) == (T(0.0), T(0.011), T(0.051))
    assert times(b) == (T(0.011), T(0.044), T(0.051))
    # Continuous prefills 1's 150 tokens in one iteration (6 + 15 = 21 ms): 0's decode stalls
    # 21 ms there, while chunking never makes it wait longer than 12.3 ms.
    c = run(requests, Continuous(8, 64)).records
    assert c[1].first_token_s == T(0.032)


def test_preemption_recompute() -> None:
    requests = [RequestSpec(0, 0.0, 8, 6), RequestSpec(1, 0.0, 8, 6)]
    a, b = run(requests, Continuous(4, 1 << 20), kv_tokens=20, config=StepperConfig("recompute")).records
    # Both admitted at 0 reserving prompt + 1 = 9 tokens each; prefill 10 + 0.8 + 0.8 -> 0.0116.
    # Decode B = 2 (7 ms) -> 0.0186: each holds 10 tokens, 20 in all. The next decode needs 22 > 20:
    # 1 (admitted last) is evicted and re-queued; re-admission needs 11 tokens, 8 are free while 0
    # runs, so 0 decodes alone (6 ms) 4 times: tokens 3..6 at 0.0246 .. 0.0426.
    assert times(a) == (T(0.0), T(0.0116), T(0.0426))
    assert a.preemptions == 0
    # At 0.0426 1 re-prefills its 8 + 2 tokens: 10 + 1.0 = 11 ms -> 0.0536, its third token; then
    # three decodes of 6 ms -> 0.0716. Its admission and first token are the original ones.
    assert times(b) == (T(0.0), T(0.0116), T(0.0716))
    assert b.preemptions == 1


def swap_s(nbytes: int) -> float:
    return 0.001 + 1e-4 * nbytes  # a made-up link: 1 ms setup + 0.1 ms per byte


def test_preemption_swap() -> None:
    requests = [RequestSpec(0, 0.0, 8, 6), RequestSpec(1, 0.0, 8, 6)]
    result = run(requests, Continuous(4, 1 << 20), kv_tokens=20, config=StepperConfig("swap", swap_s),
                 interval=0.01)
    a, b = result.records
    # As above to 0.0186; then 1's 10 tokens go out: 1 + 1 = 2 ms added to 0's decode (6 ms) -> 0.0266,
    # then 0 alone: 0.0326, 0.0386, 0.0446 (its sixth token).
    assert times(a) == (T(0.0), T(0.0116), T(0.0446))
    # 1 comes back in at 0.0446 (2 ms) and decodes (6 ms) -> 0.0526, then 0.0586, 0.0646, 0.0706.
    assert times(b) == (T(0.0), T(0.0116), T(0.0706))
    # A swap stalls every sequence of its iteration: 0 waited on 1's way out, 1 on both ways.
    assert (b.preemptions, b.paging_s) == (1, T(0.004))
    assert (a.preemptions, a.paging_s) == (0, T(0.002))
    series = result.timeseries
    assert series.column("paging_device_host_bytes")[-1] == 20  # 10 tokens out, 10 in, 1 byte each
    assert series.column("preemptions")[-1] == 1
    assert max(series.column("kv_device_bytes")) <= 20


def test_swap_without_a_paging_cost_is_bad_input() -> None:
    from tripath.core.errors import InputError
    from tripath.profile.profile import resolve_profile
    from tripath.simulator.runner import simulate
    from tripath.simulator.scenario.scenario import scenario_from_dict

    profile = resolve_profile("published-llama2-70b-tp2-a100")
    bare = type(profile).from_dict({**profile.to_dict(), "paging": {}})
    data = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0}, "requests": 5,
                         "prompt_tokens": {"kind": "fixed", "value": 10},
                         "output_tokens": {"kind": "fixed", "value": 3}},
            "cluster": {"gpus": 2}, "batching": {"preemption": "swap"}}
    with pytest.raises(InputError) as info:
        simulate(scenario_from_dict(data), bare)
    assert info.value.field == "batching.preemption"
    assert not math.isnan(simulate(scenario_from_dict(data), profile).runs[0].records[0].finish_s)


def test_chunk_costs_and_their_extrapolations() -> None:
    """chunked_s: the shared pass plus each chunk's prefill(T, ctx) - prefill(0, 0); both inputs checked."""

    def prefill(tokens, context):
        return 10.0 + 0.5 * tokens + 0.25 * context

    def decode(batch, total_context):
        return 4.0 + 1.0 * batch

    cost = IterationCost(prefill, decode, prefill_domain=((1, 100), (0, 50)))
    # no decodes: 10 + (5 + 0) + (5 + 15) + (100 + 0) = 135 ms
    assert cost.chunked_s([(10, 0), (10, 60), (200, 0)], 0, 0) == T(0.135)
    assert (cost.prefill_queries, cost.prefill_outside) == (3, 2)  # context 60 > 50; 200 tokens > 100
    # with 2 decodes the shared pass is the decode step: 6 + (5 + 10) = 21 ms
    assert cost.chunked_s([(10, 40)], 2, 100) == T(0.021)
    assert (cost.prefill_queries, cost.prefill_outside, cost.decode_queries) == (4, 2, 1)


class TwoTokens(BaselineStep):
    """A made-up path for the loop's bookkeeping: each decode emits up to 2 tokens in one round
    (1 accepted draft token + the bonus), and each decode iteration stalls 1 ms on paging and
    spends 0.5 ms merging (both inside its seconds)."""

    def step(self, prefills, decodes, live_tokens):
        import numpy as np

        from tripath.simulator.step_model import StepResult

        base = super().step(prefills, decodes, live_tokens)
        if not decodes:
            return base
        emitted = np.array([min(2, d.remaining) for d in decodes], dtype=np.int64)
        return StepResult(base.seconds + 0.0015, emitted, accepted=emitted - 1, rounds=np.ones_like(emitted),
                          paging_s=0.001, paging_bytes={"device_host": 100}, merge_s=0.0005)


def test_multi_token_decodes_and_per_path_sums() -> None:
    cluster = ClusterConfig(1, ReplicaConfig(64, 1 << 20, 1 << 20, 1))
    setup = StepperSetup(lambda i: TwoTokens(cost(), 1, 1 << 20), lambda i: Continuous(64, 1 << 20), StepperConfig(),
                         (), 0.005)
    result = simulate_requests([RequestSpec(0, 0.0, 100, 6)], cluster, cost(), setup=setup)
    (r,) = result.records
    # prefill 10 + 10 = 20 ms -> token 1 at 0.020; decodes of 6 + 1.5 ms emit 2, 2, then the last 1:
    # tokens 3 at 0.0275, 5 at 0.035, 6 at 0.0425
    assert times(r) == (T(0.0), T(0.020), T(0.0425))
    assert (r.draft_rounds, r.accepted_tokens) == (3, 2)
    assert (r.paging_s, r.merge_s) == (T(0.003), T(0.0015))
    assert result.timeseries.column("paging_device_host_bytes")[-1] == 300
