"""Fixtures shared by test modules (plain helpers and constants live in tests/helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tripath.engine.model.model import LlamaModel


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread for a module's tests, restored after: tiny models gain nothing from more threads,
    and on a shared CPU OpenMP spin-waits and oversubscribed cores cost several times the time."""
    import torch  # only the modules that ask for it pay for importing torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_target() -> LlamaModel:
    """The random-weight target of the engine tests: PRESETS["tiny-gqa"], seed 1; a fresh one per module
    (Engine fuses a model's projections in place)."""
    import torch

    from tripath.engine.model.config import PRESETS
    from tripath.engine.model.model import LlamaModel

    return LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()


@pytest.fixture(scope="module")
def tiny_draft() -> LlamaModel:
    """The random-weight draft beside tiny_target: PRESETS["tiny-mha"], seed 2 (unrelated: low acceptance)."""
    import torch

    from tripath.engine.model.config import PRESETS
    from tripath.engine.model.model import LlamaModel

    return LlamaModel(PRESETS["tiny-mha"], torch.Generator().manual_seed(2)).eval()
