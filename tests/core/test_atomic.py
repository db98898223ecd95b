"""Atomic writes: the target is the old file or the whole new one, and no temp file is left."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tripath.core import atomic
from tripath.core.atomic import AtomicFile, replacing, replacing_dir, write_bytes, write_text


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
