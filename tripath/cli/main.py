"""The `tripath` command line: thin wrappers over typed functions (the app and tests call the same ones).

Every subcommand takes --help; every one that reports numbers takes --json. Exit status
(docs/cli_contract.md): 0 done; 2 bad input or environment (a malformed, binary, huge or too deeply
nested scenario, profile or trace; a value past tripath/core/limits.py; an unreadable or unwritable
path; a full disk; out of memory): one line on stderr naming the file and field or the operation,
nothing written; 70 a defect in tripath: one line, the traceback saved to a file it names; 130 interrupted
(Ctrl-C, SIGTERM or SIGHUP: the same cleanup for each, no temp file or folder left).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from tripath.cli.arg_types import OneLineParser, port, positive_float, replications, seed
from tripath.core.errors import InputError

EXIT_INPUT = 2
EXIT_INTERNAL = 70  # sysexits.h EX_SOFTWARE
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # handled like Ctrl-C, exit 130 too


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: raised where Ctrl-C raises KeyboardInterrupt, so the same cleanup runs (every
    `with` of tripath/core/atomic.py removes its temp file or folder) where the default action would kill the
    process mid-write."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """While a command runs, SIGTERM and SIGHUP raise Terminated in the main thread.

    A signal the caller ignores (nohup's SIGHUP) stays ignored. A second signal while the first unwinds gets the
    old action (by default it kills at once: the way out of a cleanup that hangs). A process forked from this
    one (a worker pool) that inherits the handler dies of the signal as it did before. The old handlers come
    back afterwards (tests run commands in this process); exec (`tripath app` becoming Streamlit) resets them
    in the new program, and Ray's driver (`--executor ray`) installs its own SIGTERM handler (SystemExit: the
    cleanup runs too).
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal.signal works only in the main thread; an embedding caller keeps its own handlers
        return
    owner = os.getpid()
    previous = {sig: signal.getsignal(sig) for sig in TERMINATING_SIGNALS}
    handled = [sig for sig, old in previous.items() if old is not signal.SIG_IGN]

    def restore() -> None:
        for sig in handled:
            old = previous[sig]
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    def terminate(signum: int, frame: object) -> None:
        if os.getpid() != owner:  # a forked worker: die of it, as without this handler
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        restore()
        raise Terminated(signum)

    for sig in handled:
        signal.signal(sig, terminate)
    try:
        yield
    finally:
        restore()


def _cmd_simulate(args: argparse.Namespace) -> int:
    # Imported here so `tripath --help` stays instant and other subcommands never pay for SimPy.
    from pathlib import Path

    from tripath.core.atomic import check_dir_target, writing_dir
    from tripath.core.limits import check_fits
    from tripath.profile.profile import resolve_profile
    from tripath.simulator.report import format_summary
    from tripath.simulator.runner import SimulationResult, simulate_recording
    from tripath.simulator.scenario.scenario import load_scenario
    from tripath.simulator.summary import summary, write_outputs

    if args.out is not None:
        check_dir_target(args.out, args.replace)  # refused before the run, not after it
    scenario = load_scenario(args.scenario)
    profile_name = args.profile or scenario.profile
    if profile_name is None:
        raise InputError(scenario.source_path, "profile", "no profile given: pass --profile NAME|PATH")
    profile = resolve_profile(profile_name)
    if scenario.workload.requests is not None:
        check_fits(scenario.workload.requests * args.replications, scenario.source_path,
                   "workload.requests x --replications")

    def run(records_path: Path | None) -> SimulationResult:
        # records streamed to disk as the run goes where the fast path serves it: memory flat in the requests
        return simulate_recording(scenario, profile, records_path, seed=args.seed, replications=args.replications,
                                  fast=not args.reference, timeseries_interval_s=args.timeseries_interval)

    if args.out is None:
        report = summary(run(None))
    else:
        with writing_dir(args.out, args.replace) as folder:
            result = run(folder / "records.csv")
            report = summary(result)
            write_outputs(result, folder, report)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True, allow_nan=False, default=_json_default))
    else:
        print(format_summary(report))
    return 0


def _cmd_app(args: argparse.Namespace) -> int:
    # The Streamlit app (app.py at the repository root) replaces this process: Ctrl-C and signals reach
    # the server directly. Uploads are capped at 1 MB (Streamlit's MB is 2**20 bytes), the same limit the app
    # checks itself (tripath/profile/profile.py MAX_PROFILE_BYTES); the minimal toolbar has no Deploy button.
    import os
    from importlib.util import find_spec
    from pathlib import Path

    from tripath.profile.profile import MAX_PROFILE_BYTES

    app = Path(__file__).resolve().parents[2] / "app.py"
    if not app.is_file():
        raise InputError(str(app), None, "the app is not part of this installation (use a source checkout)")
    if find_spec("streamlit") is None:  # the app extra: `make run` (pip install -e .) leaves it out
        raise InputError(None, "tripath app", "needs Streamlit, which is not installed: pip install -e '.[app]'")
    argv = [sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
            "--server.port", str(args.port), "--server.address", args.address,
            "--server.maxUploadSize", str(MAX_PROFILE_BYTES >> 20), "--client.toolbarMode", "minimal",
            "--browser.gatherUsageStats", "false"]
    print(f"tripath app: serving on http://{args.address}:{args.port}", file=sys.stderr, flush=True)
    os.execv(sys.executable, argv)
    return 0  # not reached: execv does not return


def _json_default(value: object) -> object:
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def build_parser() -> argparse.ArgumentParser:
    """The `tripath` parser: every subcommand is registered one way, by its parser module's ``register(sub)``.

    Argparse only (`tripath --help` stays fast): each command's heavy imports (SimPy, torch, the planning
    package) happen in its ``func`` when it runs.
    """
    from tripath.cli import engine_parser, planning_parser, serve_parser

    parser = OneLineParser(
        prog="tripath",
        description="Which long-context inference path meets your P99 SLA at the lowest GPU cost.",
        epilog="Exit status: 0 done, 2 bad input or environment (one line naming file and field), 70 internal "
        "error (traceback saved to a file it names), 130 interrupted (Ctrl-C, SIGTERM, SIGHUP). Limits on sizes: "
        "docs/cli_contract.md.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # simulate and app (here); serve; calibrate, profile, validate (engine side); recommend, matrix, plan, whatif,
    # stack, breakeven (planning)
    for register_commands in (register, serve_parser.register, engine_parser.register, planning_parser.register):
        register_commands(sub)
    return parser


def register(sub: argparse._SubParsersAction) -> None:
    """Register `simulate` and `app` on the tripath parser."""
    sim = sub.add_parser(
        "simulate",
        help="simulate a scenario on a calibration profile and report tail latency against the SLA",
        description="Simulate a scenario (TOML) on a calibration profile with seeded replications; "
        "report TTFT, TPOT, end-to-end and queueing delay percentiles with order-statistic 95% intervals "
        "(never below zero).",
    )
    sim.add_argument("scenario", help="scenario TOML path, or the name of a shipped one (data/scenarios/)")
    sim.add_argument("--profile", help="profile name (data/profiles/NAME.json) or path; "
                     "default: the scenario's own `profile`")
    sim.add_argument("--seed", type=seed, default=0, help="base seed; replications derive theirs from it")
    sim.add_argument("--replications", type=replications, default=5,
                     help="independent seeded replications (confidence intervals need >= 2)")
    sim.add_argument("--out", help="folder to write records.csv and summary.json into (written whole: built "
                     "beside it and renamed into place; an existing non-empty folder needs --replace)")
    sim.add_argument("--replace", action="store_true", help="replace an existing --out folder whole")
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    sim.add_argument("--reference", action="store_true",
                     help="run one SimPy event per iteration (slow; the exactness reference of the fast path)")
    sim.add_argument("--timeseries-interval", type=positive_float, default=None, metavar="SECONDS",
                     help="sample queue, batch, KV per tier and paging every SECONDS of simulated time; "
                     "with --out, written to timeseries.csv (runs the per-iteration loop; same records)")
    sim.set_defaults(func=_cmd_simulate)

    app = sub.add_parser(
        "app", help="start the Streamlit app (headless server; open the printed address in a browser)",
        description="Run `streamlit run app.py` headless: scenario explorer, decision matrix, capacity planner, "
        "SLA what-ifs, calibration profiles and fidelity reports (docs/app.md).",
    )
    app.add_argument("--port", type=port, default=8501, help="port to serve on (default 8501)")
    app.add_argument("--address", default="localhost",
                     help="address to bind (default localhost; 0.0.0.0 to serve other machines)")
    app.set_defaults(func=_cmd_app)



def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command's own parser: "tripath serve: error: ... (see tripath serve --help)"
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
    with signals_as_interrupts():
        return run_guarded(lambda: int(args.func(args)), argv)


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The subparser ``build_parser`` registered for ``command``."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[command]


def _error(text: str) -> int:
    print(f"tripath: error: {' '.join(text.split())}", file=sys.stderr)
    return EXIT_INPUT


def run_guarded(command: Callable[[], int], argv: Sequence[str]) -> int:
    """Run one command; every error becomes one stderr line and an exit status (the module docstring's)."""
    from tripath.core.errors import describe_os_error

    try:
        return command()
    except InputError as err:
        return _error(str(err))
    except BrokenPipeError:
        # `tripath ... | head` closed the pipe: not an error of ours; keep Python from complaining at exit.
        sys.stderr.close()
        return 0
    except FileNotFoundError as err:
        return _error(f"{err.filename}: file not found" if err.filename else describe_os_error(err))
    except OSError as err:
        return _error(describe_os_error(err))
    except UnicodeDecodeError as err:
        return _error(f"input is not UTF-8 text ({err.reason} at byte {err.start})")
    except RecursionError:
        return _error("input nested too deeply to read")
    except MemoryError:
        return _error("out of memory: the machine cannot hold this run; use fewer requests, replications "
                      "or a shorter duration (limits: docs/cli_contract.md)")
    except Terminated as err:
        print(f"tripath: interrupted by {signal.Signals(err.signum).name}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("tripath: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # a defect in tripath: one line for the user, the traceback for the report
        saved = save_traceback(err, argv)
        where = f"traceback saved to {saved}" if saved else "the traceback could not be saved"
        print(f"tripath: internal error: {type(err).__name__}: {' '.join(str(err).split())[:300]} ({where}; "
              "please report it)", file=sys.stderr)
        return EXIT_INTERNAL


def save_traceback(err: BaseException, argv: Sequence[str]) -> str | None:
    """Write ``err``'s traceback and the command line to a new file under the user's cache folder
    ($XDG_CACHE_HOME/tripath or ~/.cache/tripath, else the temp folder); its path, or None if none could be written."""
    import os
    import tempfile
    import time
    import traceback
    from pathlib import Path

    from tripath.core.data_dirs import user_dir

    text = (f"tripath {' '.join(argv)}\n{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n\n"
            + "".join(traceback.format_exception(err)))
    for folder in (user_dir(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, path = tempfile.mkstemp(dir=folder, prefix="internal-error-", suffix=".txt")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            return path
        except OSError:
            continue
    return None


if __name__ == "__main__":
    sys.exit(main())
