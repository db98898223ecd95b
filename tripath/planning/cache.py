"""Sweep results cached on disk, keyed by what determines them.

The key is a sha256 over the canonical scenario dict, the profile's canonical JSON, the seed,
the replications, the job's options and the code version (a hash of the simulator's, planning's,
profile's and core's source files, subpackages included, so an edited simulator never serves stale
numbers). Entries are JSON files written through a temp file and os.replace: a killed sweep leaves
whole entries or none.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tripath.core.atomic import write_text
from tripath.core.errors import check_regular_file

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE_DIR = Path(".tripath-cache")


# the packages a sweep's numbers depend on: the simulator, planning, and the profile and core code they run
CODE_FOLDERS = ("core", "planning", "profile", "simulator")


def source_digest(root: Path, folders: tuple[str, ...] = CODE_FOLDERS) -> str:
    """sha256 of every .py file under ``root``/folder, subpackages included (relative path and bytes, sorted)."""
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """The source digest of this tripath's simulator, planning, profile and core packages."""
    return source_digest(PACKAGE_ROOT)


def cache_key(parts: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``parts`` plus the code version."""
    text = json.dumps({**parts, "code_version": code_version()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class ResultCache:
    """JSON results in ``directory/<key[:2]>/<key>.json``."""

    def __init__(self, directory: str | os.PathLike[str] = DEFAULT_CACHE_DIR) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        check_regular_file(self._path(key), "--cache-dir")
        try:
            with open(self._path(key), encoding="utf-8") as fh:
                return json.load(fh)
        except (FileNotFoundError, json.JSONDecodeError):  # absent, or a foreign partial file: recompute
            return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(value, sort_keys=True, allow_nan=False)
        write_text(path, text)
