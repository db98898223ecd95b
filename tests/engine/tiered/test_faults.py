"""Fault injection on the SSD tier: each fault fails only its request, clearly; the engine keeps serving."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tripath.engine.kv.dense import greedy_generate
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.reference_engine import TieredEngine
from tripath.engine.tiered.tiers import TierConfig

CFG = PRESETS["tiny-gqa"]
NEW = 6
STOP = 10_000  # never produced: generate exactly NEW tokens


@pytest.fixture(scope="module")
def model(one_torch_thread) -> LlamaModel:
    return LlamaModel(CFG, torch.Generator().manual_seed(1)).eval()


@pytest.fixture(scope="module")
def long_prompt() -> list[int]:
    return torch.randint(0, 256, (300,), generator=torch.Generator().manual_seed(5)).tolist()


@pytest.fixture(scope="module")
def short_prompt() -> list[int]:  # 3 chunks per layer: fits on the device with room to spare
    return torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(6)).tolist()


def engine(model: LlamaModel, tmp_path: Path, **kw: object) -> TieredEngine:
    base = {"chunk_tokens": 16, "device_pages": 30, "host_pages": 6, "ssd_pages": 1000, "ssd_dir": str(tmp_path)}
    return TieredEngine(model, TierConfig(**{**base, **kw}), sink_tokens=4, window_tokens=32)


def assert_serves_short(eng: TieredEngine, model: LlamaModel, short_prompt: list[int]) -> None:
    """After a fault, the next request is answered exactly as the plain cache answers it, and nothing leaks."""
    result = eng.generate(short_prompt, NEW)
    assert result.ok and list(result.output_ids) == greedy_generate(model, short_prompt, NEW, STOP)
    cache = eng.cache
    assert cache.residency() == {"device": 0, "host": 0, "ssd": 0}
    assert cache.tiers.device_pool.num_free == cache.tiers.device_pool.capacity
    assert cache.tiers.host_pool.num_free == cache.tiers.host_pool.capacity and not cache.tiers.ssd.live


def ssd_files(eng: TieredEngine) -> list[Path]:
    directory = eng.cache.tiers.ssd.directory
    assert directory is not None
    return sorted(directory.glob("page-*.kv"))


def test_ssd_quota_full_fails_the_request_that_needs_it(model, long_prompt, short_prompt, tmp_path):
    with engine(model, tmp_path, ssd_pages=2) as eng:
        result = eng.generate(long_prompt, NEW)
        assert not result.ok and result.error.startswith("DiskFull: SSD tier: all 2 pages in use")
        assert_serves_short(eng, model, short_prompt)


def test_enospc_from_the_file_system_is_disk_full(model, long_prompt, short_prompt, tmp_path):
    with engine(model, tmp_path) as eng:
        assert eng.generate(long_prompt, 1).ok  # creates the SSD directory
        directory, first = eng.cache.tiers.ssd.directory, eng.cache.tiers.ssd.next_page_id
        for page_id in range(first, first + 2000):  # the next page files are written into /dev/full: ENOSPC
            os.symlink("/dev/full", directory / f"page-{page_id}.kv")
        result = eng.generate(long_prompt, NEW)
        assert not result.ok and result.error.startswith("DiskFull") and "No space left" in result.error
        for link in directory.glob("page-*.kv"):
            if link.is_symlink():
                link.unlink()
        assert_serves_short(eng, model, short_prompt)
    assert not directory.exists()


@pytest.mark.parametrize("damage", ["missing", "flipped byte", "truncated"])
def test_damaged_page_fails_its_request_and_spares_the_other(model, long_prompt, short_prompt, tmp_path, damage):
    with engine(model, tmp_path, device_pages=34) as eng:
        victim, bystander = eng.add_request(long_prompt, NEW), eng.add_request(short_prompt, NEW)
        eng.step()  # both prefilled; the long one's older pages are on the SSD
        files = ssd_files(eng)
        assert files
        for path in files:
            if damage == "missing":
                path.unlink()
            elif damage == "flipped byte":
                blob = bytearray(path.read_bytes())
                blob[-5] ^= 0x01
                path.write_bytes(bytes(blob))
            else:
                path.write_bytes(path.read_bytes()[:-4])
        results = eng.run()
        expected = "PageMissing" if damage == "missing" else "PageCorrupt"
        assert results[victim].error is not None and results[victim].error.startswith(expected)
        assert results[victim].output_ids == results[victim].output_ids[:1]  # nothing after the damage
        assert results[bystander].ok
        assert list(results[bystander].output_ids) == greedy_generate(model, short_prompt, NEW, STOP)
        assert_serves_short(eng, model, short_prompt)


def test_unwritable_directory_fails_only_requests_that_spill(model, long_prompt, short_prompt, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file where the SSD directory should be")
    with engine(model, tmp_path, ssd_dir=str(blocker / "kv")) as eng:
        result = eng.generate(long_prompt, NEW)
        assert not result.ok and result.error.startswith("TierUnwritable: SSD tier: cannot create a directory")
        assert str(blocker) in result.error
        assert_serves_short(eng, model, short_prompt)


def test_request_larger_than_the_device_pool_fails_alone(model, long_prompt, short_prompt, tmp_path):
    # 300 tokens = 19 chunks per layer must sit on the device together for one layer's attention
    with engine(model, tmp_path, device_pages=12) as eng:
        result = eng.generate(long_prompt, NEW)
        assert not result.ok and result.error.startswith("DeviceFull: device pool: all 12 pages")
        assert_serves_short(eng, model, short_prompt)


def test_pages_read_back_from_disk_after_dropping_the_page_cache(model, long_prompt, tmp_path):
    with engine(model, tmp_path, drop_page_cache=True) as eng:  # fsync + POSIX_FADV_DONTNEED per page
        result = eng.generate(long_prompt, NEW)
        assert result.ok and list(result.output_ids) == greedy_generate(model, long_prompt, NEW, STOP)
        assert eng.cache.tiers.stats.get("ssd->host").pages > 0
