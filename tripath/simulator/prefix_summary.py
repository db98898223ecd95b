"""summary.json's ``prefix_cache`` section: what prefix caching hit, saved and loaded, and TTFT with and without
a hit (tripath/simulator/paths/prefix.py counts it). Present only when prefix caching is on, so every other
summary keeps its bytes."""

from __future__ import annotations

from typing import Any

import numpy as np

from tripath.core import metrics
from tripath.core.records import RunResult
from tripath.simulator.paths.prefix import TIERS, PrefixCounters, PrefixRun


def prefix_section(runs: tuple[RunResult, ...]) -> dict[str, Any] | None:
    """Means over replications (95% Student-t intervals) of the prefix figures; None when the cache was off."""
    prefix_runs = [run.prefix for run in runs]
    if not prefix_runs or not all(isinstance(p, PrefixRun) for p in prefix_runs):
        return None
    estimate = metrics.estimate
    first: PrefixRun = prefix_runs[0]  # type: ignore[assignment]
    counters: list[PrefixCounters] = [p.counters for p in prefix_runs]  # type: ignore[union-attr]
    ttft: dict[str, dict[str, Any]] = {}
    for group in ("cached", "uncached"):
        per_run, shares = [], []
        for run, p in zip(runs, prefix_runs, strict=True):
            assert isinstance(p, PrefixRun)
            done = [(i, r) for i, r in enumerate(run.records) if r.completed]
            chosen = [r for i, r in done if (p.cached_tokens.get(i, 0) > 0) == (group == "cached")]
            per_run.append(metrics.percentiles(np.array([r.first_token_s - r.arrival_s for r in chosen], dtype=float)))
            shares.append(len(chosen) / len(done) if done else 0.0)
        ttft[group] = {"share_of_completed": estimate(shares, high=1.0),
                       **{level: estimate([p[level] * 1000.0 for p in per_run]) for level in ("p50", "p99")}}

    def rate(num: str, den: str) -> dict[str, float | None]:
        return estimate([getattr(c, num) / getattr(c, den) if getattr(c, den) else 0.0 for c in counters], high=1.0)

    return {
        "block_tokens": first.block_tokens,
        "routing": first.routing,
        "workload_blocks": first.source,
        **({"note": first.note} if first.note else {}),
        "hit_rate": {"tokens": rate("saved_tokens", "prompt_tokens"), "blocks": rate("hit_blocks", "queried_blocks")},
        "prefill_tokens_saved": estimate([c.saved_tokens for c in counters]),
        "prompt_tokens": estimate([c.prompt_tokens for c in counters]),
        "hit_blocks_per_tier": {tier: estimate([c.hit_blocks_per_tier[tier] for c in counters]) for tier in TIERS},
        "off_device_hits": {"loaded": estimate([c.loads for c in counters]),
                            "recomputed": estimate([c.recomputes for c in counters]),
                            "recomputed_blocks": estimate([c.recomputed_blocks for c in counters]),
                            "load_s": estimate([c.load_s for c in counters]),
                            "rule": "per admission: load the off-device hits back over the paging links or "
                                    "recompute them, whichever the profile's costs price lower"},
        "bytes_loaded": {link: estimate([c.loaded_bytes[link] for c in counters])
                         for link in first.counters.loaded_bytes},
        "evictions": estimate([c.evictions for c in counters]),
        "ttft_ms": ttft,
        "numbers_from": "simulated: hits by tripath/core/prefix.py PrefixBlockIndex per replica; a hit's suffix "
                        "priced by the profile's prefill over its cached context",
    }
