"""Between-prompt spread of draft acceptance: how much a task's prompts differ in their own a.

Each prompt i of a task, decoded greedily at fixed K, gives accepted_i draft tokens out of
n_i = accepted_i + rejections_i trials, so its own a_i = accepted_i / n_i. The a_i scatter for two
reasons: the prompts really differ (the spread the simulator needs: each request's own a), and each
a_i is estimated from a finite number of trials (noise the simulator already draws round by round).
The method of moments separates them (as DerSimonian and Laird's random-effects estimate does):

    sd_between^2 = max(0, S^2 - mean_i m (1 - m) / n_i)

with S^2 the sample variance of the a_i (ddof 1) and m the task's pooled a = sum accepted / sum n
(the profile's mean); m (1 - m) / n_i is a_i's variance if the prompt's trials were Bernoulli(m).
That within-prompt term assumes independent trials; rejections come in runs (docs/speculative.md),
which would make the true within-prompt variance larger and this estimate of the spread somewhat
high, while a draft that is surer on some stretches than others makes it smaller. The estimate is
capped just below sqrt(m (1 - m)), the sd of the widest law on [0, 1] with mean m, which a Beta
cannot reach.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

CAP = 0.99  # fraction of sqrt(m (1 - m)) the estimate may reach (a Beta needs sd strictly below it)


def between_prompt_sd(counts: Sequence[tuple[int, int]]) -> tuple[float, int] | None:
    """(sd_between, prompts used) from per-prompt (accepted, trials); None with fewer than 2 judged prompts."""
    judged = [(acc, n) for acc, n in counts if n > 0]
    if len(judged) < 2:
        return None
    m = sum(acc for acc, _ in judged) / sum(n for _, n in judged)
    observed = statistics.variance([acc / n for acc, n in judged])
    within = statistics.fmean(m * (1.0 - m) / n for _, n in judged)
    sd = math.sqrt(max(0.0, observed - within))
    return min(sd, CAP * math.sqrt(m * (1.0 - m))), len(judged)
