"""Atomic writes: the target is the old file or the whole new one, and no temp file is left."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest

from tests.full_disk import full_disk, needs_dev_full
from tripath.core import atomic
from tripath.core.atomic import AtomicFile, commit_all, replacing, replacing_dir, write_bytes, write_text
from tripath.core.errors import InputError, describe_os_error


class Boom(Exception):
    pass


def test_write_text_and_bytes_round_trip_without_newline_translation(tmp_path: Path) -> None:
    write_text(tmp_path / "a.txt", "x\r\ny\n")
    write_bytes(tmp_path / "b.bin", b"\x00\xff")
    assert (tmp_path / "a.txt").read_bytes() == b"x\r\ny\n"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.bin"]


def test_a_new_file_is_0644_and_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    write_text(tmp_path / "new.txt", "a")
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o644
    old = tmp_path / "old.txt"
    old.write_text("a")
    old.chmod(0o600)
    write_text(old, "b")
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    assert old.read_text() == "b"


def test_an_exception_mid_write_keeps_the_old_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "t.csv"
    target.write_text("old\n")
    with pytest.raises(Boom), AtomicFile(target) as handle:
        handle.write("half of the new")
        raise Boom
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["t.csv"]


def test_an_exception_mid_write_leaves_no_file_when_there_was_none(tmp_path: Path) -> None:
    with pytest.raises(Boom), AtomicFile(tmp_path / "t.csv") as handle:
        handle.write("half")
        raise Boom
    assert os.listdir(tmp_path) == []


def test_a_failed_rename_removes_the_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.json"
    target.write_text("old")

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        write_text(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["t.json"]


def test_the_file_is_fsynced_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    write_text(tmp_path / "a", "x")
    with replacing(tmp_path / "b") as tmp:
        tmp.write_text("y")
    assert events == ["fsync", "replace", "fsync", "replace"]


def test_discard_and_commit_for_a_long_lived_writer(tmp_path: Path) -> None:
    kept, dropped = AtomicFile(tmp_path / "kept.csv"), AtomicFile(tmp_path / "dropped.csv")
    kept.handle.write("a\n")
    dropped.handle.write("b\n")
    assert not (tmp_path / "kept.csv").exists()  # nothing visible before commit
    kept.commit()
    dropped.discard()
    assert os.listdir(tmp_path) == ["kept.csv"]
    assert (tmp_path / "kept.csv").read_text() == "a\n"


def test_replacing_gives_a_path_with_the_suffix_and_cleans_up_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "fig.png"
    with replacing(target, suffix=".tmp.png") as tmp:
        assert tmp.parent == tmp_path and tmp.name.endswith(".tmp.png")
        tmp.write_bytes(b"png")
    assert target.read_bytes() == b"png"
    with pytest.raises(Boom), replacing(target) as tmp:
        tmp.write_bytes(b"half")
        raise Boom
    assert target.read_bytes() == b"png"
    assert os.listdir(tmp_path) == ["fig.png"]


def test_replacing_dir_swaps_a_whole_folder_or_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "report"
    with replacing_dir(dest) as tmp:
        (tmp / "a.json").write_text("1")
    assert os.listdir(dest) == ["a.json"]
    with pytest.raises(Boom), replacing_dir(dest) as tmp:
        (tmp / "b.json").write_text("half")
        raise Boom
    assert os.listdir(dest) == ["a.json"]
    with replacing_dir(dest) as tmp:
        (tmp / "c.json").write_text("2")
    assert os.listdir(dest) == ["c.json"]
    assert os.listdir(tmp_path) == ["report"]  # neither the temp folder nor the old one is left


def test_a_missing_folder_raises_an_error_naming_the_target(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "out.json"
    with pytest.raises(FileNotFoundError) as info:
        write_text(target, "x")
    assert info.value.filename == str(target)
    assert str(target.parent) in str(info.value)


def test_a_read_only_folder_raises_permission_error_naming_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root ignores the mode: make the folder refuse the temp file instead
            def refuse(*args: object, **kwargs: object) -> tuple[int, str]:
                raise PermissionError(13, "Permission denied", str(folder / ".out.json.x.tmp"))

            monkeypatch.setattr(atomic.tempfile, "mkstemp", refuse)
        with pytest.raises(PermissionError) as info:
            write_text(folder / "out.json", "x")
    finally:
        folder.chmod(0o755)
    assert info.value.filename == str(folder / "out.json")
    assert f"Permission denied (cannot create a file in {folder})" in str(info.value)
    assert os.listdir(folder) == []


# --- a full disk: the temp file goes even when closing it fails again; the error names the target ---------------

@needs_dev_full
@pytest.mark.parametrize("size", [10, 1 << 20], ids=["flush-at-commit", "flush-while-writing"])
def test_a_full_disk_leaves_no_temp_file_and_names_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               size: int) -> None:
    target = tmp_path / "t.csv"
    target.write_text("old\n")
    full_disk(monkeypatch)
    with pytest.raises(OSError) as info:
        write_text(target, "x" * size)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert describe_os_error(info.value) == f"{target}: the disk is full"
    assert os.listdir(tmp_path) == ["t.csv"] and target.read_text() == "old\n"


@needs_dev_full
def test_discard_removes_the_temp_file_when_close_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full_disk(monkeypatch)
    file = AtomicFile(tmp_path / "t.csv")
    file.handle.write("unflushed")
    assert os.listdir(tmp_path) == [Path(file.tmp).name]
    file.discard()  # its close flushes into the full disk and fails: dropped, the file removed all the same
    assert os.listdir(tmp_path) == [] and file.handle.closed


@needs_dev_full
def test_a_full_disk_inside_a_folder_names_the_file_in_the_target(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    full_disk(monkeypatch, only=lambda name: name == "b.csv")
    dest = tmp_path / "report"
    with pytest.raises(OSError) as info, replacing_dir(dest) as tmp:
        write_text(tmp / "a.csv", "a")
        write_text(tmp / "b.csv", "b")
    assert info.value.filename == str(dest / "b.csv")
    assert os.listdir(tmp_path) == []


def test_replacing_names_the_target_for_an_error_about_its_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "w.safetensors"
    with pytest.raises(OSError) as info, replacing(target) as tmp:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
    assert info.value.filename == str(target) and info.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []


# --- commit_all: a set of files, all new or all old --------------------------------------------------------------

def _pair(tmp_path: Path) -> list[AtomicFile]:
    files = [AtomicFile(tmp_path / "records.csv"), AtomicFile(tmp_path / "steps.csv")]
    for file in files:
        file.handle.write(f"new {file.path.name}\n")
    return files


@needs_dev_full
def test_commit_all_installs_none_when_one_cannot_be_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "records.csv").write_text("old records\n")
    full_disk(monkeypatch, only=lambda name: name == "steps.csv")
    with pytest.raises(OSError) as info:
        commit_all(_pair(tmp_path))
    assert info.value.filename == str(tmp_path / "steps.csv") and info.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == ["records.csv"] and (tmp_path / "records.csv").read_text() == "old records\n"


@pytest.mark.parametrize("old", [True, False], ids=["old-files", "no-files"])
def test_commit_all_puts_back_what_it_replaced_when_a_rename_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   old: bool) -> None:
    if old:
        for name in ("records.csv", "steps.csv"):
            (tmp_path / name).write_text(f"old {name}\n")
    before = {p.name: p.read_text() for p in tmp_path.iterdir()}
    real = os.replace

    def failing(src: str, dst: str) -> None:
        if Path(dst).name == "steps.csv" and Path(src).name.startswith(".steps.csv."):
            raise OSError(errno.EIO, os.strerror(errno.EIO), src, dst)
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", failing)
    with pytest.raises(OSError) as info:
        commit_all(_pair(tmp_path))
    assert info.value.errno == errno.EIO
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == before  # records.csv back as it was


def test_commit_all_installs_the_set(tmp_path: Path) -> None:
    (tmp_path / "records.csv").write_text("old\n")
    commit_all(_pair(tmp_path))
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"records.csv": "new records.csv\n",
                                                                  "steps.csv": "new steps.csv\n"}


# --- two writers of one folder -----------------------------------------------------------------------------------

@pytest.mark.parametrize("replace", [False, True])
def test_a_folder_written_meanwhile_is_refused_unless_replace(tmp_path: Path, replace: bool) -> None:
    dest = tmp_path / "out"
    writer = atomic.writing_dir(dest, replace)
    first = writer.__enter__()  # the slower command: checked (absent) and writing
    (first / "a.txt").write_text("first")
    with atomic.writing_dir(dest) as second:  # another command to the same folder, done sooner
        (second / "b.txt").write_text("second")
    if replace:
        writer.__exit__(None, None, None)
        assert os.listdir(dest) == ["a.txt"]  # replaced whole, never a mix
    else:
        with pytest.raises(InputError, match="not empty; pass --replace"):
            writer.__exit__(None, None, None)
        assert os.listdir(dest) == ["b.txt"]  # the earlier set, whole
    assert os.listdir(tmp_path) == ["out"]  # no temp folder, old folder or lock file left


def test_the_install_lock_makes_a_second_installer_wait(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    entered = threading.Event()

    def second() -> None:
        with atomic._install_lock(dest):
            entered.set()

    with atomic._install_lock(dest):
        assert os.listdir(tmp_path) == [".out.lock"]
        thread = threading.Thread(target=second)
        thread.start()
        assert not entered.wait(0.3)  # held here: the other waits
    thread.join(timeout=10)
    assert entered.is_set() and not thread.is_alive()
    assert os.listdir(tmp_path) == []


def test_writing_dir_removes_the_parents_it_created_on_failure(tmp_path: Path) -> None:
    with pytest.raises(Boom), atomic.writing_dir(tmp_path / "a" / "b" / "out") as tmp:
        (tmp / "x").write_text("half")
        raise Boom
    assert os.listdir(tmp_path) == []


def test_check_file_target_refuses_folders_links_and_unwritable_places(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("f")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    for name, replace, words in (("dir", None, "is a folder"), ("link", None, "symbolic link"),
                                 ("file", False, "pass --replace"), ("file/x", None, "is not a folder")):
        with pytest.raises(InputError, match=words) as info:
            atomic.check_file_target(tmp_path / name, "--out", replace)
        assert str(info.value).startswith(f"{tmp_path / name}: --out: ")
    assert atomic.check_file_target(tmp_path / "file", "--out") == tmp_path / "file"  # overwriting allowed
    assert atomic.check_file_target(tmp_path / "new" / "p.json", "--out", False) == tmp_path / "new" / "p.json"


def test_an_unknown_encoding_leaves_no_temp_file(tmp_path: Path) -> None:
    with pytest.raises(LookupError):
        AtomicFile(tmp_path / "t.txt", encoding="no-such-codec")
    assert os.listdir(tmp_path) == []
