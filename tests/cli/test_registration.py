"""Every `tripath` subcommand is registered one way (its parser module's ``register(sub)``, tripath/cli/main.py
build_parser): each is listed by `tripath --help`, answers its own `--help` with exit 0, and `tripath --help`
loads no torch. `serve` is an ordinary subcommand: its flags parse through the tripath parser and a usage
error is one line, exit 2."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tripath.cli.main import build_parser, main

COMMANDS = {"simulate", "serve", "app", "calibrate", "profile", "validate", "recommend", "matrix", "plan", "whatif",
            "stack", "breakeven"}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_is_registered_and_listed_by_help_without_torch() -> None:
    assert set(_subcommands(build_parser())) == COMMANDS
    code = ("import sys\nfrom tripath.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\nprint('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("NO-TORCH")  # argparse only: torch loads when a command runs
    listed = proc.stdout.split("positional arguments:")[1]
    for command in COMMANDS:
        assert f"    {command} " in listed or f"    {command}\n" in listed, command


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_answers_help_with_exit_0(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: tripath {command}")


def test_serve_flags_parse_through_the_tripath_parser() -> None:
    args = build_parser().parse_args(["serve", "s.toml", "--tiered", "--ssd-pages", "3", "--no-prefix-caching",
                                      "--sink-tokens", "0"])
    assert (args.command, args.scenario, args.tiered, args.ssd_pages, args.prefix_caching, args.sink_tokens) == (
        "serve", "s.toml", True, 3, False, 0)
    assert args.window_tokens is None and args.device is None  # defaults resolved when the command runs
    assert callable(args.func)


def test_a_serve_usage_error_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "s.toml", "--num-blocks", "0"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tripath serve: error: argument --num-blocks")
    assert err.rstrip().endswith("(see tripath serve --help)")


def test_an_unknown_flag_is_named_by_its_commands_parser(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("serve", "simulate"):
        with pytest.raises(SystemExit) as exited:
            main([command, "s.toml", "--bogus"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err == f"tripath {command}: error: unrecognized arguments: --bogus (see tripath {command} --help)\n"
