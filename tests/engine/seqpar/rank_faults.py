"""Ranks that fail on purpose, for tests/engine/seqpar/test_dist.py: a module of their own that imports only torch,
so each spawned rank starts in seconds on a busy machine (a rank imports the module its function lives in)."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

SILENT_S = 3600.0  # longer than any deadline of the tests: only a timeout or the deadline can end these ranks


def dies(rank: int, device: torch.device) -> None:
    if rank == 1:
        os._exit(3)  # a crash that skips every Python clean-up
    dist.all_reduce(torch.ones(1))


def goes_silent(rank: int, device: torch.device) -> None:
    if rank == 1:
        time.sleep(SILENT_S)
    dist.all_reduce(torch.ones(1))


def stalls(rank: int, device: torch.device) -> None:
    time.sleep(SILENT_S)
