"""The shipped path scenarios against their variants without (some of) their strategy tables.

Simulated with runner.simulate on each scenario's profile (the seed profile for the shipped ones),
seed 0, one replication; TPOT per request = (finish - first token) / (output - 1). Prints the
markdown table of docs/simulator_paths.md ("The example scenarios").

    .venv/bin/python scripts/measurements/path_examples.py
"""

from __future__ import annotations

import copy
import tomllib

import numpy as np

from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.profile.profile import resolve_profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict

# scenario -> variants: label -> the strategy tables to drop from the shipped file
EXAMPLES = {
    "dialogue-medium-speculative": {"as shipped (adaptive speculative + tiered)": (), "tiered only": ("speculative",),
                                    "no strategy": ("speculative", "tiered")},
    "summarization-very-long-tiered": {"as shipped (tiered)": (), "no strategy": ("tiered",)},
}


def row(name: str, label: str, data: dict) -> str:
    result = simulate(scenario_from_dict(data), resolve_profile(data["profile"]), seed=0)
    records = result.runs[0].records
    done = [r for r in records if r.completed]
    if not done:
        return f"| {name} | {label} | 0 / {len(records)} | – | – | – |"
    tpot = [(r.finish_s - r.first_token_s) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    ttft = [r.first_token_s - r.arrival_s for r in done]
    p_tpot, p_ttft = np.percentile(tpot, [50, 99]) * 1000, np.percentile(ttft, [50, 99])
    paging = float(np.mean([r.paging_s for r in done]))
    return (f"| {name} | {label} | {len(done)} / {len(records)} | {p_tpot[0]:.0f} / {p_tpot[1]:.0f} | "
            f"{p_ttft[0]:.1f} / {p_ttft[1]:.1f} | {paging:.2f} |")


def main() -> None:
    print("| scenario | variant | completed | TPOT p50 / p99 ms | TTFT p50 / p99 s | "
          "mean paging stall per request, s |")
    print("|---|---|---|---|---|---|")
    for name, variants in EXAMPLES.items():
        with open(SCENARIOS_DIR / f"{name}.toml", "rb") as fh:
            shipped = tomllib.load(fh)
        for label, dropped in variants.items():
            data = copy.deepcopy(shipped)
            for table in dropped:
                data["strategy"].pop(table)
            print(row(name, label, data))


if __name__ == "__main__":
    main()
