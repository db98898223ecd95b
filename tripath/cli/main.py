"""The `tripath` command line: thin wrappers over typed functions (the app and tests call the same ones).

Every subcommand takes --help; every one that reports numbers takes --json. Bad input
(a malformed scenario, profile or trace, a missing file) prints one line naming the
file and field on stderr and exits with status 2, having written nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from tripath.cli.arg_types import positive_float, positive_int
from tripath.core.errors import InputError

EXIT_INPUT = 2


def _cmd_simulate(args: argparse.Namespace) -> int:
    # Imported here so `tripath --help` stays instant and other subcommands never pay for SimPy.
    from tripath.profile.profile import resolve_profile
    from tripath.simulator.report import format_summary
    from tripath.simulator.runner import simulate
    from tripath.simulator.scenario.scenario import load_scenario
    from tripath.simulator.summary import summary, write_outputs

    scenario = load_scenario(args.scenario)
    profile_name = args.profile or scenario.profile
    if profile_name is None:
        raise InputError(scenario.source_path, "profile", "no profile given: pass --profile NAME|PATH")
    profile = resolve_profile(profile_name)
    result = simulate(scenario, profile, seed=args.seed, replications=args.replications,
                      fast=not args.reference, timeseries_interval_s=args.timeseries_interval)
    report = summary(result)
    if args.out:
        write_outputs(result, args.out)
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
    from pathlib import Path

    from tripath.profile.profile import MAX_PROFILE_BYTES

    app = Path(__file__).resolve().parents[2] / "app.py"
    if not app.is_file():
        raise InputError(str(app), None, "the app is not part of this installation (use a source checkout)")
    argv = [sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
            "--server.port", str(args.port), "--server.address", args.address,
            "--server.maxUploadSize", str(MAX_PROFILE_BYTES >> 20), "--client.toolbarMode", "minimal",
            "--browser.gatherUsageStats", "false"]
    print(f"tripath app: serving on http://{args.address}:{args.port}", file=sys.stderr, flush=True)
    os.execv(sys.executable, argv)
    return 0  # not reached: execv does not return


def _cmd_serve(args: argparse.Namespace) -> int:
    # tripath/cli/serve.py's parser owns its options (`tripath serve --help` shows them); torch loads only here.
    from tripath.cli.serve import main as serve_main

    return serve_main(args.rest)


class _Passthrough(argparse.Namespace):
    """`tripath serve ARGS...`: ARGS go untouched to serve's own parser (argparse would eat --help)."""

    def __init__(self, rest: list[str]) -> None:
        super().__init__(func=_cmd_serve, rest=rest)


def _json_default(value: object) -> object:
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tripath",
        description="Which long-context inference path meets your P99 SLA at the lowest GPU cost.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sim = sub.add_parser(
        "simulate",
        help="simulate a scenario on a calibration profile and report tail latency against the SLA",
        description="Simulate a scenario (TOML) on a calibration profile with seeded replications; "
        "report TTFT, TPOT, end-to-end and queueing delay percentiles with 95%% confidence intervals.",
    )
    sim.add_argument("scenario", help="scenario TOML path, or the name of a shipped one (data/scenarios/)")
    sim.add_argument("--profile", help="profile name (data/profiles/NAME.json) or path; "
                     "default: the scenario's own `profile`")
    sim.add_argument("--seed", type=int, default=0, help="base seed; replications derive theirs from it")
    sim.add_argument("--replications", type=positive_int, default=5,
                     help="independent seeded replications (confidence intervals need >= 2)")
    sim.add_argument("--out", help="folder to write records.csv and summary.json into")
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    sim.add_argument("--reference", action="store_true",
                     help="run one SimPy event per iteration (slow; the exactness reference of the fast path)")
    sim.add_argument("--timeseries-interval", type=positive_float, default=None, metavar="SECONDS",
                     help="sample queue, batch, KV per tier and paging every SECONDS of simulated time; "
                     "with --out, written to timeseries.csv (runs the per-iteration loop; same records)")
    sim.set_defaults(func=_cmd_simulate)

    serve = sub.add_parser(
        "serve", add_help=False,
        help="replay a scenario's workload on the real engine (measured records; --help for options)",
    )
    serve.add_argument("rest", nargs=argparse.REMAINDER)
    serve.set_defaults(func=_cmd_serve)

    app = sub.add_parser(
        "app", help="start the Streamlit app (headless server; open the printed address in a browser)",
        description="Run `streamlit run app.py` headless: scenario explorer, decision matrix, capacity planner, "
        "SLA what-ifs, calibration profiles and fidelity reports (docs/app.md).",
    )
    app.add_argument("--port", type=positive_int, default=8501, help="port to serve on (default 8501)")
    app.add_argument("--address", default="localhost",
                     help="address to bind (default localhost; 0.0.0.0 to serve other machines)")
    app.set_defaults(func=_cmd_app)

    # calibrate, profile: the calibrate package registers them (argparse only; torch loads when they run)
    from tripath.calibrate.commands import add_subcommands

    add_subcommands(sub)
    # validate: the fidelity package registers it (argparse only; torch loads when it runs)
    from tripath.fidelity.validate import add_subcommand as add_validate

    add_validate(sub)
    # matrix, plan, whatif, stack, breakeven: planning analyses (tripath/planning/ loads when they run)
    from tripath.cli.planning_parser import add_subcommands as add_planning

    add_planning(sub)
    return parser




def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = _Passthrough(argv[1:]) if argv[:1] == ["serve"] else parser.parse_args(argv)
    try:
        return int(args.func(args))
    except InputError as err:
        print(f"tripath: error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except FileNotFoundError as err:
        print(f"tripath: error: {err.filename}: file not found", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        # `tripath ... | head` closed the pipe: not an error of ours; keep Python from complaining at exit.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
