"""The parser of `tripath serve` (tripath/cli/serve.py runs it). Argparse only: torch loads when the command runs."""

from __future__ import annotations

import argparse

from tripath.cli.arg_types import (
    OneLineParser,
    non_negative_int,
    positive_int,
    rate_per_s,
    request_count,
    seed,
    thread_count,
)
from tripath.engine.model.config import PRESETS  # plain data: no torch

DESCRIPTION = ("Replay a scenario's workload through the real engine (measured): the engine the scenario describes "
               "(tripath/fidelity/engine_settings.py, as `tripath validate` builds it), with the flags below on top.")


def register(sub: argparse._SubParsersAction) -> None:
    """Register `serve` on the tripath parser."""
    p = sub.add_parser("serve", help="replay a scenario's workload on the real engine (measured records)",
                       description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    from tripath.cli.serve import run  # torch loads only here

    return run(args)


def main(argv: list[str] | None = None) -> int:
    """`tripath serve ARGS` with none of tripath's error handling (an InputError propagates): for tests. The
    same flags and the same ``run`` as the registered command; a usage error is one line, exit 2."""
    p = OneLineParser(prog="tripath serve", description=DESCRIPTION)
    add_arguments(p)
    return _cmd_serve(p.parse_args(argv))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every flag of `tripath serve` on ``p``."""
    p.add_argument("scenario")
    p.add_argument("--checkpoint", help="HF-layout checkpoint folder; default: a random-weight preset")
    p.add_argument("--preset", default="tiny-target", choices=sorted(PRESETS))
    p.add_argument(
        "--rate", type=rate_per_s, help="arrivals per second (needed when the scenario uses load_fraction)"
    )
    p.add_argument("--requests", type=request_count, help="replay only the first N requests")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--device", help="torch device (default: cuda where available, else cpu)")
    p.add_argument("--num-blocks", type=positive_int, default=1024)
    p.add_argument("--block-size", type=positive_int, default=16)
    p.add_argument("--out", default="engine_records.csv")
    p.add_argument("--steps-out", help="also write per-step timing records (CSV)")
    p.add_argument("--threads", type=thread_count, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", action="store_true", help="print the measured latency percentiles as one JSON object")
    p.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="reuse cached full prompt blocks across requests (default: on when the scenario has an "
                        "enabled [strategy.prefix_cache]); prompts share blocks where the workload's prefix "
                        "structure ([workload.prefix], a trace's hash_ids) says they do")
    g = p.add_argument_group("tiered KV (on with --tiered or a [strategy.tiered] table in the scenario)")
    g.add_argument("--tiered", action="store_true",
                   help="KV in device / host / SSD tiers (tripath/engine/tiered/store.py)")
    g.add_argument("--chunk-tokens", type=positive_int,
                   help="tokens per page (default: [strategy.tiered] chunk_tokens, or 256)")
    g.add_argument("--device-pages", type=positive_int,
                   help="device pool in pages (default: --num-blocks x --block-size)")
    g.add_argument("--host-pages", type=non_negative_int,
                   help="host tier in pages (default: as many as the device pool; it is preallocated, so the "
                        "scenario's host_capacity_gib is not used)")
    g.add_argument("--ssd-pages", type=non_negative_int,
                   help="SSD tier in pages (default: the scenario's ssd_capacity_gib, at most 16x the device pool; "
                        "16x without it)")
    g.add_argument("--ssd-dir", help="parent of the SSD tier's temp directory (default: the system temp dir)")
    g.add_argument("--sink-tokens", type=non_negative_int,
                   help="attention sinks kept on the device (default: [strategy.tiered] sink_tokens, or 4)")
    g.add_argument("--window-tokens", type=non_negative_int,
                   help="recent window kept on the device (default: [strategy.tiered] window_tokens, or 256)")
