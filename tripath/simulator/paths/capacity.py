"""Saturation throughput of replicas with optimization paths on (capacity.py's estimate, path by path).

tripath/simulator/capacity.py estimates the baseline; with [strategy.*] tables the same generation-of-B*
argument is made on the paths' physics (tripath/simulator/paths/step.py and the path modules beside it), for mean
prompt P and output O tokens, with b the profile's KV bytes per token and C one rank's KV budget:

    bytes per token   b' = ceil(b x kv_bytes_ratio)                          (compression; else b)
    device tokens     D  = floor(P_sp x C / b')                              (SP degree P_sp; else 1)
    admissible tokens A  = D + host_tokens + ssd_tokens                       (tiered; else D)
    batch             B* = min(max_batch_size, floor(A / (P + O)))   (at least 1, as capacity.py)
                      tiered: also the largest B whose B sequences of P + O tokens fit the engine's
                      device residency rule (TierPhysics.device_fits: sinks + window per sequence)
    context           S  = B* x (P + (O + 1) / 2)                            (mean, as capacity.py)
    speculation       E  = sum over tasks w_t (1 + sum_{j<=K} p_t,1 ... p_t,j)  tokens per round
                      f  = K c + v(K)  target steps per round;  draft prefill factor 1 + c
                      (E = f = 1 and no draft without speculation; prompt lookup: c = 0)
    one decode round  r  = f x decode'(B*, S) + paging(S)
    generation        ms = ((O - 1) / E) x r + B* x (1 + c) x (prefill'(P, 0) - prefill'(0, 0))
                      (+ B* x prefill'(0, 0) when O = 1, as capacity.py)
    rate per replica  B* x 1000 / ms;  replicas = gpus // (tp x P_sp)  (runner.cluster_config)

decode' and prefill' are the transformed cost model (compression's decode overhead; SP's split,
speedup and merge: step.path_cost). paging(S) is TierPhysics.iteration for a decode
iteration holding S live tokens that reads all of them and writes B* x E: in steady state the whole
off-device share of the KV is paged in every iteration (tiered.py), with overlap 0; where
real_engine's tier rule applies (measured profiles), TierPhysics.engine_step of B* sequences at the
mean context instead (the tiered read's extra plus page moves per step). With
adaptive K the estimate takes the K in 1..K_max that maximises E(K) / f(K) (the controller's
objective), or plain decoding (K = 0) when that best speedup is below the controller's exit
threshold (1, or S*(fallback_acceptance)).

What it leaves out (so it is an estimate, like capacity.py's): lengths and context at their means;
K capped at a sequence's remaining tokens; paging of prompts written in prefill iterations (only
decode-iteration paging is counted: the estimate is slightly optimistic with tiering); the adaptive
controller's probing. The simulator is the ground truth; this maps load_fraction onto a rate.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tripath.engine.speculative.controller import SpecCosts, best_k
from tripath.simulator.capacity import Saturation
from tripath.simulator.costs import IterationCost
from tripath.simulator.paths.speculative import expected_survival, linear_verify
from tripath.simulator.paths.step import _Transforms
from tripath.simulator.paths.tiered import TierPhysics
from tripath.simulator.scenario.strategy import StrategySpec, check_against_profile


def tokens_per_round(profile: Any, spec: Any, tasks: list[tuple[str, float]], k: int, drop: float) -> float:
    """E: mean tokens a sequence emits per round of ``k`` drafts, over the task mix (weights normalised)."""
    if k == 0:
        return 1.0
    names = [name for name, _ in tasks]
    weights = np.array([w for _, w in tasks], dtype=float)
    # averaged over the per-request acceptance where the profile has a between-prompt spread
    survival = expected_survival(profile, names, k, spec.proposer == "prompt_lookup", drop)
    per_task = 1.0 + survival.sum(axis=1)
    return float(weights @ per_task / weights.sum())


def _round_factor(profile: Any, c: float, k: int) -> float:
    return 1.0 if k == 0 else k * c + float(profile.verify_cost_ratio(k))


def speculative_k(profile: Any, spec: Any, tasks: list[tuple[str, float]], drop: float, c: float) -> int:
    """The K the estimate runs: the scenario's (or profile's) K, or adaptive's best K (0: fallen back)."""
    k_max = spec.k or profile.speculative.k
    if not spec.adaptive:
        return k_max
    speedups = {k: tokens_per_round(profile, spec, tasks, k, drop) / _round_factor(profile, c, k)
                for k in range(1, k_max + 1)}
    best = max(speedups, key=lambda k: speedups[k])
    exit_speedup = 1.0
    if spec.fallback_acceptance is not None:
        base, per_token = linear_verify(profile, k_max)
        exit_speedup = best_k(spec.fallback_acceptance, SpecCosts(c, base, per_token), k_max)[1]
    return best if speedups[best] >= exit_speedup else 0


def path_saturation(scenario: Any, profile: Any, mean_prompt: float, mean_output: float, replicas: int,
                    max_batch_size: int, kv_capacity_bytes: int) -> Saturation:
    """Saturation throughput of ``replicas`` replicas with the scenario's paths (formula: module docstring).

    ``kv_capacity_bytes`` is one rank's KV budget (runner.kv_capacity), as the step models take it."""
    if not (mean_prompt >= 1 and mean_output >= 1):
        raise ValueError(f"mean lengths must be >= 1 token, got prompt {mean_prompt}, output {mean_output}")
    strategy: StrategySpec = scenario.strategy
    tasks = list(scenario.workload.tasks)
    check_against_profile(strategy, profile, tuple(name for name, _ in tasks), scenario.source_path)
    t = _Transforms(IterationCost.from_profile(profile), profile, strategy, kv_capacity_bytes)
    device_tokens = t.kv_capacity_bytes // t.kv_bytes_per_token
    tiers = None if strategy.tiered is None else TierPhysics(
        strategy.tiered, profile, t.kv_bytes_per_token, device_tokens, ranks=t.degree)
    admissible = device_tokens if tiers is None else tiers.capacity_tokens
    batch = max(1, min(max_batch_size, math.floor(admissible / (mean_prompt + mean_output))))
    if tiers is not None:
        length = math.ceil(mean_prompt + mean_output)
        while batch > 1 and not tiers.device_fits([length] * batch):
            batch -= 1
    context = batch * (mean_prompt + (mean_output + 1.0) / 2.0)

    k, c, per_round, factor, draft = 0, 0.0, 1.0, 1.0, 0.0
    if strategy.speculative is not None:
        spec = strategy.speculative
        c = 0.0 if spec.proposer == "prompt_lookup" else float(profile.speculative.cost_ratio.value)
        drop = 0.0 if t.compression is None else t.compression.acceptance_drop
        k = speculative_k(profile, spec, tasks, drop, c)
        per_round = tokens_per_round(profile, spec, tasks, k, drop)
        factor, draft = _round_factor(profile, c, k), c

    cost = t.cost
    fixed = float(cost._prefill_ms(0, 0))
    prefill_variable = float(cost._prefill_ms(mean_prompt, 0)) - fixed
    paging_ms = 0.0
    if tiers is not None:
        live = round(context)
        if tiers.rule is not None:
            # real_engine's per-step rule (tiered_engine_rule.py): every page of every sequence read each step,
            # each sequence at the mean context
            each = [max(1, round(context / batch))] * batch
            paging_ms = 1000.0 * tiers.engine_step(each, each, live)[0]
        else:
            paging_ms = 1000.0 * tiers.iteration(live, live, round(batch * per_round))[0]
    round_ms = factor * float(cost._decode_ms(batch, context)) + paging_ms
    if cost._overhead_ms is not None:  # the profile's step_overhead: once per round (one engine step)
        round_ms += cost.overhead_ms(batch, round(batch * (1 + k)))
    rounds = (mean_output - 1.0) / per_round
    ms = rounds * round_ms + batch * (1.0 + draft) * prefill_variable
    if rounds <= 0.0:
        ms += batch * fixed
    detail = {"kv_bytes_per_token": t.kv_bytes_per_token, "admissible_tokens": admissible, "k": k,
              "tokens_per_round": per_round, "round_factor": factor, "paging_ms_per_round": paging_ms}
    return Saturation(batch, 1000.0 * batch / ms, replicas, detail)
