"""Reproduce the seed document's Tables 3.1-3.3 with the simulator's path physics on the seed profile.

Setting (SEEDS.md, 000_3cff22d029debaea.txt): LLaMA-2-70B on one A100 80GB, draft LLaMA-2-7B,
K = 5, batch 1, lengths 4K-64K. The seed's figures are per-token (decode) latencies, so each model
figure is a per-token latency at batch 1 through tripath/simulator/paths/step.py's PathStep:

- tiered rows: one sequence decoding the 256 tokens up to the length (seconds / tokens emitted):
  a chunk is paged out once per 256 tokens written, so the window holds the tiered cache's steady
  state, and at 8K the whole window fits the 8K-token device budget, as the seed says it does;
- every other row: iterations at exactly the length (the context held there), 256 tokens' worth;
  speculative rows average 64 such windows of seeded draws (seeds 0..63: about 7,000 rounds, a
  standard error near 1% of the ratio).

Each row says whether the seed is self-consistent there; where it is, the model must agree within
10% (tests/scripts/test_seed_reproduction.py asserts it); where not, the note says which figure it follows.

    .venv/bin/python scripts/reproduce_seed.py            # markdown table (docs/simulator_paths.md)
    .venv/bin/python scripts/reproduce_seed.py --json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

import numpy as np

from tripath.profile.profile import Profile, resolve_profile
from tripath.simulator.paths.run_costs import RunCosts
from tripath.simulator.paths.step import PathStep
from tripath.simulator.scenario.strategy import SequenceParallelSpec, SpeculativeSpec, StrategySpec, TieredSpec
from tripath.simulator.step_model import Decode

PROFILE = "seed-llama2-70b-a100"
TOLERANCE = 0.10
WINDOW = 256
SPEC_WINDOWS = 64
BASE, SPEC = StrategySpec(), StrategySpec(speculative=SpeculativeSpec(k=5))
TIERED = StrategySpec(tiered=TieredSpec())
SP2 = StrategySpec(sequence_parallel=SequenceParallelSpec(degree=2))

# SEEDS.md transcriptions (the seed's published figures, ms or ratios)
TABLE_31 = {"dialogue": -0.25, "math": 0.0, "code": -0.15, "summarization": -0.20}  # latency change at K = 5
TABLE_32_PAGING = {4096: 0.0, 8192: 0.0, 16384: 35.0, 32768: 85.0, 65536: 150.0}
TABLE_32_P99 = {4096: 45.0, 8192: 80.0, 16384: 120.0, 32768: 200.0, 65536: 350.0}
TABLE_33_ONE = {4096: 45.0, 8192: 80.0, 16384: 160.0, 32768: 320.0}
TABLE_33_SP = {4096: 25.0, 8192: 45.0, 16384: 90.0, 32768: 175.0}


@dataclass(frozen=True)
class Row:
    table: str
    row: str
    seed: float
    model: float
    consistent: bool  # the seed's figure agrees with its own other figures: the model must be within 10%
    note: str = ""

    @property
    def error(self) -> float:
        return self.model / self.seed - 1.0 if self.seed else float("nan")


@dataclass(frozen=True)
class Window:
    seconds: float
    tokens: int
    paging_s: float
    merge_s: float

    @property
    def per_token_ms(self) -> float:
        return 1000.0 * self.seconds / self.tokens


def decode_window(profile: Profile, strategy: StrategySpec, task: str, length: int, seed: int = 0) -> Window:
    """One sequence emitting WINDOW tokens at batch 1 through PathStep: with the tiered cache its context
    grows from length - WINDOW to length; otherwise every iteration is at exactly ``length``."""
    step = PathStep(RunCosts.from_profile(profile, strategy, [task], profile.kv_capacity_bytes),
                    np.random.default_rng(seed))
    grow = strategy.tiered is not None
    context = length - WINDOW if grow else length
    seconds = paging = merge = 0.0
    tokens = 0
    while tokens < WINDOW:
        result = step.step([], [Decode(0, 0, context, 1 << 20)], context)
        emitted = int(result.emitted[0])
        seconds, paging, merge = seconds + result.seconds, paging + result.paging_s, merge + result.merge_s
        tokens += emitted
        context += emitted if grow else 0
    return Window(seconds, tokens, paging, merge)


def per_token_ms(profile: Profile, strategy: StrategySpec, task: str, length: int, windows: int = 1) -> float:
    parts = [decode_window(profile, strategy, task, length, seed) for seed in range(windows)]
    return 1000.0 * sum(w.seconds for w in parts) / sum(w.tokens for w in parts)


def reproduce(profile: Profile) -> list[Row]:
    rows: list[Row] = []
    for task, change in TABLE_31.items():
        base = per_token_ms(profile, BASE, task, 4096)
        spec = per_token_ms(profile, SPEC, task, 4096, SPEC_WINDOWS)
        rows.append(Row("3.1", f"{task} latency ratio (1 + change)", 1.0 + change, spec / base, True,
                        "per-token decode latency with / without speculation, 4K context"))
    for length, seed_ms in TABLE_32_PAGING.items():
        window = decode_window(profile, TIERED, "dialogue", length)
        consistent = length != 16384
        note = "" if consistent else ("the seed's paging column (35, 85, 150 ms for 8K, 24K, 56K tokens paged) "
                                      "is not linear in bytes as its text claims; the model follows the "
                                      "least-squares line through the three")
        rows.append(Row("3.2", f"{length // 1024}K paging ms per token", seed_ms,
                        1000.0 * window.paging_s / window.tokens, consistent, note))
    for length, seed_ms in TABLE_32_P99.items():
        consistent = length <= 8192
        note = "" if consistent else ("below Table 3.3's 1-GPU latency without paging at the same length; the "
                                      "model follows Table 3.3 + the paging column")
        rows.append(Row("3.2", f"{length // 1024}K P99 per-token ms (tiered)", seed_ms,
                        per_token_ms(profile, TIERED, "dialogue", length), consistent, note))
    for length, seed_ms in TABLE_33_ONE.items():
        rows.append(Row("3.3", f"{length // 1024}K 1 GPU ms", seed_ms, per_token_ms(profile, BASE, "dialogue", length),
                        True))
    for length, seed_ms in TABLE_33_SP.items():
        sp_ms = per_token_ms(profile, SP2, "dialogue", length)
        rows.append(Row("3.3", f"{length // 1024}K 2-GPU SP ms", seed_ms, sp_ms, True,
                        "attention / 2 + merge_ms(length)"))
        rows.append(Row("3.3", f"{length // 1024}K SP speedup", TABLE_33_ONE[length] / seed_ms,
                        per_token_ms(profile, BASE, "dialogue", length) / sp_ms, False,
                        "the ratio of two rows compared above, not a figure of its own: their errors compound"))
    rows.append(Row("intro", "8K P99 ms", 320.0, per_token_ms(profile, TIERED, "dialogue", 8192), False,
                    "contradicts Tables 3.2 and 3.3 (80 ms at 8K); the model follows the tables"))
    return rows


def markdown(rows: list[Row]) -> str:
    lines = ["| table | figure | seed | model | error | asserted within 10% | note |",
             "|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        error = f"{100 * r.error:+.1f}%" if r.seed else "n/a"
        lines.append(f"| {r.table} | {r.row} | {r.seed:.3g} | {r.model:.3g} | {error} | "
                     f"{'yes' if r.consistent else 'no'} | {r.note} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="rows as JSON instead of a markdown table")
    args = parser.parse_args()
    rows = reproduce(resolve_profile(PROFILE))
    if args.json:
        print(json.dumps([asdict(r) | {"error": r.error if r.seed else None} for r in rows], indent=2))
    else:
        print(markdown(rows))


if __name__ == "__main__":
    main()
