"""Request generation against theory: Poisson and gamma renewal processes, length distributions, replay."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tripath.core.errors import InputError
from tripath.core.limits import MAX_TOKENS
from tripath.simulator.scenario.scenario import ArrivalSpec, LengthSpec, WorkloadSpec, load_scenario
from tripath.simulator.scenario.traces import load_trace
from tripath.simulator.scenario.workload import generate_requests, mean_lengths

FIXED = LengthSpec(kind="fixed", value=100)


def _workload(arrival: ArrivalSpec | None = None, prompt: LengthSpec = FIXED, output: LengthSpec = FIXED,
              **kwargs: object) -> WorkloadSpec:
    arrival = arrival or ArrivalSpec(kind="poisson", rate_per_s=1.0)
    if "requests" not in kwargs and "duration_s" not in kwargs and arrival.kind != "trace":
        kwargs["requests"] = 1000
    return WorkloadSpec(arrival=arrival, prompt_tokens=prompt, output_tokens=output, **kwargs)


def _gaps(requests: list) -> np.ndarray:
    return np.diff([0.0] + [r.arrival_s for r in requests])


def test_poisson_interarrivals_are_exponential() -> None:
    n, rate = 20000, 4.0
    reqs = generate_requests(_workload(requests=n), np.random.default_rng(1), rate)
    gaps = _gaps(reqs)
    assert len(reqs) == n and np.all(gaps > 0)
    # mean gap 1/rate; standard error (1/rate)/sqrt(n); 4 standard errors
    assert abs(gaps.mean() - 1 / rate) < 4 * (1 / rate) / math.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.04  # exponential: CV = 1
    assert [r.request_id for r in reqs] == list(range(n))


def test_poisson_count_over_a_duration() -> None:
    rate, duration = 5.0, 2000.0
    reqs = generate_requests(_workload(duration_s=duration), np.random.default_rng(2), rate)
    arrivals = np.array([r.arrival_s for r in reqs])
    assert arrivals.max() < duration and np.all(np.diff(arrivals) >= 0)
    # N ~ Poisson(rate * duration): mean 10,000, sd 100
    assert abs(len(reqs) - rate * duration) < 4 * math.sqrt(rate * duration)


def test_constant_arrivals_are_evenly_spaced_and_draw_nothing() -> None:
    # inference-perf's "constant" load: request i arrives at (i + 1) / rate; the length draws are unaffected
    rate = 8.0
    arrival = ArrivalSpec(kind="constant", rate_per_s=rate)
    lengths = LengthSpec(kind="uniform", low=10, high=500)
    reqs = generate_requests(_workload(arrival, prompt=lengths, requests=50), np.random.default_rng(3), rate)
    assert [r.arrival_s for r in reqs] == pytest.approx([(i + 1) / rate for i in range(50)], rel=1e-12)
    timed = generate_requests(_workload(arrival, prompt=lengths, duration_s=2.0), np.random.default_rng(3), rate)
    assert len(timed) == 15 and timed[-1].arrival_s < 2.0  # arrivals at 1/8 .. 15/8 s
    with pytest.raises(InputError, match="cv"):
        ArrivalSpec(kind="constant", rate_per_s=rate, cv=0.5)


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_interarrivals_have_the_requested_cv(cv: float) -> None:
    n, rate = 50000, 2.0
    arrival = ArrivalSpec(kind="gamma", rate_per_s=rate, cv=cv)
    gaps = _gaps(generate_requests(_workload(arrival, requests=n), np.random.default_rng(3), rate))
    assert abs(gaps.mean() * rate - 1.0) < 4 * cv / math.sqrt(n)
    # relative SE of the sample sd is about sqrt((excess kurtosis 6 cv^2 + 2) / n) / 2
    tolerance = 4 * math.sqrt((6 * cv * cv + 2) / n) / 2
    assert abs(gaps.std() / gaps.mean() / cv - 1.0) < tolerance


def test_fixed_lengths_are_exact_and_clamped() -> None:
    w = _workload(prompt=LengthSpec(kind="fixed", value=7), output=LengthSpec(kind="fixed", value=50, max=20))
    reqs = generate_requests(w, np.random.default_rng(0), 1.0)
    assert {r.prompt_tokens for r in reqs} == {7} and {r.output_tokens for r in reqs} == {20}
    assert mean_lengths(w) == (7.0, 20.0)


def test_uniform_is_inclusive() -> None:
    w = _workload(prompt=LengthSpec(kind="uniform", low=3, high=6), requests=4000)
    prompts = np.array([r.prompt_tokens for r in generate_requests(w, np.random.default_rng(0), 1.0)])
    assert set(prompts.tolist()) == {3, 4, 5, 6}
    assert abs(prompts.mean() - 4.5) < 4 * math.sqrt(1.25 / 4000)  # variance of U{3..6} is 1.25
    assert mean_lengths(w)[0] == 4.5
    clamped = _workload(prompt=LengthSpec(kind="uniform", low=1, high=4, min=2, max=3))
    assert mean_lengths(clamped)[0] == (2 + 2 + 3 + 3) / 4
    cases = [(1, 10, 3, 7), (5, 9, 1, 100), (5, 9, 20, 30), (1, 4, 1, 1), (8192, 16384, 9000, 9000)]
    for low, high, lo, hi in cases:  # the closed form against enumeration
        spec = LengthSpec(kind="uniform", low=low, high=high, min=lo, max=hi)
        expected = np.clip(np.arange(low, high + 1), lo, hi).mean()
        assert mean_lengths(_workload(prompt=spec))[0] == pytest.approx(expected, rel=1e-12)
    huge = LengthSpec(kind="uniform", low=1, high=MAX_TOKENS)  # no enumeration of a hundred million values
    assert mean_lengths(_workload(prompt=huge))[0] == (1 + MAX_TOKENS) / 2


def test_lognormal_median_and_clamped_mean() -> None:
    n = 40000
    spec = LengthSpec(kind="lognormal", median=300.0, sigma=0.6)
    w = _workload(output=spec, requests=n)
    outputs = np.array([r.output_tokens for r in generate_requests(w, np.random.default_rng(5), 1.0)])
    # SE of the sample median of log X is sqrt(pi/2) sigma / sqrt(n)
    assert abs(math.log(np.median(outputs) / 300.0)) < 4 * math.sqrt(math.pi / 2) * 0.6 / math.sqrt(n) + 1e-3
    assert mean_lengths(w)[1] == pytest.approx(300.0 * math.exp(0.18))  # E = median exp(sigma^2 / 2)
    assert abs(outputs.mean() / mean_lengths(w)[1] - 1) < 0.02
    tight = LengthSpec(kind="lognormal", median=300.0, sigma=1.5, min=100, max=400)
    w = _workload(output=tight, requests=n)
    outputs = np.array([r.output_tokens for r in generate_requests(w, np.random.default_rng(6), 1.0)])
    assert outputs.min() == 100 and outputs.max() == 400  # both clamps bind at sigma 1.5
    assert abs(outputs.mean() - mean_lengths(w)[1]) < 2.0


def test_empirical_bootstraps_the_trace_column() -> None:
    spec = LengthSpec(kind="empirical", trace="azure-conv-2023", column="prompt")
    w = _workload(prompt=spec, requests=20000)
    prompts = np.array([r.prompt_tokens for r in generate_requests(w, np.random.default_rng(7), 1.0)])
    column = load_trace("azure-conv-2023").prompt_tokens
    assert np.isin(prompts, column).all()
    assert abs(prompts.mean() - column.mean()) < 4 * column.std() / math.sqrt(20000)
    assert mean_lengths(w)[0] == pytest.approx(1154.6974, abs=1e-3)


def test_trace_replay_arrivals_and_lengths() -> None:
    trace = load_trace("azure-conv-2023")
    arrival = ArrivalSpec(kind="trace", trace="azure-conv-2023", time_scale=2.0)
    w = _workload(arrival, LengthSpec(kind="trace"), LengthSpec(kind="trace"), requests=500)
    reqs = generate_requests(w, np.random.default_rng(0), None)
    assert [r.arrival_s for r in reqs] == (trace.arrival_s[:500] * 2.0).tolist()
    # first two rows: 18:15:46.6805900 and 18:15:50.9951690, 4.3145790 s apart (times 2)
    assert reqs[0].arrival_s == 0.0 and reqs[1].arrival_s == pytest.approx(8.629158, abs=1e-9)
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs[:2]] == [(374, 44), (396, 109)]
    assert [r.prompt_tokens for r in reqs] == trace.prompt_tokens[:500].tolist()
    expected = (trace.prompt_tokens[:500].mean(), trace.output_tokens[:500].mean())
    assert mean_lengths(w) == pytest.approx(expected)


def test_trace_replay_duration_and_all_rows() -> None:
    trace = load_trace("mooncake-synthetic")
    arrival = ArrivalSpec(kind="trace", trace="mooncake-synthetic")
    timed = generate_requests(_workload(arrival, duration_s=100.0), np.random.default_rng(0), None)
    assert len(timed) == int((trace.arrival_s < 100.0).sum()) and timed[-1].arrival_s < 100.0
    everything = generate_requests(_workload(arrival, LengthSpec(kind="trace"), LengthSpec(kind="trace")),
                                   np.random.default_rng(0), None)
    assert len(everything) == 3993
    # output_length 0 cannot occur in a request: the clamp min = 1 applies to trace lengths too
    assert min(r.output_tokens for r in everything) >= 1
    with pytest.raises(InputError, match="asks for 5000 requests, the trace has 3993"):
        generate_requests(_workload(arrival, requests=5000), np.random.default_rng(0), None)


def test_a_trace_paced_to_a_rate_keeps_its_burstiness() -> None:
    """rate_per_s on a trace scales its arrival times so the replayed rows' mean gap is 1 / rate; every gap
    keeps its share of the span (the trace's bursts), and the rows and lengths are the same."""
    trace = load_trace("azure-conv-2023")
    paced = ArrivalSpec(kind="trace", trace="azure-conv-2023", rate_per_s=0.5)
    reqs = generate_requests(_workload(paced, LengthSpec(kind="trace"), LengthSpec(kind="trace"), requests=200),
                             np.random.default_rng(0), None)
    own = trace.arrival_s[:200]
    scale = 199 / ((own[-1] - own[0]) * 0.5)  # (n - 1) gaps over the span, at 0.5 req/s
    assert np.allclose([r.arrival_s for r in reqs], own * scale, rtol=1e-12, atol=0.0)
    assert np.mean(np.diff([r.arrival_s for r in reqs])) == pytest.approx(2.0, rel=1e-9)
    assert [r.prompt_tokens for r in reqs] == trace.prompt_tokens[:200].tolist()
    # over a duration: round(rate x duration) rows fall inside the window
    window = generate_requests(_workload(paced, duration_s=400.0), np.random.default_rng(0), None)
    assert len(window) == 200 and window[-1].arrival_s < 400.0
    with pytest.raises(InputError, match="rate_per_s"):
        ArrivalSpec(kind="trace", trace="azure-conv-2023", rate_per_s=0.5, time_scale=2.0)
    with pytest.raises(InputError, match="needs 20000 rows"):
        generate_requests(_workload(paced, duration_s=40000.0), np.random.default_rng(0), None)


def test_shipped_replay_scenario_is_the_trace_prefix() -> None:
    s = load_scenario("azure-conv-replay")
    reqs = generate_requests(s.workload, np.random.default_rng(0), None)
    trace = load_trace("azure-conv-2023")
    assert len(reqs) == 1445
    assert [r.arrival_s for r in reqs] == trace.arrival_s[:1445].tolist()


def test_same_seed_same_requests_and_common_random_numbers() -> None:
    w = _workload(prompt=LengthSpec(kind="lognormal", median=1000.0, sigma=1.0),
                  tasks=(("dialogue", 1.0), ("math", 1.0)))
    a = generate_requests(w, np.random.default_rng(42), 3.0)
    assert a == generate_requests(w, np.random.default_rng(42), 3.0)
    assert a != generate_requests(w, np.random.default_rng(43), 3.0)
    # a different output distribution leaves arrivals, prompts and tasks unchanged (separate streams)
    b = generate_requests(_workload(prompt=w.prompt_tokens, output=LengthSpec(kind="uniform", low=1, high=9),
                                    tasks=w.tasks), np.random.default_rng(42), 3.0)
    def streams(reqs: list) -> list:
        return [(r.arrival_s, r.prompt_tokens, r.task) for r in reqs]

    assert streams(a) == streams(b)
    assert [r.output_tokens for r in a] != [r.output_tokens for r in b]


def test_task_mix_proportions() -> None:
    w = _workload(tasks=(("dialogue", 3.0), ("math", 1.0)), requests=20000)
    tasks = [r.task for r in generate_requests(w, np.random.default_rng(9), 1.0)]
    share = tasks.count("dialogue") / len(tasks)
    assert abs(share - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 20000)


def test_missing_rate_is_an_input_error() -> None:
    w = _workload(ArrivalSpec(kind="poisson", load_fraction=0.5))
    with pytest.raises(InputError, match="workload.arrival.rate_per_s: must be > 0, got None"):
        generate_requests(w, np.random.default_rng(0), None)


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(["fixed", "uniform", "lognormal"]),
    a=st.integers(1, 5000),
    b=st.integers(0, 5000),
    lo=st.integers(1, 50),
    span=st.one_of(st.none(), st.integers(0, 3000)),
    cv=st.one_of(st.none(), st.floats(0.2, 4.0)),
    seed=st.integers(0, 2**32 - 1),
)
def test_requests_are_sorted_and_within_bounds(kind: str, a: int, b: int, lo: int, span: int | None,
                                               cv: float | None, seed: int) -> None:
    hi = None if span is None else lo + span
    params = {"fixed": {"value": a}, "uniform": {"low": a, "high": a + b},
              "lognormal": {"median": float(a), "sigma": b / 2500}}[kind]
    spec = LengthSpec(kind=kind, min=lo, max=hi, **params)
    arrival = ArrivalSpec(kind="gamma" if cv else "poisson", rate_per_s=3.0, cv=cv)
    reqs = generate_requests(_workload(arrival, spec, spec, requests=200), np.random.default_rng(seed), 3.0)
    arrivals = [r.arrival_s for r in reqs]
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0  # a gamma gap may underflow to 0
    for r in reqs:
        assert lo <= r.prompt_tokens and (hi is None or r.prompt_tokens <= hi)
        assert r.output_tokens >= 1
