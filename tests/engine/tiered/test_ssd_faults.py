"""The SSD tier under file system faults: each OSError becomes its TierFault naming the file, nothing is left
half-done, and the tier serves again once the fault is gone (the promise: docs/contracts.md, "SSD tier").

Faults are injected through the tier's ``fs`` seam (tests/helpers.py: FaultyFS) on a real directory; a
read-only file system is emulated that way (as root a real read-only mount cannot be made here)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers import FaultyFS
from tripath.engine.tiered import faults
from tripath.engine.tiered.ssd import SSDTier
from tripath.engine.tiered.tier_config import TierConfig, TransferStats

SHAPE = (2, 16, 2, 8)


def page(seed: int) -> torch.Tensor:
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(seed))


def tier(tmp_path: Path, fs: object = os, pages: int = 8, drop_page_cache: bool = False) -> SSDTier:
    config = TierConfig(chunk_tokens=16, ssd_pages=pages, ssd_dir=str(tmp_path), drop_page_cache=drop_page_cache)
    return SSDTier(config, SHAPE, torch.float32, TransferStats(), fs=fs)


def faulty(tmp_path: Path, **kw: object) -> tuple[FaultyFS, SSDTier]:
    """A tier on a FaultyFS (nothing armed yet) over a real directory under tmp_path."""
    fs = FaultyFS()
    return fs, tier(tmp_path, fs, **kw)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def state(ssd: SSDTier) -> tuple:
    """Everything a failed call must leave as it was."""
    return dict(ssd.live), list(ssd._free_ids), ssd.next_page_id, ssd.generation


def assert_serves_then_close(ssd: SSDTier, stored: dict[int, torch.Tensor]) -> None:
    """Pages stored before a fault read back bit for bit, a new page goes in and out again, and close
    removes the directory with every page file."""
    for page_id, expected in stored.items():
        assert same(ssd.read(page_id), expected)
    fresh = page(99)
    assert same(ssd.read(ssd.write(fresh)), fresh)
    directory = ssd.directory
    ssd.close()
    assert directory is not None and not directory.exists()


def test_page_header_v3_holds_slot_generation_size_and_a_checksum_of_all(tmp_path):
    ssd = tier(tmp_path)
    first = ssd.write(page(1))
    blob = ssd.path(first).read_bytes()
    assert SSDTier.HEADER_BYTES == 40 and len(blob) == 40 + 2 * 16 * 2 * 8 * 4
    assert blob[:4] == b"TKV3"
    assert int.from_bytes(blob[8:16], "little") == first
    assert int.from_bytes(blob[16:24], "little") == 1  # the tier's first write
    assert int.from_bytes(blob[24:32], "little") == len(blob) - 40
    ssd.delete(first)
    again = ssd.write(page(2))
    assert again == first and ssd.live == {first: 2}  # the slot is reused, with the next generation
    # a flipped bit in the generation field (the payload untouched) fails the checksum: it covers the header
    blob = bytearray(ssd.path(first).read_bytes())
    blob[16] ^= 0x04
    ssd.path(first).write_bytes(bytes(blob))
    with pytest.raises(faults.PageCorrupt, match="fails its checksum"):
        ssd.read(first)
    ssd.close()


def test_a_stale_page_file_put_back_is_never_served(tmp_path):
    ssd = tier(tmp_path)
    slot = ssd.write(page(1))
    old = ssd.path(slot).read_bytes()
    ssd.delete(slot)
    assert ssd.write(page(2)) == slot
    ssd.path(slot).write_bytes(old)  # an earlier write of the same slot, intact
    stale = rf"page file {ssd.path(slot)} is write 1 of its slot, the live page is write 2"
    with pytest.raises(faults.PageStale, match=stale):
        ssd.read(slot)
    ssd.close()


def test_a_page_file_of_another_slot_is_never_served(tmp_path):
    ssd = tier(tmp_path)
    a, b = ssd.write(page(1)), ssd.write(page(2))
    ssd.path(a).write_bytes(ssd.path(b).read_bytes())  # swapped in: intact, but slot b's
    with pytest.raises(faults.PageCorrupt, match=rf"{ssd.path(a)} holds page {b}, not {a}"):
        ssd.read(a)
    assert same(ssd.read(b), page(2))
    ssd.close()


def test_a_read_of_a_slot_that_holds_no_page_is_missing(tmp_path):
    ssd = tier(tmp_path)
    slot = ssd.write(page(1))
    ssd.delete(slot)
    with pytest.raises(faults.PageMissing, match=f"holds no page {slot}"):
        ssd.read(slot)  # the file is still there, but no live page points at it
    ssd.close()


@pytest.mark.parametrize(("op", "code", "fault", "words"), [
    ("open-write", errno.EROFS, faults.TierUnwritable, "cannot open .* the file system is read-only"),
    ("open-write", errno.EACCES, faults.TierUnwritable, "cannot open .*Permission denied"),
    ("open-write", errno.EMFILE, faults.OutOfFileDescriptors, r"cannot open .* out of file descriptors \(this process"),
    ("open-write", errno.ENFILE, faults.OutOfFileDescriptors, r"cannot open .* out of file descriptors \(the system"),
    ("pwritev", errno.ENOSPC, faults.FileSystemFull, r"cannot write .* the disk is full \(No space left on device\)"),
    ("pwritev", errno.EDQUOT, faults.FileSystemFull, "cannot write .* the disk quota is exhausted"),
    ("pwritev", errno.EIO, faults.TierUnwritable, "cannot write .*Input/output error"),
    ("close", errno.EIO, faults.TierUnwritable, "cannot close .*Input/output error"),
    ("fsync", errno.EIO, faults.TierUnwritable, "cannot sync .*Input/output error"),
    ("posix_fadvise", errno.EINVAL, faults.TierUnwritable, "cannot drop the page cache of .*Invalid argument"),
])
def test_each_write_fault_is_its_type_names_the_file_and_leaves_nothing_behind(tmp_path, op, code, fault, words):
    fs, ssd = faulty(tmp_path, drop_page_cache=True)
    stored = {ssd.write(page(i)): page(i) for i in range(3)}
    ssd.delete(1)
    del stored[1]  # slot 1 is free: the next write reuses its file in place
    before = state(ssd)
    fs.fail(op, code, times=1)
    with pytest.raises(fault, match=words) as caught:
        ssd.write(page(7))
    assert str(ssd.path(1)) in str(caught.value)
    assert fs.raised and state(ssd) == before
    if op != "open-write":  # the torn file was removed; an open that failed wrote nothing
        assert not ssd.path(1).exists()
    assert sorted(p.name for p in ssd.directory.iterdir()) == sorted(
        f"page-{i}.kv" for i in (0, 2) + ((1,) if op == "open-write" else ()))
    assert_serves_then_close(ssd, stored)


def test_a_fault_on_a_new_slot_leaves_its_id_untaken(tmp_path):
    fs, ssd = faulty(tmp_path)
    ssd.write(page(1))
    fs.fail("pwritev", errno.ENOSPC, times=1)
    with pytest.raises(faults.FileSystemFull, match=str(tmp_path)):
        ssd.write(page(2))
    assert ssd.next_page_id == 1 and not ssd._free_ids and sorted(os.listdir(ssd.directory)) == ["page-0.kv"]
    assert ssd.write(page(2)) == 1 and same(ssd.read(1), page(2))
    ssd.close()


def test_the_capacity_in_pages_is_a_disk_full_of_the_tier_not_of_the_file_system(tmp_path):
    ssd = tier(tmp_path, pages=2)
    ssd.write(page(1))
    ssd.write(page(2))
    with pytest.raises(faults.DiskFull, match="all 2 pages in use") as caught:
        ssd.write(page(3))
    assert not isinstance(caught.value, faults.FileSystemFull)
    ssd.close()


def test_a_short_write_continues_and_a_disk_that_fills_up_is_full_not_short(tmp_path):
    fs, ssd = faulty(tmp_path)
    fs.cut_writes(100, times=3)  # the kernel wrote part: the rest follows in further calls
    slot = ssd.write(page(1))
    assert same(ssd.read(slot), page(1))

    calls = []

    class FillingUp(FaultyFS):
        def pwritev(self, fd: int, buffers: list, offset: int) -> int:
            calls.append(offset)
            if len(calls) == 1:
                return os.pwrite(fd, bytes(buffers[0])[:24], offset)  # the disk takes 24 bytes, then is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    ssd.fs = FillingUp()
    with pytest.raises(faults.FileSystemFull, match=r"cannot write .*page-1\.kv: the disk is full"):
        ssd.write(page(2))
    assert calls == [0, 24]  # the rest was attempted where the short write stopped
    assert not ssd.path(1).exists() and set(ssd.live) == {slot}
    ssd.fs = fs
    fs.heal()
    assert_serves_then_close(ssd, {slot: page(1)})


def test_a_write_that_makes_no_progress_is_unwritable(tmp_path):
    fs, ssd = faulty(tmp_path)
    fs.cut_writes(0, times=2)
    with pytest.raises(faults.TierUnwritable, match="short write: 0 of 2088 bytes, then no progress"):
        ssd.write(page(1))
    assert not ssd.live and not os.listdir(ssd.directory)
    assert_serves_then_close(ssd, {})


@pytest.mark.parametrize(("op", "code", "fault", "words"), [
    ("preadv", errno.EIO, faults.PageUnreadable, "cannot read .*Input/output error"),
    ("open-read", errno.EACCES, faults.PageUnreadable, "cannot open .*Permission denied"),
    ("open-read", errno.EMFILE, faults.OutOfFileDescriptors, "cannot open .* out of file descriptors"),
    ("close", errno.EIO, faults.PageUnreadable, "cannot close .*Input/output error"),
])
def test_each_read_fault_is_its_type_and_names_the_file(tmp_path, op, code, fault, words):
    fs, ssd = faulty(tmp_path)
    stored = {ssd.write(page(i)): page(i) for i in range(2)}
    before = state(ssd)
    fs.fail(op, code, when=lambda name: name == "page-1.kv", times=1)
    with pytest.raises(fault, match=words) as caught:
        ssd.read(1)
    assert str(ssd.path(1)) in str(caught.value) and state(ssd) == before
    assert not fs.names or set(fs.names.values()) == {ssd.directory.as_posix()}  # no page fd left open
    assert_serves_then_close(ssd, stored)


def test_a_read_only_file_system_fails_writes_serves_reads_and_recovers(tmp_path):
    fs, ssd = faulty(tmp_path)
    stored = {ssd.write(page(i)): page(i) for i in range(3)}
    ssd.delete(2)
    del stored[2]
    before = state(ssd)
    fs.read_only()
    for _ in range(2):  # the free slot's file, then the same again: no state drifts between attempts
        with pytest.raises(faults.TierUnwritable, match=r"cannot open .*page-2\.kv: the file system is read-only"):
            ssd.write(page(5))
        assert state(ssd) == before
    for page_id, expected in stored.items():
        assert same(ssd.read(page_id), expected)  # reading still works on a read-only mount
    fs.heal()
    assert_serves_then_close(ssd, stored)


def test_unlink_failing_in_the_cleanup_of_a_torn_write_reports_the_write_fault(tmp_path):
    fs, ssd = faulty(tmp_path)
    ssd.write(page(1))
    fs.fail("pwritev", errno.EIO, times=1)
    fs.fail("unlink", errno.EROFS)
    with pytest.raises(faults.TierUnwritable, match=r"cannot write .*page-1\.kv: Input/output error"):
        ssd.write(page(2))
    assert fs.raised[-1][0] == "unlink" and ssd.path(1).exists()  # the torn file stays ...
    assert set(ssd.live) == {0} and ssd.next_page_id == 1
    fs.heal()
    assert ssd.write(page(2)) == 1 and same(ssd.read(1), page(2))  # ... and is overwritten by the slot's next page
    ssd.close()


def test_a_deleted_directory_loses_its_pages_and_is_recreated_by_the_next_write(tmp_path):
    ssd = tier(tmp_path)
    kept = ssd.write(page(1))
    directory = ssd.directory
    shutil.rmtree(directory)
    with pytest.raises(faults.PageMissing, match=rf"cannot open {directory / 'page-0.kv'}: No such file"):
        ssd.read(kept)
    fresh = ssd.write(page(2))
    assert ssd.directory == directory and directory.is_dir() and fresh != kept
    assert same(ssd.read(fresh), page(2))
    with pytest.raises(faults.PageMissing):
        ssd.read(kept)  # still gone: the new directory does not bring it back
    ssd.delete(kept)
    ssd.close()
    assert not directory.exists()


def test_a_directory_that_cannot_be_recreated_is_unwritable_until_it_can(tmp_path):
    fs, ssd = faulty(tmp_path)
    kept = ssd.write(page(1))
    directory = ssd.directory
    shutil.rmtree(directory)
    fs.fail("makedirs", errno.EACCES)  # the parent no longer lets the tier create it
    with pytest.raises(faults.TierUnwritable, match=rf"cannot recreate the directory {directory}: Permission denied"):
        ssd.write(page(2))
    with pytest.raises(faults.PageMissing, match=rf"cannot read {directory / 'page-0.kv'}: its directory was deleted"):
        ssd.read(kept)
    fs.heal()
    assert same(ssd.read(ssd.write(page(3))), page(3)) and directory.is_dir()
    ssd.close()


@pytest.mark.parametrize(("op", "code", "fault"), [
    ("makedirs", errno.EROFS, faults.TierUnwritable),
    ("mkdir", errno.ENOSPC, faults.FileSystemFull),
    ("open-read", errno.EMFILE, faults.OutOfFileDescriptors),  # the directory's own fd
])
def test_the_first_directory_failing_is_its_fault_and_is_retried(tmp_path, op, code, fault):
    fs = FaultyFS()
    parent = tmp_path / "kv-parent"
    ssd = tier(parent, fs)
    fs.fail(op, code, times=1)
    with pytest.raises(fault, match=f"cannot create a directory under {parent}"):
        ssd.write(page(1))
    assert not ssd.live and ssd.next_page_id == 0
    assert_serves_then_close(ssd, {})
    assert list(parent.iterdir()) == []


def test_close_never_raises_and_names_a_directory_it_cannot_remove(tmp_path):
    fs, ssd = faulty(tmp_path)
    ssd.write(page(1))
    directory = ssd.directory
    fs.read_only()
    with pytest.warns(RuntimeWarning, match=rf"TierUnwritable: SSD tier: cannot remove {directory}/page-0.kv: "
                                            "the file system is read-only"):
        ssd.close()
    assert not ssd.live and ssd.directory is None and not fs.names  # every fd closed, every page forgotten
    fs.heal()
    shutil.rmtree(directory)
    ssd.close()  # a second close is a no-op


def test_no_raw_oserror_escapes_any_operation(tmp_path):
    """Whichever call fails with whatever errno, the tier raises a faults.TierFault (or succeeds) and keeps working."""
    codes = (errno.EIO, errno.EROFS, errno.ENOSPC, errno.EACCES, errno.EMFILE, errno.ENOENT, errno.EBADF)
    for op in ("open-read", "open-write", "close", "pwritev", "preadv", "fsync", "posix_fadvise", "unlink",
               "mkdir", "makedirs"):
        for code in codes:
            fs = FaultyFS()
            ssd = tier(tmp_path / f"{op}-{code}", fs, drop_page_cache=True)
            stored: dict[int, torch.Tensor] = {}
            fs.fail(op, code, times=1)
            for i in range(3):
                try:
                    stored[ssd.write(page(i))] = page(i)
                except faults.TierFault:
                    pass
                try:
                    for page_id, expected in stored.items():
                        assert same(ssd.read(page_id), expected)
                except faults.TierFault:
                    pass
            fs.heal()
            for page_id in list(stored):
                try:
                    assert same(ssd.read(page_id), stored[page_id])
                except faults.PageMissing:  # ENOENT on a page's open: reported as missing, the page is dropped
                    ssd.delete(page_id)
                    del stored[page_id]
            assert_serves_then_close(ssd, stored)
