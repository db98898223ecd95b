"""Fixtures shared by test modules (plain helpers and constants live in tests/helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread for a module's tests, restored after: tiny models gain nothing from more threads,
    and on a shared CPU OpenMP spin-waits and oversubscribed cores cost several times the time."""
    import torch  # only the modules that ask for it pay for importing torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
