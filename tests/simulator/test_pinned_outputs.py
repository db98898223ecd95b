"""Same seed, same bytes: a few shipped scenarios' records.csv and summary.json, pinned by their sha256.

The digests were written by the flat layout before the package regrouping (records byte for byte; the
summary differs from that layout's only in the source paths it cites, docs/module_moves.md). The summaries
were re-pinned when latency intervals became order-statistic intervals (tripath/core/metrics.py:
percentile_estimate): records byte for byte, every summary field but the latency ci_low / ci_high and the
new latency_interval the same; and again when the replication intervals (``estimate``) were cut to their
quantity's range: only ci_low / ci_high that were below 0 or above 1 for a fraction moved. The two cpu-tiny
rows were re-pinned when cpu-tiny was re-calibrated on a new machine (new costs; docs/fidelity.md).
scripts/compare_runs.py checks every shipped scenario on every shipped profile the same way; this pins a
few paths (speculative, tiered, sequence parallel, compression) so a change that moves a number fails here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tripath.cli.main import main
from tripath.core.data_dirs import SCENARIOS_DIR

PINNED = [  # scenario, profile, sha256[:16] of records.csv, of summary.json (seed 0, 2 replications)
    ("quickstart", "seed-llama2-70b-a100", "1f513c67d924ff0c", "2379071730e8a91e"),
    ("dialogue-medium-speculative", "seed-llama2-70b-a100", "104dded0afbfd0df", "9da6fdf6d0847094"),
    ("fixed-length-multi-gpu-sp", "seed-llama2-70b-a100", "4b1430106e5d2f5f", "218ea2dccb32dcc8"),
    ("summarization-very-long-tiered", "seed-llama2-70b-a100", "da9fa262d6d2fc12", "9fe6b56ea46b6d47"),
    ("validation/kv-int8", "cpu-tiny", "3d763f61956c5767", "a2534c7f175e2e68"),
    ("validation/speculative-math", "cpu-tiny", "80ee1301483cc90c", "9ad9667746ae78e0"),
]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@pytest.mark.parametrize(("scenario", "profile", "records", "summary"), PINNED)
def test_outputs_are_byte_identical(tmp_path: Path, scenario: str, profile: str, records: str, summary: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = SCENARIOS_DIR / f"{scenario}.toml"
    argv = ["simulate", str(path), "--profile", profile, "--seed", "0", "--replications", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    capsys.readouterr()
    assert (_digest(tmp_path / "records.csv"), _digest(tmp_path / "summary.json")) == (records, summary)
