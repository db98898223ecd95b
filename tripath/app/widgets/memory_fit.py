"""Memory fit per candidate: weights, KV per request, the batch that fits, what goes to host or SSD.

Nothing here is new physics: each number is what the simulator itself uses for that candidate on the profile.

- weights: the profile's ``model.weight_bytes`` (one tensor-parallel group), x the sequence-parallel degree
  (every SP rank is a TP group holding the whole model);
- KV bytes per token (compression's ratio applied), the device KV budget of one replica (SP's ranks pooled)
  and the host/SSD tiers: tripath/simulator/paths/step.py ``PathStep`` (its Transforms and TierPhysics);
- the batch that fits: tripath/simulator/paths/capacity.py ``path_saturation``'s batch (the same rule the
  saturation estimate uses: max_batch_size or the admissible tokens over the request's tokens, and the
  engine's device-residency rule with tiering), at the mean request and at the P99 request length;
- where the KV of that mean-length batch lives with tiering: ``TierPhysics.placement`` (device, host, SSD).

Request lengths: the mean is the workload's exact mean (``mean_lengths``); the P99 is of prompt + output tokens
over ``SAMPLE`` requests drawn as the simulator draws them (seed 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tripath.planning.candidates import Candidate
from tripath.planning.scenario_dict import build, with_fields, with_requests
from tripath.profile.profile import Profile
from tripath.simulator.paths.capacity import path_saturation
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep
from tripath.simulator.scenario.workload import generate_arrays, mean_lengths

GIB = 2**30
SAMPLE = 20_000


def request_lengths(data: dict[str, Any], source: str | None) -> dict[str, float]:
    """Mean prompt, mean output and P99 (prompt + output) tokens of the scenario's requests."""
    scenario = build(with_requests(data, SAMPLE), source)
    prompt, output = mean_lengths(scenario.workload)
    rate = scenario.workload.arrival.rate_per_s or 1.0
    # lengths only: a closed loop's arrival times (all 0 until the run sends them) are never read here
    _, prompts, outputs, _, _ = generate_arrays(scenario.workload, np.random.default_rng(0), rate, closed_loop=True)
    total = np.asarray(prompts, dtype=float) + np.asarray(outputs, dtype=float)
    return {"mean_prompt": prompt, "mean_output": output,
            "p99_total": float(math.ceil(np.quantile(total, 0.99)))}


def _batch(scenario: Any, costs: RunCosts, total: float, output: float, limit: int) -> int:
    """path_saturation's batch for requests of ``total`` tokens (its batch depends on prompt + output only)."""
    out = min(output, total - 1.0) if total > 1.0 else 1.0
    return path_saturation(scenario, costs, max(1.0, total - out), max(1.0, out), 1, limit).batch


def candidate_fit(data: dict[str, Any], source: str | None, profile: Profile, candidate: Candidate,
                  lengths: dict[str, float]) -> dict[str, Any]:
    """One row of the breakdown for one candidate (which the profile supports) on one replica."""
    one = with_fields(candidate.apply(data), {"cluster.gpus": candidate.gpus_per_replica(profile)})
    scenario = build(one, source)
    costs = RunCosts.for_scenario(scenario, profile)
    step = PathStep(costs, np.random.default_rng(0))
    t = step.transforms
    per_token = int(t.kv_bytes_per_token)
    mean_total = lengths["mean_prompt"] + lengths["mean_output"]
    limit = int(scenario.batching.max_batch_size)
    batch_mean = _batch(scenario, costs, mean_total, lengths["mean_output"], limit)
    batch_p99 = _batch(scenario, costs, lengths["p99_total"], lengths["mean_output"], limit)
    admissible = int(step.kv_capacity_tokens)
    host = ssd = None
    if step.tiers is not None:
        _, host_tokens, ssd_tokens = step.tiers.placement(int(round(batch_mean * mean_total)))
        host, ssd = host_tokens * per_token / GIB, ssd_tokens * per_token / GIB
    p99_fits = lengths["p99_total"] <= admissible
    return {
        "candidate": candidate.name,
        "GPUs per replica": int(t.gpus),
        "weights GiB": profile.model.weight_bytes * t.degree / GIB,
        "KV MiB per token": per_token / 2**20,
        "device KV budget GiB": t.kv_capacity_bytes / GIB,
        "KV per mean request GiB": mean_total * per_token / GIB,
        "KV per P99 request GiB": lengths["p99_total"] * per_token / GIB,
        "batch that fits (mean)": batch_mean,
        "batch that fits (P99)": batch_p99 if p99_fits else 0,
        "limited by": "max_batch_size" if batch_mean >= limit else "KV memory",
        "to host GiB (mean batch)": host,
        "to SSD GiB (mean batch)": ssd,
    }


def breakdown(data: dict[str, Any], source: str | None, profile: Profile, chosen: list[Candidate]
              ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """(request lengths, one row per candidate) for the candidates the profile supports."""
    lengths = request_lengths(data, source)
    return lengths, [candidate_fit(data, source, profile, c, lengths) for c in chosen]
