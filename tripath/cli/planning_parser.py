"""Argument parsing of `tripath recommend | matrix | plan | whatif | stack | breakeven` (commands:
tripath/cli/planning_cli.py)."""

from __future__ import annotations

import argparse
from typing import Any

from tripath.cli.arg_types import (
    batch_size,
    batch_sizes,
    gpu_types,
    load_step,
    milliseconds,
    rate_per_s,
    replica_count,
    request_count,
    seconds,
    seed,
    speculative_k,
    tokens,
    usd_per_gpu_hour,
    worker_count,
)
from tripath.cli.arg_types import replications as replication_count
from tripath.cli.planning_cli import (
    _cmd_breakeven,
    _cmd_matrix,
    _cmd_plan,
    _cmd_recommend,
    _cmd_stack,
    _cmd_whatif,
)
from tripath.core.metrics import TERMS


def parse_price_override(text: str) -> tuple[str, float]:
    """--gpu-price TYPE=PRICE (tripath/planning/prices.py), the planning package imported only when one is given:
    `tripath simulate` builds this parser too."""
    from tripath.planning.prices import parse_price_override as parse

    return parse(text)


def _sweep_options(parser: argparse.ArgumentParser, replications: int) -> None:
    parser.add_argument("--seed", type=seed, default=0, help="base seed (every candidate sees the same draws)")
    parser.add_argument("--replications", type=replication_count, default=replications,
                        help="seeded replications per simulation (confidence intervals need >= 2)")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="local: a process pool on this machine; ray: a Ray cluster (or a local instance)")
    parser.add_argument("--workers", type=worker_count, default=None, help="local pool size (default: every core)")
    parser.add_argument("--address", default=None, help="Ray address (e.g. auto, ray://head:10001); default: local")
    parser.add_argument("--cache-dir", default=".tripath-cache", help="where results are cached")
    parser.add_argument("--no-cache", action="store_true", help="simulate everything again, cache nothing")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def register(sub: Any) -> None:
    """Register recommend, matrix, plan, whatif, stack and breakeven on the `tripath` subparsers."""
    rec = sub.add_parser("recommend", help="the answer: which GPU, how many, which path, what it costs, how sure",
                         description="Size every candidate path on every GPU type and TP degree shipped for the "
                         "scenario's model (fewest replicas whose P99s meet the SLA with 95 %% confidence), recommend "
                         "the cheapest in $/h (ties to the simpler deployment; lossy paths only with --allow-lossy), "
                         "show the runner-up, or the closest when none meets the SLA, and the headroom: how much "
                         "higher step costs or load may be before the recommendation stops meeting it.")
    rec.add_argument("scenario", nargs="?", default=None,
                     help="scenario TOML path or shipped name (default: data/scenarios/default.toml)")
    rec.add_argument("--profile", help="profile name or path (default: the scenario's); its GPU types and TP degrees "
                     "are searched unless --only-profile")
    rec.add_argument("--only-profile", action="store_true",
                     help="search the profile's own GPU type and TP degree only, not the model's other layouts")
    rec.add_argument("--gpus", type=gpu_types, default=None, metavar="TYPE[,TYPE]",
                     help="search only these GPU types (e.g. a100-80gb,h100-sxm)")
    rec.add_argument("--qps", type=rate_per_s, default=None,
                     help="arrival rate, requests per second (default: the scenario's workload.arrival.rate_per_s)")
    rec.add_argument("--gpu-prices", metavar="FILE", default=None,
                     help="TOML of USD per GPU-hour per GPU type (default: data/gpu_prices.toml, cited on-demand "
                     "list prices)")
    rec.add_argument("--gpu-price", type=parse_price_override, action="append", default=[], metavar="TYPE=PRICE",
                     help="override one GPU type's USD per GPU-hour (repeatable), e.g. h100-sxm=3.99")
    rec.add_argument("--candidates", nargs="+", default=None, metavar="NAME",
                     help="search only these candidate paths (the baseline always runs: it bounds the cost)")
    rec.add_argument("--allow-lossy", action="store_true",
                     help="let lossy paths (KV compression) be recommended; their published quality cost is shown")
    rec.add_argument("--max-replicas", type=replica_count, default=16, help="replica search bound per candidate")
    rec.add_argument("--batch-sizes", type=batch_sizes, default=None, metavar="N[,N]",
                     help="max batch sizes (vLLM --max-num-seqs) searched besides the scenario's, below the cheapest "
                     "row found (default: the scenario's halved, doubled and quadrupled; 'none' searches only the "
                     "scenario's)")
    rec.add_argument("--requests", type=request_count, default=None,
                     help="requests per replication at the first stage (default: the scenario's, raised to the "
                     "1,000 a P99 needs)")
    rec.add_argument("--budget-requests", type=request_count, default=8000,
                     help="the most requests per replication one verdict may simulate before it says undecided")
    rec.add_argument("--no-robustness", action="store_true", help="skip the cost and load headroom bisections")
    rec.add_argument("--export", metavar="DIR", default=None,
                     help="also write DIR/scenario.toml (the scenario as recommended), DIR/recommendation.json, "
                     "DIR/vllm.txt and DIR/sglang.txt (the recommended settings as serving commands, suggestions)")
    rec.add_argument("--replace", action="store_true", help="replace a non-empty --export folder whole")
    _sweep_options(rec, replications=4)
    rec.set_defaults(func=_cmd_recommend)

    matrix = sub.add_parser("matrix", help="decision matrix: per seed scenario cell, the cheapest path meeting the SLA",
                            description="Simulate every candidate path (and sensible combination) in each cell of "
                            "the seed's Section 4 matrix and recommend, per cell, the cheapest meeting the SLA.")
    matrix.add_argument("--profile", required=True, help="profile name (data/profiles/NAME.json) or path")
    matrix.add_argument("--requests", type=request_count, default=None,
                        help="override each cell's request count (quicker, wider intervals)")
    _sweep_options(matrix, replications=1)
    matrix.set_defaults(func=_cmd_matrix)

    plan = sub.add_parser("plan", help="capacity plan: fewest replicas per candidate meeting the SLA at a load",
                          description="Per candidate, search the fewest replicas meeting the SLA at --qps "
                          "(exponential then binary search), its goodput curve and cost.")
    plan.add_argument("scenario", help="scenario TOML path or shipped name")
    plan.add_argument("--profile", help="profile name or path (default: the scenario's)")
    plan.add_argument("--qps", type=rate_per_s, required=True, help="arrival rate, requests per second")
    plan.add_argument("--sla-ttft-ms", type=milliseconds, help="P99 TTFT target (overrides the scenario's)")
    plan.add_argument("--sla-tpot-ms", type=milliseconds, help="P99 TPOT target (overrides the scenario's)")
    plan.add_argument("--sla-e2e-ms", type=milliseconds, help="P99 end-to-end target (overrides the scenario's)")
    plan.add_argument("--gpu-price", type=usd_per_gpu_hour, help="USD per GPU-hour (your price) for the cost columns")
    plan.add_argument("--candidates", nargs="+", help="candidate names (default: all; e.g. baseline speculative)")
    plan.add_argument("--max-replicas", type=replica_count, default=256, help="search bound")
    plan.add_argument("--requests", type=request_count, default=None,
                      help="override the scenario's request count per simulation (quicker, wider intervals)")
    _sweep_options(plan, replications=1)
    plan.set_defaults(func=_cmd_plan)

    what = sub.add_parser("whatif", help="what-ifs: P99 over a cross product of scenario fields, or a load step",
                          description="Simulate the cross product of --vary fields with confidence intervals, "
                          "or with --load-step the transient (P99 per window) under fixed and adaptive batching.")
    what.add_argument("scenario", help="scenario TOML path or shipped name")
    what.add_argument("--profile", help="profile name or path (default: the scenario's)")
    what.add_argument("--vary", action="append", default=[],
                      help="FIELD=V1,V2,... (repeatable), e.g. batching.max_wait_ms=0,5,10 or workload.rate=0.5,1")
    what.add_argument("--load-step", type=load_step,
                      help="FACTOR@SECONDS: the arrival rate times FACTOR from SECONDS on")
    what.add_argument("--window-s", type=seconds, default=None, help="window width for the load step")
    _sweep_options(what, replications=2)
    what.set_defaults(func=_cmd_whatif)

    stk = sub.add_parser("stack", help="stacking validation: marginal gain of each path in every order; couplings",
                         description="Add optimizations one at a time in every order; report each marginal gain "
                         "and flag negative coupling (e.g. compression lowering acceptance until speculation "
                         "stops paying).")
    stk.add_argument("scenario", help="scenario TOML path or shipped name")
    stk.add_argument("--profile", help="profile name or path (default: the scenario's)")
    stk.add_argument("--compression-mode", help="which of the profile's compression modes to stack (default: first)")
    stk.add_argument("--metric", choices=TERMS, default="e2e", help="metric of the order table")
    _sweep_options(stk, replications=2)
    stk.set_defaults(func=_cmd_stack)

    be = sub.add_parser("breakeven", help="break-even acceptance of speculative decoding vs K, c and batch",
                        description="The acceptance below which speculation stops paying, from the profile's costs, "
                        "compared with the seeds' 50-60%% claims.")
    be.add_argument("--profile", required=True, help="profile name or path")
    be.add_argument("--k", type=speculative_k, nargs="+", default=[1, 2, 3, 4, 5, 6, 8], help="proposal lengths")
    be.add_argument("--batch", type=batch_size, nargs="+", default=[1, 8, 32, 64], help="batch sizes (load)")
    be.add_argument("--context-tokens", type=tokens, default=8192.0, help="context per sequence")
    be.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    be.set_defaults(func=_cmd_breakeven)
