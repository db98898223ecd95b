"""Process groups for sequence parallelism: gloo on CPU, NCCL on CUDA, torchrun or spawn.

On CPU each rank is pinned to ``threads_per_rank`` intra-op threads so that P ranks model P
devices (and one rank with the same threads is the fair baseline).  Every collective runs
under ``timeout_s``; ``spawn`` additionally watches the processes, so a rank that dies, or a
group that stops making progress, ends in ``RankFailure`` naming the rank, never a hang.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from tripath.core.atomic import replacing

BACKENDS = ("auto", "gloo", "nccl")


class RankFailure(RuntimeError):
    """A rank of a spawned group raised, exited, or the group missed its deadline."""


@dataclass(frozen=True)
class DistConfig:
    world_size: int
    backend: str = "auto"  # auto: nccl when CUDA is available, else gloo
    master_addr: str = "127.0.0.1"  # localhost only: tests and this machine never leave it
    master_port: int = 0  # 0: spawn picks a free port
    timeout_s: float = 60.0  # per collective; a peer that went silent raises after this
    threads_per_rank: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"DistConfig.world_size: must be >= 1, got {self.world_size}")
        if self.backend not in BACKENDS:
            raise ValueError(f"DistConfig.backend: must be one of {BACKENDS}, got {self.backend!r}")
        if not 0 <= self.master_port < 65536:
            raise ValueError(f"DistConfig.master_port: must be in [0, 65536), got {self.master_port}")
        if not self.timeout_s > 0:
            raise ValueError(f"DistConfig.timeout_s: must be > 0, got {self.timeout_s}")
        if self.threads_per_rank < 1:
            raise ValueError(f"DistConfig.threads_per_rank: must be >= 1, got {self.threads_per_rank}")

    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        return "nccl" if torch.cuda.is_available() else "gloo"


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((addr, 0))
        return int(sock.getsockname()[1])


def init_rank(rank: int, config: DistConfig, local_rank: int | None = None) -> torch.device:
    """Join the default process group as `rank`; returns the device this rank computes on."""
    torch.set_num_threads(config.threads_per_rank)
    backend = config.resolved_backend()
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank if local_rank is None else local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        init_method=f"tcp://{config.master_addr}:{config.master_port}",
        rank=rank,
        world_size=config.world_size,
        timeout=timedelta(seconds=config.timeout_s),
    )
    return device


def init_from_torchrun(backend: str = "auto", timeout_s: float = 60.0, threads_per_rank: int = 1) -> torch.device:
    """Entry for scripts launched by ``torchrun --nproc-per-node P``: reads its RANK/WORLD_SIZE/MASTER_* env."""
    config = DistConfig(
        world_size=int(os.environ["WORLD_SIZE"]),
        backend=backend,
        master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(os.environ["MASTER_PORT"]),
        timeout_s=timeout_s,
        threads_per_rank=threads_per_rank,
    )
    return init_rank(int(os.environ["RANK"]), config, int(os.environ.get("LOCAL_RANK", "0")))


def _worker(rank: int, fn: Callable[..., Any], config: DistConfig, out_dir: str, args: tuple) -> None:
    device = init_rank(rank, config)
    try:
        result = fn(rank, device, *args)
        with replacing(Path(out_dir) / f"rank{rank}.pt") as tmp:
            torch.save(result, tmp)
    except BaseException:
        (Path(out_dir) / f"rank{rank}.err").write_text(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(fn: Callable[..., Any], config: DistConfig, *args: Any, deadline_s: float = 300.0) -> list[Any]:
    """Run ``fn(rank, device, *args)`` on world_size fresh processes in one group; results by rank.

    fn must be importable (module level).  Raises RankFailure when any rank raises or exits,
    or when the whole group runs past deadline_s (then every rank is terminated).
    """
    if config.master_port == 0:
        config = DistConfig(**{**config.__dict__, "master_port": free_port(config.master_addr)})
    with tempfile.TemporaryDirectory(prefix="tripath-dist-") as out_dir:
        context = mp.start_processes(
            _worker, args=(fn, config, out_dir, args), nprocs=config.world_size, join=False, start_method="spawn"
        )
        stop = time.monotonic() + deadline_s
        try:
            while not context.join(timeout=0.2, grace_period=2.0):
                if time.monotonic() > stop:
                    for proc in context.processes:
                        if proc.is_alive():
                            proc.kill()
                    world = config.world_size
                    raise RankFailure(f"process group of {world} ranks missed its {deadline_s:.0f} s deadline")
        except ProcessException as exc:
            errors = sorted(Path(out_dir).glob("rank*.err"))
            detail = errors[0].read_text().strip().splitlines()[-1] if errors else str(exc).strip().splitlines()[0]
            raise RankFailure(f"rank {exc.error_index} failed (pid {exc.error_pid}): {detail}") from exc
        return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(config.world_size)]


def subgroup(size: int) -> dist.ProcessGroup | None:
    """Ranks 0..size-1 of the default group as a group (every rank must call it, in the same order).

    Lets one spawned world test several degrees P without paying process start-up each time.
    Returns None on ranks outside the subgroup.
    """
    group = dist.new_group(ranks=list(range(size)))
    return group if dist.get_rank() < size else None
