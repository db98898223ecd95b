"""One sweep, three ways (in process, process pool, local Ray instance): identical results; the cache."""

from __future__ import annotations

import pytest

from tests.helpers import SEED as PROFILE
from tests.timing import slack
from tripath.planning.cache import ResultCache
from tripath.planning.executor import LocalPoolExecutor, make_executor
from tripath.planning.sweep import make_job, run_job, run_sweep
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict
from tripath.simulator.summary import summary


def scenario(rate: float, wait_ms: float = 0.0) -> dict:
    return {"name": f"tiny-{rate}", "workload": {"requests": 40, "arrival": {"kind": "poisson", "rate_per_s": rate},
                                                 "prompt_tokens": {"kind": "uniform", "low": 256, "high": 2048},
                                                 "output_tokens": {"kind": "uniform", "low": 8, "high": 64}},
            "batching": {"max_batch_size": 8, "max_wait_ms": wait_ms}, "sla": {"ttft_p99_ms": 3000.0}}


def jobs() -> list:
    return [make_job(scenario(rate), None, PROFILE, seed=3, replications=2) for rate in (0.5, 1.0, 2.0)]


class CountingExecutor(LocalPoolExecutor):
    """The in-process executor, counting the jobs it is handed (to see what the cache saved)."""

    def __init__(self) -> None:
        super().__init__(1)
        self.jobs = 0

    def map(self, fn, specs, progress=None):
        self.jobs += len(specs)
        return super().map(fn, specs, progress)


def test_process_pool_equals_in_process_and_keeps_order():
    inline = [o.data for o in run_sweep(jobs(), LocalPoolExecutor(1))]
    pooled = [o.data for o in run_sweep(jobs(), LocalPoolExecutor(2))]
    assert pooled == inline
    assert [d["rate_per_s"] for d in inline] == [0.5, 1.0, 2.0]
    # more load, longer queues: the sweep's results are what each job says, in order
    assert inline[0]["p99_ms"]["ttft"]["mean"] < inline[2]["p99_ms"]["ttft"]["mean"]


def test_ray_local_instance_equals_process_pool():
    pytest.importorskip("ray", reason="ray is not installed for this Python")
    from tripath.planning.executor import RayExecutor

    pooled = [o.data for o in run_sweep(jobs(), LocalPoolExecutor(2))]
    executor = RayExecutor(num_cpus=2)
    try:
        on_ray = [o.data for o in run_sweep(jobs(), executor)]
    finally:
        executor.shutdown()
    assert on_ray == pooled


def test_cache_serves_repeats_and_keys_on_the_seed(tmp_path):
    cache = ResultCache(tmp_path)
    first = CountingExecutor()
    a = run_sweep(jobs(), first, cache)
    assert first.jobs == 3
    again = CountingExecutor()
    b = run_sweep(jobs() + jobs()[:1], again, cache)
    assert again.jobs == 0
    assert [o.data for o in b] == [o.data for o in a] + [a[0].data]
    other_seed = make_job(scenario(0.5), None, PROFILE, seed=4, replications=2)
    assert other_seed.key() != jobs()[0].key()
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes leave no temp files


def test_refused_scenario_is_an_error_outcome_not_an_exception():
    data = scenario(1.0)
    data["strategy"] = {"compression": {"mode": "int8"}}  # the seed profile measured no compression mode
    out = run_job(make_job(data, None, PROFILE))
    assert "int8" in out["error"]


def test_unknown_executor_kind():
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("dask")


def test_code_version_covers_subpackages(tmp_path):
    """An edit to a nested simulator module (simulator/paths/...) or to core/ changes the cache's code version."""
    import shutil

    from tripath.planning.cache import PACKAGE_ROOT, source_digest

    root = tmp_path / "tripath"
    for folder in ("core", "planning", "profile", "simulator"):
        shutil.copytree(PACKAGE_ROOT / folder, root / folder)
    before = source_digest(root)
    assert before == source_digest(PACKAGE_ROOT)
    for nested in ("simulator/paths/prefix.py", "core/metrics.py"):
        path = root / nested
        path.write_text(path.read_text() + "\n# edited\n")
        after = source_digest(root)
        assert after != before
        before = after


def _slow_marker(path: str) -> str:
    """A job that takes a while and leaves a file behind when it ran."""
    import pathlib
    import time

    time.sleep(0.3)
    pathlib.Path(path).write_text("ran")
    return path


class _Stop(Exception):
    pass


class _StopAtFirst:
    """A progress bar whose first tick raises, as the app's does when its Stop button reruns the page."""

    def update(self, n: int = 1) -> None:
        raise _Stop


def test_a_stopped_pool_drops_the_jobs_it_had_not_started(tmp_path) -> None:
    import multiprocessing
    import time

    paths = [str(tmp_path / f"job{i}") for i in range(20)]
    others = set(multiprocessing.active_children())
    with pytest.raises(_Stop):
        LocalPoolExecutor(2).map(_slow_marker, paths, progress=_StopAtFirst())
    # The pool's workers exit once they have run what they hold (had the jobs not been dropped: all 20): wait for
    # that event, not for a time that a busy machine may not suffice for
    deadline = time.monotonic() + slack(30)
    while set(multiprocessing.active_children()) - others and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(multiprocessing.active_children()) - others, "the pool's workers did not exit"
    ran = sum(1 for p in paths if (tmp_path / p).exists())
    assert 1 <= ran <= 8, ran  # the jobs handed to a worker before the stop, not all 20


def test_an_sla_change_reuses_the_simulations_and_judges_them_anew(tmp_path):
    """The cache keys a simulation without its SLA: the same jobs under new targets run nothing, and their judged
    outcomes are exactly what simulating them afresh under those targets gives."""
    cache = ResultCache(tmp_path)
    run_sweep(jobs(), CountingExecutor(), cache)
    looser = []
    for rate in (0.5, 1.0, 2.0):
        data = scenario(rate)
        data["sla"] = {"ttft_p99_ms": 900.0, "tpot_p99_ms": 40.0}
        looser.append(make_job(data, None, PROFILE, seed=3, replications=2))
    again = CountingExecutor()
    judged = [o.data for o in run_sweep(looser, again, cache)]
    assert again.jobs == 0
    assert judged == [run_job(job) for job in looser]
    assert judged[0]["sla_targets_ms"] == {"ttft": 900.0, "tpot": 40.0, "e2e": None}
    assert 0.0 <= judged[2]["attainment"]["all"] <= judged[2]["attainment"]["ttft"] <= 1.0
    # the shares are the simulator summary's, counted from the stored latencies
    data = scenario(2.0)
    data["sla"] = {"ttft_p99_ms": 900.0, "tpot_p99_ms": 40.0}
    result = simulate(scenario_from_dict(data, None), PROFILE, seed=3, replications=2)
    assert judged[2]["attainment"] == {term: (a or {}).get("mean")
                                       for term, a in summary(result)["sla"]["attainment"].items()}


def test_an_sla_steered_policy_keys_on_the_sla():
    """The adaptive policy steers by the SLA, so its simulations are keyed with it."""
    a, b = scenario(1.0), scenario(1.0)
    for data, ttft in ((a, 3000.0), (b, 2000.0)):
        data["batching"] = {"policy": "adaptive", "max_batch_size": 8}
        data["sla"] = {"ttft_p99_ms": ttft}
    assert make_job(a, None, PROFILE).key() != make_job(b, None, PROFILE).key()
    plain = scenario(1.0)
    plain["sla"] = {"ttft_p99_ms": 2000.0}
    assert make_job(plain, None, PROFILE).key() == make_job(scenario(1.0), None, PROFILE).key()
