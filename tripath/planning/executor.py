"""Where sweep jobs run: one interface, a local process pool or a Ray cluster.

Both map a picklable, module-level job function over job specs and return the results in
submission order, so what a sweep aggregates never depends on which worker finished first.
Each job is a pure function of its spec (every random draw comes from the spec's seed), so the
same sweep gives the same results on either executor, bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Protocol

from tqdm import tqdm


class Executor(Protocol):
    """Maps ``fn`` over ``specs``; results in submission order; ``progress`` ticks once per job done."""

    name: str

    def map(self, fn: Callable[[Any], Any], specs: Sequence[Any], progress: tqdm | None = None) -> list[Any]:
        ...


class LocalPoolExecutor:
    """A concurrent.futures process pool; one worker (or one job) runs in this process, no pool."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        workers = (os.cpu_count() or 1) if workers is None else workers
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def map(self, fn: Callable[[Any], Any], specs: Sequence[Any], progress: tqdm | None = None) -> list[Any]:
        if self.workers == 1 or len(specs) <= 1:
            results = []
            for spec in specs:
                results.append(fn(spec))
                if progress is not None:
                    progress.update(1)
            return results
        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(specs)))
        futures: list[Future[Any]] = []
        try:
            futures = [pool.submit(fn, spec) for spec in specs]
            for future in futures:  # wait in submission order: results line up with specs
                future.result()
                if progress is not None:
                    progress.update(1)
        except BaseException:
            # stopped (Ctrl-C, the app's Stop button: its progress callback raises) or a job failed: drop the
            # jobs not yet started instead of running them all before returning; nothing is returned, so no
            # caller caches a part of the sweep. The futures are cancelled here, not only by shutdown's
            # cancel_futures: the pool's manager thread skips that step once the pool object is collected,
            # which happens as this exception leaves the frame
            for future in futures:
                future.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        return [future.result() for future in futures]


class RayExecutor:
    """Ray tasks: ``address`` None starts (or joins) a local instance; "auto" or "ray://host:port" a cluster."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError as err:  # the ray extra: `make run` (pip install -e .) leaves it out
            from tripath.core.errors import InputError

            raise InputError(None, "--executor ray", "needs the ray package, which is not installed: "
                             "pip install -e '.[ray]' (or pip install 'ray>=2.9')") from err
        self._ray = ray
        self.address = address
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address is None and num_cpus is not None:
                kwargs["num_cpus"] = num_cpus  # a local instance only: a cluster has its own
            ray.init(address=address, **kwargs)

    def map(self, fn: Callable[[Any], Any], specs: Sequence[Any], progress: tqdm | None = None) -> list[Any]:
        ray = self._ray
        remote = ray.remote(fn)
        refs = [remote.remote(spec) for spec in specs]
        pending = list(refs)
        while pending:  # tick the bar as jobs finish; the results still come back in submission order
            done, pending = ray.wait(pending, num_returns=1)
            if progress is not None:
                progress.update(len(done))
        return ray.get(refs)

    def shutdown(self) -> None:
        self._ray.shutdown()


def make_executor(kind: str = "local", workers: int | None = None, address: str | None = None) -> Executor:
    """``local`` (a process pool of ``workers``, default every core) or ``ray`` (at ``address``)."""
    if kind == "local":
        return LocalPoolExecutor(workers)
    if kind == "ray":
        return RayExecutor(address)
    raise ValueError(f"unknown executor {kind!r}; known: local, ray")
