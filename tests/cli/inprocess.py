"""Run the `tripath` CLI in this process: exit status, stdout and stderr of one command line."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence

from tripath.cli.main import main


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``tripath ARGV``; argparse's SystemExit counts as a status."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue()


def assert_clean_exit(code: int, err: str, *names: str) -> None:
    """Exit 0, or exit 2 with exactly one stderr line that names one of ``names`` (a file or field);
    never a traceback."""
    assert "Traceback" not in err, err
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert "error:" in lines[0], err
        if names:
            assert any(name in lines[0] for name in names), (names, err)
