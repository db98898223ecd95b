"""Fixtures shared by test modules (plain helpers and constants live in tests/helpers.py; time bounds that scale
with the machine in tests/timing.py).

Hypothesis runs without its per-example deadline (200 ms by default): a timing bound that fails on a busy
machine and says nothing about the property; the tests that use it set max_examples themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from tests.timing import slack_factor

if TYPE_CHECKING:
    from tripath.engine.model.model import LlamaModel

settings.register_profile("tripath", deadline=None)
settings.load_profile("tripath")


def pytest_report_header() -> str:
    return f"tripath: hang guards scaled x{slack_factor():.1f} (tests/timing.py; TRIPATH_TEST_SLACK overrides)"


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
