"""Where the shipped data lives: data/ at the repository root (the project installs editable)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "data"
PROFILES_DIR = DATA_DIR / "profiles"
SCENARIOS_DIR = DATA_DIR / "scenarios"
TRACES_DIR = DATA_DIR / "traces"
MODELS_DIR = DATA_DIR / "models"


def user_dir() -> Path:
    """The user's own tripath folder ($XDG_CACHE_HOME/tripath, else ~/.cache/tripath): reports of partial
    runs and saved tracebacks go here, never into the shipped data/."""
    import os

    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tripath"
