"""Saturation throughput of replicas with optimization paths on (capacity.py's estimate, path by path).

tripath/simulator/capacity.py estimates the baseline; with [strategy.*] tables the same generation-of-B*
argument is made on the paths' physics (tripath/simulator/paths/step.py and each path's module), for mean
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
                      (round_costs in the profile: f = K c(B*, S) + v(K, B*, S), paths/speculative.py)
                      (E = f = 1 and no draft without speculation; prompt lookup: c = 0)
    one decode round  r  = f x decode'(B*, S) + paging(S)
    generation        ms = ((O - 1) / E) x r + B* x (1 + c) x (prefill'(P, 0) - prefill'(0, 0))
                      (+ B* x prefill'(0, 0) when O = 1, as capacity.py)
    rate per replica  B* x 1000 / ms;  replicas = gpus // (tp x P_sp)  (runner.cluster_config)

decode' and prefill' are the transformed cost model (compression's decode overhead; SP's split,
speedup and merge: paths/step.py path_cost). paging(S) is TierPhysics.iteration for a decode
iteration holding S live tokens that reads all of them and writes B* x E: in steady state the whole
off-device share of the KV is paged in every iteration (paths/tiered.py), with overlap 0; where
the engine's tier rule applies (measured profiles), TierPhysics.engine_step of B* sequences at the
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

import numpy as np

from tripath.core.speculative import SpecCosts, best_k, predicted_speedup, round_cost
from tripath.simulator.capacity import Saturation
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.speculative import SpeculativeParams, expected_survival, linear_verify
from tripath.simulator.paths.step import Transforms
from tripath.simulator.paths.tiered import TierPhysics
from tripath.simulator.scenario.scenario import Scenario


def tokens_per_round(params: SpeculativeParams, tasks: list[tuple[str, float]], k: int, drop: float) -> float:
    """E: mean tokens a sequence emits per round of ``k`` drafts, over the task mix (weights normalised; the
    tasks in ``params``' order)."""
    if k == 0:
        return 1.0
    weights = np.array([w for _, w in tasks], dtype=float)
    # averaged over the per-request acceptance where the profile has a between-prompt spread
    survival = expected_survival(params, k, drop)
    per_task = 1.0 + survival.sum(axis=1)
    return float(weights @ per_task / weights.sum())


def _round_factor(params: SpeculativeParams, c: float, k: int, batch: int, context: float) -> float:
    """f = K c + v(K) with the profile's measured v(K); 1 at K = 0 (a plain step: the profile has no v(0)). With
    the profile's round_costs, c(B, S) and v(K, B, S) at the estimate's batch and context."""
    if params.round_costs is not None:
        return params.round_factor(k, batch, context)
    return 1.0 if k == 0 else round_cost(k, c, float(params.verify[k]))


def speculative_k(params: SpeculativeParams, tasks: list[tuple[str, float]], drop: float, c: float,
                  batch: int = 1, context: float = 0.0) -> int:
    """The K the estimate runs: the scenario's (or profile's) K, or adaptive's best K (0: fallen back)."""
    spec = params.spec
    k_max = params.k
    if not spec.adaptive:
        return k_max
    best, speedup = best_k(lambda k: tokens_per_round(params, tasks, k, drop)
                           / _round_factor(params, c, k, batch, context), k_max)
    exit_speedup = 1.0
    if spec.fallback_acceptance is not None:
        base, per_token = linear_verify(params, k_max)
        costs, a_f = SpecCosts(c, base, per_token), spec.fallback_acceptance
        exit_speedup = best_k(lambda k: predicted_speedup(k, a_f, costs), k_max)[1]
    return best if speedup >= exit_speedup else 0


def path_saturation(scenario: Scenario, costs: RunCosts, mean_prompt: float, mean_output: float, replicas: int,
                    max_batch_size: int) -> Saturation:
    """Saturation throughput of ``replicas`` replicas with the scenario's paths (formula: module docstring), on
    the scenario's converted costs (one rank's KV budget, as the step models take it)."""
    if not (mean_prompt >= 1 and mean_output >= 1):
        raise ValueError(f"mean lengths must be >= 1 token, got prompt {mean_prompt}, output {mean_output}")
    strategy = costs.strategy
    tasks = list(scenario.workload.tasks)
    t = Transforms(costs)
    device_tokens = t.kv_capacity_bytes // t.kv_bytes_per_token
    tiers = None if strategy.tiered is None or costs.tiered is None else TierPhysics(
        strategy.tiered, costs.tiered, t.kv_bytes_per_token, device_tokens, ranks=t.degree)
    admissible = device_tokens if tiers is None else tiers.capacity_tokens
    batch = max(1, min(max_batch_size, math.floor(admissible / (mean_prompt + mean_output))))
    if tiers is not None:
        length = math.ceil(mean_prompt + mean_output)
        while batch > 1 and not tiers.device_fits([length] * batch):
            batch -= 1
    context = batch * (mean_prompt + (mean_output + 1.0) / 2.0)

    k, c, per_round, factor, draft = 0, 0.0, 1.0, 1.0, 0.0
    if costs.speculative is not None:
        params = costs.speculative
        c = params.c
        drop = 0.0 if t.compression is None else t.compression.acceptance_drop
        k = speculative_k(params, tasks, drop, c, batch, context)
        per_round = tokens_per_round(params, tasks, k, drop)
        factor, draft = _round_factor(params, c, k, batch, context), c

    cost = t.cost
    fixed = float(cost.prefill_ms(0, 0))
    prefill_variable = float(cost.prefill_ms(mean_prompt, 0)) - fixed
    paging_ms = 0.0
    if tiers is not None:
        live = round(context)
        if tiers.rule is not None:
            # the engine's per-step rule (tiered_engine_rule.py): every page of every sequence read each step,
            # each sequence at the mean context
            each = [max(1, round(context / batch))] * batch
            paging_ms = 1000.0 * tiers.engine_step(each, each, live)[0]
        else:
            paging_ms = 1000.0 * tiers.iteration(live, live, round(batch * per_round))[0]
    round_ms = factor * float(cost.decode_ms(batch, context)) + paging_ms
    if cost.has_step_overhead:  # the profile's step_overhead: once per round (one engine step)
        round_ms += cost.overhead_ms(batch, round(batch * (1 + k)))
    rounds = (mean_output - 1.0) / per_round
    ms = rounds * round_ms + batch * (1.0 + draft) * prefill_variable
    if rounds <= 0.0:
        ms += batch * fixed
    detail = {"kv_bytes_per_token": t.kv_bytes_per_token, "admissible_tokens": admissible, "k": k,
              "tokens_per_round": per_round, "round_factor": factor, "paging_ms_per_round": paging_ms}
    return Saturation(batch, 1000.0 * batch / ms, replicas, detail)
