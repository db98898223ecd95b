"""The commands whose packages are extras (`make run` installs only pip install -e .): each says in one line how
to install what it misses and exits 2. The test extra installs every extra, so here they are hidden."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from importlib import metadata

from tests.cli.inprocess import assert_clean_exit, run_cli
from tests.timing import slack
from tripath.core.data_dirs import REPO_ROOT


def test_app_without_streamlit_says_how_to_install_it(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else real(name, *a))
    code, out, err = run_cli(["app", "--port", "1"])
    assert code == 2 and out == ""
    assert_clean_exit(code, err, "tripath app")
    assert "pip install -e '.[app]'" in err


def test_ray_executor_without_ray_says_how_to_install_it(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code, out, err = run_cli(["plan", "quickstart", "--qps", "0.5", "--candidates", "baseline", "--executor", "ray",
                              "--cache-dir", str(tmp_path)])
    assert code == 2 and out == ""
    assert_clean_exit(code, err, "--executor ray")
    assert "pip install -e '.[ray]'" in err
    assert not any(tmp_path.iterdir())  # nothing simulated nor cached


def test_profile_build_without_aiconfigurator_says_how_to_install_it(monkeypatch, tmp_path) -> None:
    real = metadata.version

    def version(name: str) -> str:
        if name == "aiconfigurator-core":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    out_path = tmp_path / "p.json"
    code, out, err = run_cli(["profile", "build", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4",
                              "--out", str(out_path)])
    assert code == 2 and out == ""
    assert_clean_exit(code, err, "aiconfigurator-core")
    assert "pip install -e '.[aic]'" in err
    assert not out_path.exists()


def test_the_test_extra_installs_every_extra() -> None:
    """What `make test` installs covers the commands above for real (tests/app, tests/planning, tests/calibrate/aic)."""
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    others = sorted(set(extras) - {"test"})
    assert others == ["aic", "app", "ray"]
    assert f"tripath[{','.join(others)}]" in extras["test"]
    for module in ("streamlit", "ray", "aiconfigurator_core"):
        assert importlib.util.find_spec(module) is not None, f"{module}: run make test (pip install -e '.[test]')"


def test_recommend_needs_only_the_run_install() -> None:
    """`make run` (tripath recommend) loads none of the extras, nor torch or matplotlib: its modules import
    numpy, scipy, simpy and tqdm only (a full run of the default scenario was checked the same way)."""
    code = ("import sys; import tripath.cli.main, tripath.cli.planning_cli, tripath.planning.recommend, "
            "tripath.planning.export.files, tripath.planning.executor, tripath.planning.cache; "
            "print(' '.join(sorted(m for m in ('streamlit', 'ray', 'pandas', 'pyarrow', 'aiconfigurator_core', "
            "'transformers', 'matplotlib', 'torch') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=slack(20))
    assert out.stdout.strip() == ""
