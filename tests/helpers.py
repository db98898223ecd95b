"""Plain helpers and constants shared by test modules (used at import time, so not fixtures).

The shipped profiles most tests run on, records compared bit for bit, the iteration costs and Poisson
request lists of the loop-equivalence tests, a paging link on cpu-tiny's KV size, shipped scenarios as raw
dicts, scripts imported by path, and FaultyFS (file system faults for the SSD tier, on a real directory).
"""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import os
import sys
import tomllib
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from tripath.core.data_dirs import REPO_ROOT, SCENARIOS_DIR
from tripath.core.records import RequestRecord
from tripath.core.request import RequestSpec
from tripath.profile.cost_model import Coefficient, CostModel
from tripath.profile.profile import PagingLink, resolve_profile
from tripath.simulator.costs import IterationCost
from tripath.simulator.loop.cluster import simulate_requests

SEED = resolve_profile("seed-llama2-70b-a100")
TINY = resolve_profile("cpu-tiny")  # 6 layers, 3,072 bytes of KV per token
TINY_PAGE_BYTES = 131_072  # one layer's 256-token page on cpu-tiny: 256 x 3,072 / 6

TICK = 1.0 / 1024.0  # seconds; tick_costs are whole ticks, so boundaries and arrivals collide exactly

if TYPE_CHECKING:
    from tripath.engine.model.model import LlamaModel


def bits(records) -> list[tuple]:
    """Records as tuples with floats in hex: equal only if bit-identical (NaN included)."""
    return [tuple(v.hex() if isinstance(v, float) else v for v in dataclasses.astuple(r)) for r in records]


def assert_fast_equals_reference(requests, config, make_cost):
    """The fast path and the one-event-per-iteration reference give bit-identical records and replica stats;
    returns both results (the fast one never uses more events)."""
    fast_cost, ref_cost = make_cost(), make_cost()
    fast = simulate_requests(requests, config, fast_cost, fast=True)
    ref = simulate_requests(requests, config, ref_cost, fast=False)
    assert bits(fast.records) == bits(ref.records)
    for f, r in zip(fast.replicas, ref.replicas, strict=True):
        assert (f.busy_s, f.iterations, f.peak_kv_bytes) == (r.busy_s, r.iterations, r.peak_kv_bytes)
    assert fast.extrapolations == ref.extrapolations
    assert fast.events <= ref.events
    return fast, ref


def tick_costs() -> IterationCost:
    """Costs that are whole multiples of 1/1024 s, exactly (x * 0.9765625 ms / 1000 = x / 1024 s)."""

    def prefill(tokens, context):
        return 0.9765625 * (10 + tokens // 64)

    def decode(batch, total_context):
        return 0.9765625 * (4 + batch + total_context // 512)

    return IterationCost(prefill, decode)


def smooth_costs() -> IterationCost:
    return IterationCost.linear(12.5, 0.02, 7.0, 0.35, 0.00013)


def poisson_requests(rng: np.random.Generator, n: int, rate: float, max_prompt: int, max_output: int,
                     on_ticks: bool = False) -> list[RequestSpec]:
    """n requests arriving as a Poisson process at ``rate``, lengths uniform in [1, max]; ``on_ticks`` floors
    the gaps to whole ticks, so many arrivals land exactly on iteration boundaries, some together."""
    gaps = rng.exponential(1.0 / rate, n)
    if on_ticks:
        gaps = np.floor(gaps / TICK) * TICK
    arrivals = np.cumsum(gaps)
    prompts = rng.integers(1, max_prompt + 1, n)
    outputs = rng.integers(1, max_output + 1, n)
    return [RequestSpec(i, float(arrivals[i]), int(prompts[i]), int(outputs[i])) for i in range(n)]


def tiny_paging_link(setup_ms: float, gbps: float) -> PagingLink:
    """A fitted paging_v1 link (setup_ms + bytes / bandwidth), its ms per 2K tokens at cpu-tiny's KV size."""
    cost = CostModel("paging_v1", {"setup_ms": Coefficient(setup_ms, "ms", "fitted"),
                                   "bandwidth_gbps": Coefficient(gbps, "GB/s", "fitted")}, ("bytes",),
                     {"bytes": (1.0, 1e9)})
    return PagingLink(cost, 2048 * 3072 / (gbps * 1e6))


def load_script(relative: str) -> ModuleType:
    """A script of the repository (``scripts/...py``, not a package module) imported by path, under its file's
    stem in sys.modules: dataclasses look their module up while a class is built."""
    path = REPO_ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def shipped_scenario_dict(name: str) -> dict:
    """A shipped scenario file (data/scenarios/NAME.toml) as its raw TOML dict, a fresh one each call."""
    with open(SCENARIOS_DIR / f"{name}.toml", "rb") as fh:
        return tomllib.load(fh)


def dense_greedy(model: LlamaModel, prompt: list[int], n: int) -> list[int]:
    """Reference: no cache at all, the whole sequence re-run for every token (torch loads only here)."""
    import torch

    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt) :]


def apply_patch(table: dict, patch: dict) -> None:
    """Set each of ``patch``'s keys in ``table``; a None value removes the key instead (a missing field)."""
    for key, value in patch.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value


def peak_in_flight(records: Iterable[RequestRecord]) -> int:
    """Most completed requests admitted and not yet finished at one time (a finish before an admission at the
    same instant)."""
    done = [r for r in records if r.completed]
    events = sorted([(r.admitted_s, 1) for r in done] + [(r.finish_s, -1) for r in done])
    live = peak = 0
    for _, step in events:
        live += step
        peak = max(peak, live)
    return peak


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT


class FaultyFS:
    """The os functions the SSD tier calls (SSDTier's ``fs``), on the real file system, with faults armed.

    Every call goes to ``os`` unchanged unless a fault is armed for its operation: then it raises
    OSError(code) without touching the disk, for calls whose file name passes ``when`` (the name as the
    tier passes it, e.g. "page-3.kv" relative to its directory fd; an fd's name for pwritev / preadv /
    fsync / posix_fadvise / close), at most ``times`` times.  Operations: open-read, open-write (open
    with write flags), close, pwritev, preadv, fsync, posix_fadvise, unlink, mkdir, makedirs, rmdir, listdir.
    ``cut_writes(n)`` makes the next pwritev calls write only their first n bytes (really) and return n.
    """

    OPS = ("open-read", "open-write", "close", "pwritev", "preadv", "fsync", "posix_fadvise", "unlink", "mkdir",
           "makedirs", "rmdir", "listdir")

    def __init__(self) -> None:
        self.faults: dict[str, tuple[int, Callable[[str], bool] | None, int | None]] = {}
        self.names: dict[int, str] = {}  # open fd -> the name it was opened by
        self.raised: list[tuple[str, str, int]] = []  # (operation, name, errno) of every fault raised
        self._cut: tuple[int, int] | None = None  # (bytes per pwritev, calls left)

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)  # constants and anything the tier calls unarmed

    def fail(self, op: str, code: int, when: Callable[[str], bool] | None = None, times: int | None = None) -> None:
        """Arm ``op`` to raise OSError(code) for names passing ``when``, ``times`` times (None: until healed)."""
        if op not in self.OPS:
            raise ValueError(f"FaultyFS.fail: unknown operation {op!r}, one of {self.OPS}")
        self.faults[op] = (code, when, times)

    def read_only(self) -> None:
        """What a file system remounted read-only (ext4 after disk errors) answers: EROFS to every change."""
        for op in ("open-write", "unlink", "mkdir", "rmdir"):
            self.fail(op, errno.EROFS)
        self.fail("makedirs", errno.EROFS, when=lambda name: not os.path.isdir(name))  # exist_ok: no change

    def cut_writes(self, nbytes: int, times: int = 1) -> None:
        self._cut = (nbytes, times)

    def heal(self) -> None:
        """Disarm every fault: the file system works again."""
        self.faults.clear()
        self._cut = None

    def _check(self, op: str, name: object) -> None:
        armed = self.faults.get(op)
        if armed is None:
            return
        code, when, times = armed
        if when is not None and not when(str(name)):
            return
        if times is not None:
            if times <= 1:
                del self.faults[op]
            else:
                self.faults[op] = (code, when, times - 1)
        self.raised.append((op, str(name), code))
        raise OSError(code, os.strerror(code), str(name))

    def open(self, path: object, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        self._check("open-write" if flags & _WRITE_FLAGS else "open-read", path)
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
        self.names[fd] = str(path)
        return fd

    def close(self, fd: int) -> None:
        name = self.names.pop(fd, fd)
        os.close(fd)  # as on Linux, a close that reports an error has released the fd all the same
        self._check("close", name)

    def pwritev(self, fd: int, buffers: list, offset: int) -> int:
        self._check("pwritev", self.names.get(fd, fd))
        if self._cut is not None:
            nbytes, left = self._cut
            self._cut = (nbytes, left - 1) if left > 1 else None
            data = b"".join(bytes(b) for b in buffers)[:nbytes]
            return os.pwrite(fd, data, offset)
        return os.pwritev(fd, buffers, offset)

    def preadv(self, fd: int, buffers: list, offset: int) -> int:
        self._check("preadv", self.names.get(fd, fd))
        return os.preadv(fd, buffers, offset)

    def fsync(self, fd: int) -> None:
        self._check("fsync", self.names.get(fd, fd))
        os.fsync(fd)

    def posix_fadvise(self, fd: int, offset: int, length: int, advice: int) -> None:
        self._check("posix_fadvise", self.names.get(fd, fd))
        os.posix_fadvise(fd, offset, length, advice)

    def unlink(self, path: object, *, dir_fd: int | None = None) -> None:
        self._check("unlink", path)
        os.unlink(path, dir_fd=dir_fd)

    def mkdir(self, path: object, mode: int = 0o777) -> None:
        self._check("mkdir", path)
        os.mkdir(path, mode)

    def makedirs(self, path: object, mode: int = 0o777, exist_ok: bool = False) -> None:
        self._check("makedirs", path)
        os.makedirs(path, mode, exist_ok=exist_ok)

    def rmdir(self, path: object) -> None:
        self._check("rmdir", path)
        os.rmdir(path)

    def listdir(self, path: object) -> list[str]:
        self._check("listdir", path)
        return os.listdir(path)
