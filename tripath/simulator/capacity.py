"""Saturation throughput of the replicas, so a scenario can give its load as a fraction of it.

For mean prompt length P and mean output length O (workload.mean_lengths), one replica at
saturation runs the largest batch its limits allow:

    B* = min(max_batch_size, floor(kv_capacity / ((P + O) * kv_bytes_per_token)))   (at least 1)

(at least 1 so that a rate exists when the mean request does not fit; such requests are then
rejected at arrival, which the summary counts). B* requests in flight take, per generation of B*
requests served:

    (O - 1) decode iterations at batch B*, each decode_ms(B*, S) with the batch's mean context
            S = B* * (P + (O + 1) / 2)   (a sequence holds P + k tokens at its k-th output token)
    + B* prefills, each adding its variable part prefill_ms(P, 0) - prefill_ms(0, 0) to the
      iteration it shares with the decodes (tripath/simulator/costs.py); when O = 1 there are no decodes
      to share with and each prefill pays the fixed part too.

    (+ with the profile's optional step_overhead: its value once per iteration of the above)
    saturation rate per replica = B* / that time;  cluster rate = replicas * per-replica rate.

It is an estimate (lengths at their means, context at its mean, prefills spread evenly): the
simulator is the ground truth, this only maps load_fraction onto a request rate. With optimization
paths on, tripath/simulator/paths/capacity.py makes the same estimate on the paths' physics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Saturation:
    """The saturation estimate and the numbers it came from (for the summary)."""

    batch: int
    requests_per_s_per_replica: float
    replicas: int
    # with paths (tripath/simulator/paths/capacity.py): bytes per token, admissible tokens, K, tokens per round, ...
    detail: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def requests_per_s(self) -> float:
        return self.requests_per_s_per_replica * self.replicas


def saturation(profile: Any, mean_prompt: float, mean_output: float, replicas: int, max_batch_size: int,
               kv_capacity_bytes: int) -> Saturation:
    """Saturation throughput of ``replicas`` replicas for requests of these mean lengths."""
    if not (mean_prompt >= 1 and mean_output >= 1):
        raise ValueError(f"mean lengths must be >= 1 token, got prompt {mean_prompt}, output {mean_output}")
    per_request = (mean_prompt + mean_output) * profile.model.kv_bytes_per_token
    batch = max(1, min(max_batch_size, math.floor(kv_capacity_bytes / per_request)))
    fixed = profile.prefill_ms(0, 0)
    prefill_variable = profile.prefill_ms(mean_prompt, 0) - fixed
    decodes = mean_output - 1.0
    context = batch * (mean_prompt + (mean_output + 1.0) / 2.0)
    ms = decodes * profile.decode_ms(batch, context) + batch * prefill_variable
    if decodes <= 0.0:
        ms += batch * fixed
    costs = getattr(profile, "costs", {})  # duck-typed profiles (tests, what-ifs) may have only the two accessors
    if "step_overhead" in costs:  # the profile's per-iteration host work, once per iteration (costs.py)
        ov = costs["step_overhead"]
        if decodes > 0.0:  # each prefill joins a decode iteration: one more sequence and P more tokens there
            joined = ov.evaluate(sequences=1, new_tokens=mean_prompt) - ov.evaluate(sequences=0, new_tokens=0)
            ms += decodes * ov.evaluate(sequences=batch, new_tokens=batch) + batch * joined
        else:
            ms += batch * ov.evaluate(sequences=1, new_tokens=mean_prompt)
    return Saturation(batch, 1000.0 * batch / ms, replicas)

