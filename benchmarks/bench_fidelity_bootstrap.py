"""Cost of the fidelity report's bootstrap intervals (tripath/fidelity/bootstrap.py), per scenario side.

Measures, in one run and in thread CPU time (time.thread_time: other jobs on a shared machine do
not inflate it), bootstrap_ci (vectorised percentiles over a (resamples, n) index matrix) against
the same intervals computed with np.nanpercentile per resample, for synthetic record sets of
n = 100, 200, 300 requests (exponential TTFT, as tests/fidelity/test_bootstrap.py), and prints
the median of --repeats runs and the ratio. The validation runs bootstrap_ci twice per scenario
(wall-clock side, CPU-time replay) and once more with --noise.

    .venv/bin/python benchmarks/bench_fidelity_bootstrap.py [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np

from tripath.core.records import COMPLETED, RequestRecord
from tripath.fidelity.bootstrap import RESAMPLES, bootstrap_ci, ci_rng, per_request_ms


def records(n: int, seed: int = 0) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i, ttft in enumerate(rng.exponential(0.05, size=n)):
        first = 0.5 * i + float(ttft)
        out.append(RequestRecord(i, "code", 0.5 * i, 100, 10, 0, 0.5 * i, first, first + 0.036, COMPLETED))
    return out


def naive(recs: list[RequestRecord], rng: np.random.Generator) -> None:
    """The same latency intervals, one np.nanpercentile call per resample (the straightforward way)."""
    values = per_request_ms(recs)
    idx = rng.integers(0, len(recs), size=(RESAMPLES, len(recs)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for v in values.values():
            stats = np.array([np.nanpercentile(v[row], [50, 90, 99]) for row in idx])
            np.percentile(stats, [2.5, 97.5], axis=0)


def thread_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for n in (100, 200, 300):
        recs = records(n)
        fast = thread_seconds(lambda recs=recs: bootstrap_ci(recs, ci_rng(0, "bench", "real")), args.repeats)
        slow = thread_seconds(lambda recs=recs: naive(recs, ci_rng(0, "bench", "real")), args.repeats)
        rows.append({"requests": n, "resamples": RESAMPLES, "bootstrap_ci_s": fast, "nanpercentile_loop_s": slow,
                     "ratio": slow / fast if fast > 0 else None})
    if args.json:
        print(json.dumps({"clock": "time.thread_time, median of repeats", "rows": rows}, indent=2))
        return
    print(f"thread CPU seconds, median of {args.repeats}; {RESAMPLES} resamples; latency + throughput intervals")
    print("requests  bootstrap_ci  nanpercentile loop (latency only)  ratio")
    for r in rows:
        print(f"{r['requests']:8d}  {r['bootstrap_ci_s']:12.4f}  {r['nanpercentile_loop_s']:33.4f}  {r['ratio']:5.1f}x")


if __name__ == "__main__":
    main()
