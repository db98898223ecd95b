"""Fault injection on the SSD tier: each fault fails only its request, clearly; the engine keeps serving.

Requests the tiers can never hold are refused up front (RequestRejected names the limit); faults the
admission cannot foresee (the file system's, damaged pages) end their request in the step they strike."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers import FaultyFS, dense_greedy
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig, RequestRejected
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.tier_config import TierConfig

CFG = PRESETS["tiny-gqa"]
NEW = 6


@pytest.fixture(scope="module")
def model(one_torch_thread) -> LlamaModel:
    return LlamaModel(CFG, torch.Generator().manual_seed(1)).eval()


@pytest.fixture(scope="module")
def long_prompt() -> list[int]:
    return torch.randint(0, 256, (300,), generator=torch.Generator().manual_seed(5)).tolist()


@pytest.fixture(scope="module")
def short_prompt() -> list[int]:  # 3 chunks per layer: fits on the device with room to spare
    return torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(6)).tolist()


def engine(model: LlamaModel, tmp_path: Path, **kw: object) -> Engine:
    base = {"chunk_tokens": 16, "device_pages": 30, "host_pages": 6, "ssd_pages": 1000, "ssd_dir": str(tmp_path),
            "sink_tokens": 4, "window_tokens": 32}
    tiers = TierConfig(**{**base, **kw})
    return Engine(model, EngineConfig(block_size=16, num_blocks=1, fuse_projections=False, tiered=tiers))


def serve(eng: Engine, prompt: list[int], new: int) -> tuple[list[int], str | None]:
    """One request to the end: its output and the tier fault that ended it (None: it finished)."""
    rid = eng.add_request(prompt, new)
    while eng.has_unfinished:
        eng.step()
    return eng.output(rid), eng.errors.get(rid)


def assert_serves_short(eng: Engine, model: LlamaModel, short_prompt: list[int]) -> None:
    """After a fault, the next request is answered exactly as the plain cache answers it, and nothing leaks."""
    output, error = serve(eng, short_prompt, NEW)
    assert error is None and output == dense_greedy(model, short_prompt, NEW)
    cache = eng.backend.cache
    assert cache.residency() == {"device": 0, "host": 0, "ssd": 0}
    assert cache.tiers.device_pool.num_free == cache.tiers.device_pool.capacity
    assert cache.tiers.host_pool.num_free == cache.tiers.host_pool.capacity and not cache.tiers.ssd.live


def ssd_files(eng: Engine) -> list[Path]:
    directory = eng.backend.cache.tiers.ssd.directory
    assert directory is not None
    return sorted(directory.glob("page-*.kv"))


def test_ssd_quota_too_small_refuses_the_request_that_needs_it(model, long_prompt, short_prompt, tmp_path):
    with engine(model, tmp_path, ssd_pages=2) as eng:
        with pytest.raises(RequestRejected, match=r"needs 40 KV pages of 16 tokens, the tiers hold 36"):
            eng.add_request(long_prompt, NEW)
        assert_serves_short(eng, model, short_prompt)


def test_enospc_from_the_file_system_is_a_full_disk(model, long_prompt, short_prompt, tmp_path):
    with engine(model, tmp_path) as eng:
        assert serve(eng, long_prompt, 1)[1] is None  # creates the SSD directory
        ssd = eng.backend.cache.tiers.ssd
        directory, first = ssd.directory, ssd.next_page_id
        for page_id in range(first, first + 2000):  # the next page files are written into /dev/full: ENOSPC
            os.symlink("/dev/full", directory / f"page-{page_id}.kv")
        _, error = serve(eng, long_prompt, NEW)
        assert error is not None and error.startswith("FileSystemFull: SSD tier: cannot write ")
        assert str(directory) in error and "the disk is full (No space left on device)" in error
        for link in directory.glob("page-*.kv"):
            if link.is_symlink():
                link.unlink()
        assert_serves_short(eng, model, short_prompt)
    assert not directory.exists()


@pytest.mark.parametrize("damage", ["missing", "flipped byte", "truncated"])
def test_damaged_page_fails_its_request_and_spares_the_other(model, long_prompt, short_prompt, tmp_path, damage):
    with engine(model, tmp_path, device_pages=34) as eng:
        victim, bystander = eng.add_request(long_prompt, NEW), eng.add_request(short_prompt, NEW)
        eng.step()  # both prefilled together; the long one's older pages are on the SSD
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
        while eng.has_unfinished:
            eng.step()
        expected = "PageMissing" if damage == "missing" else "PageCorrupt"
        assert eng.errors[victim].startswith(expected)
        assert len(eng.output(victim)) == 1  # nothing after the damage
        assert bystander not in eng.errors
        assert eng.output(bystander) == dense_greedy(model, short_prompt, NEW)
        assert_serves_short(eng, model, short_prompt)


def test_unwritable_directory_fails_only_requests_that_spill(model, long_prompt, short_prompt, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file where the SSD directory should be")
    with engine(model, tmp_path, ssd_dir=str(blocker / "kv")) as eng:
        _, error = serve(eng, long_prompt, NEW)
        assert error is not None and error.startswith("TierUnwritable: SSD tier: cannot create a directory")
        assert str(blocker) in error
        assert_serves_short(eng, model, short_prompt)


def test_request_larger_than_the_device_pool_is_refused_alone(model, long_prompt, short_prompt, tmp_path):
    # 300 tokens = 19 chunks per layer must sit on the device together for one layer's attention
    with engine(model, tmp_path, device_pages=12) as eng:
        with pytest.raises(RequestRejected, match=r"device pages .* the device pool holds 12"):
            eng.add_request(long_prompt, NEW)
        assert_serves_short(eng, model, short_prompt)


def test_pages_read_back_from_disk_after_dropping_the_page_cache(model, long_prompt, tmp_path):
    with engine(model, tmp_path, drop_page_cache=True) as eng:  # fsync + POSIX_FADV_DONTNEED per page
        output, error = serve(eng, long_prompt, NEW)
        assert error is None and output == dense_greedy(model, long_prompt, NEW)
        assert eng.backend.cache.tiers.stats.get("ssd->host").pages > 0


def _arm_read_only(eng: Engine, fs: FaultyFS) -> None:
    fs.read_only()


def _arm_full_disk(eng: Engine, fs: FaultyFS) -> None:
    fs.fail("pwritev", errno.ENOSPC)


def _arm_out_of_fds(eng: Engine, fs: FaultyFS) -> None:
    fs.fail("open-write", errno.EMFILE)


def _arm_read_error(eng: Engine, fs: FaultyFS) -> None:
    names = {path.name for path in ssd_files(eng)}
    fs.fail("preadv", errno.EIO, when=lambda name: name in names)  # the pages on the SSD now: the victim's


def _arm_deleted_directory(eng: Engine, fs: FaultyFS) -> None:
    shutil.rmtree(eng.backend.cache.tiers.ssd.directory)


FS_FAULTS = {  # how the fault is made after the first step -> what ends the victim
    "read-only": (_arm_read_only, "TierUnwritable: SSD tier: cannot open ", "the file system is read-only"),
    "disk full": (_arm_full_disk, "FileSystemFull: SSD tier: cannot write ", "the disk is full"),
    "out of fds": (_arm_out_of_fds, "OutOfFileDescriptors: SSD tier: cannot open ", "out of file descriptors"),
    "read error": (_arm_read_error, "PageUnreadable: SSD tier: cannot read ", "Input/output error"),
    "deleted directory": (_arm_deleted_directory, "PageMissing: SSD tier: cannot open ", "No such file"),
}


@pytest.mark.parametrize("fault", list(FS_FAULTS))
def test_a_file_system_fault_ends_only_the_request_on_the_ssd_and_the_engine_recovers(
        model, long_prompt, short_prompt, tmp_path, fault):
    arm, prefix, words = FS_FAULTS[fault]
    fs = FaultyFS()
    with engine(model, tmp_path, device_pages=34) as eng:
        ssd = eng.backend.cache.tiers.ssd
        ssd.fs = fs
        victim, bystander = eng.add_request(long_prompt, NEW), eng.add_request(short_prompt, NEW)
        eng.step()  # both prefilled together; the long one's older pages are on the SSD
        assert ssd_files(eng) and {key[0] for key, s in eng.backend.cache.pages.items() if s.tier == "ssd"} == {victim}
        arm(eng, fs)
        while eng.has_unfinished:
            eng.step()
        assert set(eng.errors) == {victim}
        assert eng.errors[victim].startswith(prefix) and words in eng.errors[victim]
        assert str(ssd.directory) in eng.errors[victim]  # the message names the file
        assert len(eng.output(victim)) < NEW
        assert eng.output(bystander) == dense_greedy(model, short_prompt, NEW)  # token for token
        assert_serves_short(eng, model, short_prompt)
        fs.heal()
        read_before = ssd.stats.get("ssd->host").pages
        output, error = serve(eng, long_prompt, NEW)  # needs the SSD again: served exactly once the fault is gone
        assert error is None and output == dense_greedy(model, long_prompt, NEW)
        assert ssd.stats.get("ssd->host").pages > read_before and ssd.directory.is_dir()


def test_a_stale_page_file_put_back_ends_its_request_never_serves_it(model, long_prompt, short_prompt, tmp_path):
    with engine(model, tmp_path, device_pages=34) as eng:
        victim, bystander = eng.add_request(long_prompt, NEW), eng.add_request(short_prompt, NEW)
        eng.step()
        # the earlier writes: a freed slot's file may be empty at this moment (which slots are free depends on the
        # prefetch thread's timing), and an empty file put back is a truncated page, not a stale one
        earlier = {path: blob for path in ssd_files(eng) if (blob := path.read_bytes())}
        eng.step()  # every off-device page is read back and written out again: slots get new generations
        for path, blob in earlier.items():
            path.write_bytes(blob)  # the earlier writes, intact (their checksums match)
        while eng.has_unfinished:
            eng.step()
        assert set(eng.errors) == {victim} and eng.errors[victim].startswith("PageStale: SSD tier: page file ")
        assert eng.output(bystander) == dense_greedy(model, short_prompt, NEW)
        output, error = serve(eng, long_prompt, NEW)
        assert error is None and output == dense_greedy(model, long_prompt, NEW)


class _Interrupted(Exception):
    """Not an OSError: stands for any exception that ends a step half-way (a bug, an interrupt)."""


def test_an_exception_that_ends_a_step_half_way_does_not_break_the_engine(model, long_prompt, short_prompt,
                                                                           tmp_path):
    with engine(model, tmp_path, device_pages=34) as eng:
        ssd = eng.backend.cache.tiers.ssd
        fs = ssd.fs = FaultyFS()
        victim = eng.add_request(long_prompt, NEW)
        eng.step()

        def interrupt(name: str) -> bool:
            raise _Interrupted(f"writing {name}")

        fs.fail("pwritev", errno.EIO, when=interrupt, times=1)
        with pytest.raises(_Interrupted):
            eng.step()  # layer 0 stored the step's new K/V, layer 1 did not: the cache is ahead of the engine
        fs.heal()
        while eng.has_unfinished:
            eng.step()
        assert eng.errors[victim] == (f"TierFault: request {victim}: the tiered cache holds {len(long_prompt) + 1} "
                                      f"tokens of layer 0, the engine computed {len(long_prompt)} (an earlier step "
                                      "ended by an error)")
        assert_serves_short(eng, model, short_prompt)  # no tensor-size error in any later step
        output, error = serve(eng, long_prompt, NEW)
        assert error is None and output == dense_greedy(model, long_prompt, NEW)
