"""Per-request draft acceptance: each request draws its own a from the task's between-prompt spread.

Measured per prompt, acceptance varies far more than the rounds' own sampling noise explains
(docs/speculative.md, "Per-request acceptance"): how well a draft predicts the target depends on the
text. One task-level a for every request gives every request the same expected tokens per round, so
the simulated TPOT spread would be too narrow.
Where the profile measured the spread (``TaskAcceptance.between_prompt_sd``), request r draws

    a_r ~ Beta(alpha, beta),  alpha = m nu, beta = (1 - m) nu,  nu = m (1 - m) / sd^2 - 1

(moment-matched: E a_r = m, sd a_r = sd; m = the task's per-token a) once, and keeps it for all its
rounds. Its per-position acceptance is the task's raised to one power, p_rj = p_j ** g_r with
g_r = ln a_r / ln m: the map that sends m to a_r, keeps every p in [0, 1], keeps their order, and
leaves a measured p_j = 1 at 1; where the profile has no per-position values (p_j = m) it gives a_r.

The draw is a function of (the replica's seed, request id) only: one uniform from a SeedSequence keyed
by the request, mapped through the Beta's inverse CDF. So the same seed gives the same a_r, bit for
bit, whatever the batching or K does to the order in which requests are first seen, and two scenarios
compared on the same workload give each request the same acceptance (common random numbers). The
replica's own stream of per-round uniforms is not touched.
"""

from __future__ import annotations

import math

import numpy as np

# Spawn-key word that separates the per-request acceptance keys from the replica's own children.
ACCEPTANCE_STREAM = 0xACCE


def beta_parameters(mean: float, sd: float) -> tuple[float, float]:
    """(alpha, beta) of the Beta law with this mean and standard deviation (method of moments)."""
    if not 0.0 < mean < 1.0:
        raise ValueError(f"mean: must be in (0, 1), got {mean!r}")
    var = sd * sd
    if not 0.0 < var < mean * (1.0 - mean):
        raise ValueError(f"sd: must be in (0, sqrt(mean (1 - mean))) = (0, {math.sqrt(mean * (1 - mean)):.4g}), "
                         f"got {sd!r}")
    nu = mean * (1.0 - mean) / var - 1.0
    return mean * nu, (1.0 - mean) * nu


def replica_key(rng: np.random.Generator) -> np.random.SeedSequence:
    """The seed sequence the per-request keys derive from: the replica generator's own (no draw consumed)."""
    seq = getattr(rng.bit_generator, "seed_seq", None)
    if isinstance(seq, np.random.SeedSequence):
        return seq
    # a generator built without a SeedSequence: one draw of it seeds the keys instead
    return np.random.SeedSequence(int(rng.integers(2**63)))


class AcceptanceSpread:
    """Per-request conditional acceptance rows (and their run-length survival) for one replica.

    ``means[t]``, ``sds[t]``: task t's a and between-prompt sd (sd 0: every request gets the task's row);
    ``probs[t, j]``: task t's p_j before any compression drop, which is subtracted after the scaling.
    """

    def __init__(self, means: np.ndarray, sds: np.ndarray, probs: np.ndarray, drop: float,
                 key: np.random.SeedSequence) -> None:
        self.means, self.sds, self.probs, self.drop, self.key = means, sds, probs, drop, key
        self.beta = [beta_parameters(float(m), float(s)) if s > 0 else None for m, s in zip(means, sds, strict=True)]
        self._survival: dict[int, np.ndarray] = {}  # request -> C[j-1] = P(at least j drafts accepted)

    def uniform(self, request: int) -> float:
        """The request's own uniform in [0, 1): 53 bits of a SeedSequence keyed by (replica seed, request)."""
        seq = np.random.SeedSequence(self.key.entropy,
                                     spawn_key=(*self.key.spawn_key, ACCEPTANCE_STREAM, int(request)))
        return float(int(seq.generate_state(1, np.uint64)[0]) >> 11) * 2.0**-53

    def acceptance(self, request: int, task: int) -> float:
        """a_r: the Beta's quantile at the request's uniform (the task's mean where it has no spread)."""
        params = self.beta[task]
        if params is None:
            return float(self.means[task])
        from scipy.special import betaincinv  # here: SciPy's import (~0.3 s) is paid by runs with a spread only

        return float(betaincinv(params[0], params[1], self.uniform(request)))

    def row(self, request: int, task: int) -> np.ndarray:
        """The request's p_j after the compression drop: p_j ** (ln a_r / ln m) - drop, clipped to [0, 1]."""
        probs = self.probs[task]
        if self.beta[task] is not None:
            a_r = self.acceptance(request, task)
            # a_r = 0: g = inf, every p < 1 goes to 0; a_r = 1: g = 0, every p goes to 1
            power = math.inf if a_r <= 0.0 else math.log(a_r) / math.log(float(self.means[task]))
            probs = probs**power
        return np.clip(probs - self.drop, 0.0, 1.0)

    def survival(self, requests: list[int], tasks: list[int], k: int) -> np.ndarray:
        """C[i, j-1] = P(request i accepts at least j drafts), j = 1..k, one cached row per request."""
        cache = self._survival
        rows = []
        for request, task in zip(requests, tasks, strict=True):
            row = cache.get(request)
            if row is None:
                row = cache[request] = np.cumprod(self.row(request, task))
            rows.append(row[:k])
        return np.array(rows).reshape(len(rows), k)

    def forget(self, request: int) -> None:
        self._survival.pop(request, None)


def mean_survival(means: np.ndarray, sds: np.ndarray, probs: np.ndarray, drop: float, nodes: int = 256
                  ) -> np.ndarray:
    """E over a request's a of its run-length survival C[t, j-1] (tasks x k): what the per-request draws average
    to, for the saturation estimate. Midpoint rule on the Beta's quantiles, (i + 1/2) / nodes; a task without
    spread gives its own row's cumprod exactly."""
    out = np.cumprod(np.clip(probs - drop, 0.0, 1.0), axis=1)
    spread = AcceptanceSpread(means, sds, probs, drop, np.random.SeedSequence(0))
    quantiles = (np.arange(nodes) + 0.5) / nodes
    for task, params in enumerate(spread.beta):
        if params is None:
            continue
        from scipy.special import betaincinv  # as in AcceptanceSpread.acceptance

        a = betaincinv(params[0], params[1], quantiles)  # (nodes,)
        power = np.log(a) / math.log(float(means[task]))  # (nodes,); a > 0 at interior quantiles
        rows = np.clip(probs[task][None, :] ** power[:, None] - drop, 0.0, 1.0)  # (nodes, k)
        out[task] = np.cumprod(rows, axis=1).mean(axis=0)
    return out
