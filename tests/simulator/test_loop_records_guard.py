"""Every shipped scenario's records, bit for bit, through every loop that can serve it.

The simulator's serving loops (tripath/simulator/loop/: the fast replica, the stepper with and without its
fast-forward, the streaming cluster) are being merged into one; this is the guard that the merge moves no
number. Each shipped scenario (data/scenarios/*.toml and data/scenarios/validation/*.toml, on the profile it
names, seed 0, one replication) is simulated in each mode below, and two digests of the result are compared with
the values the loops gave before the merge began (computed at commit fb366b4, pinned here):

- records: sha256[:16] of records.csv's text (``_records_csv``: every field, floats in repr form);
- run: sha256[:16] of each replica's stats (index, busy_s as float.hex, iterations, runs, peak KV bytes) and the
  run's event count, the bookkeeping the summary reports beside the records.

Modes: ``default`` (``simulate``: the loop ``stepper_setup`` chooses); ``reference`` (``fast=False``: the fast
replica's one-event-per-iteration reference); ``series`` (a time series every 5 s: the stepper, one event per
iteration, no fast-forward); ``stream`` (``simulate_recording``, where the run streams: records.csv written by
tripath/simulator/loop/streaming.py, its bytes hashed). Sequence-parallel scenarios book merge time per run on
the fast path and per iteration on the stepper, so their reference / series records differ from the default's
in the last bits; each mode is pinned to its own digest.
"""

from __future__ import annotations

import csv
import hashlib
import io
import tempfile
from pathlib import Path

import pytest

from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.core.records import RECORD_COLUMNS, RequestRecord, RunResult, record_row
from tripath.profile.profile import resolve_profile
from tripath.simulator.runner import simulate, simulate_recording, streams
from tripath.simulator.scenario.scenario import load_scenario

SCENARIOS = sorted(str(p.relative_to(SCENARIOS_DIR).with_suffix("")) for p in SCENARIOS_DIR.rglob("*.toml"))
MODES = ("default", "reference", "series", "stream")
SLOW = {"azure-conv-replay"}  # ~3 s a mode: only its default mode runs in the quick set


def _digest(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:16]


def _records_csv(runs: tuple[RunResult, ...]) -> str:
    """records.csv's text: the header, then tripath/core/records.py's ``record_row`` per record (``\\n`` line ends)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(RECORD_COLUMNS)
    for replication, run in enumerate(runs):
        records: tuple[RequestRecord, ...] = run.records
        writer.writerows(record_row(replication, r) for r in records)
    return buffer.getvalue()


def _run_digest(runs: tuple[RunResult, ...]) -> str:
    parts = [repr(([(s.index, s.busy_s.hex(), s.iterations, s.runs, s.peak_kv_bytes) for s in run.replicas],
                   run.events)) for run in runs]
    return _digest("|".join(parts))


def applies(name: str, mode: str) -> bool:
    """Whether ``mode`` runs this scenario (``stream`` only where ``simulate_recording`` streams it)."""
    return mode != "stream" or streams(load_scenario(SCENARIOS_DIR / f"{name}.toml"))


def digests(name: str, mode: str) -> tuple[str, str]:
    """(records digest, run digest) of the scenario simulated in ``mode`` (module docstring)."""
    scenario = load_scenario(SCENARIOS_DIR / f"{name}.toml")
    assert scenario.profile is not None
    profile = resolve_profile(scenario.profile)
    if mode == "stream":
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "records.csv"
            result = simulate_recording(scenario, profile, path, seed=0, replications=1)
            return _digest(path.read_bytes()), _run_digest(result.runs)
    if mode == "series":
        result = simulate(scenario, profile, seed=0, replications=1, timeseries_interval_s=5.0)
    else:
        result = simulate(scenario, profile, seed=0, replications=1, fast=mode == "default")
    return _digest(_records_csv(result.runs)), _run_digest(result.runs)


EXPECTED: dict[tuple[str, str], tuple[str, str]] = {  # (scenario, mode): (records, run), at commit fb366b4
    ("azure-conv-replay", "default"): ("4d5a9250c8110bce", "3c324097e6e045b4"),
    ("azure-conv-replay", "reference"): ("4d5a9250c8110bce", "06939de363210a3f"),
    ("azure-conv-replay", "series"): ("4d5a9250c8110bce", "06939de363210a3f"),
    ("azure-conv-replay", "stream"): ("4d5a9250c8110bce", "3c324097e6e045b4"),
    ("closed-loop", "default"): ("1ba56174a0f08a3a", "a646da7e2a171a97"),
    ("closed-loop", "reference"): ("1ba56174a0f08a3a", "5e7edc1f5932504b"),
    ("closed-loop", "series"): ("1ba56174a0f08a3a", "5e7edc1f5932504b"),
    ("default", "default"): ("92fdba900d438b48", "84bb48daaf18a6a5"),
    ("default", "reference"): ("92fdba900d438b48", "84bb48daaf18a6a5"),
    ("default", "series"): ("92fdba900d438b48", "84bb48daaf18a6a5"),
    ("dialogue-medium", "default"): ("db34f5c25ba69ade", "88b3d7633ee8c77b"),
    ("dialogue-medium", "reference"): ("db34f5c25ba69ade", "88b3d7633ee8c77b"),
    ("dialogue-medium", "series"): ("db34f5c25ba69ade", "88b3d7633ee8c77b"),
    ("dialogue-medium", "stream"): ("db34f5c25ba69ade", "88b3d7633ee8c77b"),
    ("dialogue-medium-speculative", "default"): ("7d9a3b3cad8048f7", "accf38db1c5fd492"),
    ("dialogue-medium-speculative", "reference"): ("7d9a3b3cad8048f7", "accf38db1c5fd492"),
    ("dialogue-medium-speculative", "series"): ("7d9a3b3cad8048f7", "accf38db1c5fd492"),
    ("fixed-length-multi-gpu", "default"): ("82c00af66a424cb4", "b82c456be36445ff"),
    ("fixed-length-multi-gpu", "reference"): ("82c00af66a424cb4", "b82c456be36445ff"),
    ("fixed-length-multi-gpu", "series"): ("82c00af66a424cb4", "b82c456be36445ff"),
    ("fixed-length-multi-gpu", "stream"): ("82c00af66a424cb4", "b82c456be36445ff"),
    ("fixed-length-multi-gpu-sp", "default"): ("02a79a53e0a33368", "a4da1ee7d76a6f1e"),
    ("fixed-length-multi-gpu-sp", "reference"): ("5f8ea663279a26b3", "457e9c51e57e0bac"),
    ("fixed-length-multi-gpu-sp", "series"): ("5f8ea663279a26b3", "457e9c51e57e0bac"),
    ("fixed-length-multi-gpu-sp", "stream"): ("02a79a53e0a33368", "a4da1ee7d76a6f1e"),
    ("math-medium", "default"): ("b42ce31d18b217ec", "88b3d7633ee8c77b"),
    ("math-medium", "reference"): ("b42ce31d18b217ec", "88b3d7633ee8c77b"),
    ("math-medium", "series"): ("b42ce31d18b217ec", "88b3d7633ee8c77b"),
    ("math-medium", "stream"): ("b42ce31d18b217ec", "88b3d7633ee8c77b"),
    # moe-chat (added after the merge began): pinned at commit 77e72a4, where the loops' records were those above
    ("moe-chat", "default"): ("924f4c5a3a19978d", "fcd5d775b243a819"),
    ("moe-chat", "reference"): ("924f4c5a3a19978d", "fcd5d775b243a819"),
    ("moe-chat", "series"): ("924f4c5a3a19978d", "fcd5d775b243a819"),
    ("mooncake-long-context", "default"): ("a6973430ca2e1431", "f7e5281e76b591b7"),
    ("mooncake-long-context", "reference"): ("a6973430ca2e1431", "2d8f903fabd47455"),
    ("mooncake-long-context", "series"): ("a6973430ca2e1431", "2d8f903fabd47455"),
    ("mooncake-long-context", "stream"): ("a6973430ca2e1431", "f7e5281e76b591b7"),
    ("mooncake-prefix-replay", "default"): ("9f2039cb541feca7", "15a4a5c956fc31e9"),
    ("mooncake-prefix-replay", "reference"): ("9f2039cb541feca7", "15a4a5c956fc31e9"),
    ("mooncake-prefix-replay", "series"): ("9f2039cb541feca7", "15a4a5c956fc31e9"),
    ("quickstart", "default"): ("a7cb5b0bf09ffe16", "29795c1ac20ea58d"),
    ("quickstart", "reference"): ("a7cb5b0bf09ffe16", "f8b75d713e834535"),
    ("quickstart", "series"): ("a7cb5b0bf09ffe16", "f8b75d713e834535"),
    ("quickstart", "stream"): ("a7cb5b0bf09ffe16", "29795c1ac20ea58d"),
    ("quickstart-gpu", "default"): ("ac83a0a06df0b416", "38e9e5ed106890c0"),
    ("quickstart-gpu", "reference"): ("ac83a0a06df0b416", "38e9e5ed106890c0"),
    ("quickstart-gpu", "series"): ("ac83a0a06df0b416", "38e9e5ed106890c0"),
    ("summarization-very-long", "default"): ("51244b25499b419c", "1aed19487cce6c50"),
    ("summarization-very-long", "reference"): ("51244b25499b419c", "1aed19487cce6c50"),
    ("summarization-very-long", "series"): ("51244b25499b419c", "1aed19487cce6c50"),
    ("summarization-very-long", "stream"): ("51244b25499b419c", "1aed19487cce6c50"),
    ("summarization-very-long-tiered", "default"): ("b0fa312b3aa9c494", "a1db665ad6761156"),
    ("summarization-very-long-tiered", "reference"): ("b0fa312b3aa9c494", "a1db665ad6761156"),
    ("summarization-very-long-tiered", "series"): ("b0fa312b3aa9c494", "a1db665ad6761156"),
    ("validation/azure-conv-quarter", "default"): ("39599ee24cda3baa", "39c91b82e6840619"),
    ("validation/azure-conv-quarter", "reference"): ("39599ee24cda3baa", "3dfb8ac83e38496c"),
    ("validation/azure-conv-quarter", "series"): ("39599ee24cda3baa", "3dfb8ac83e38496c"),
    ("validation/azure-conv-quarter", "stream"): ("39599ee24cda3baa", "39c91b82e6840619"),
    ("validation/baseline-heavy", "default"): ("da5c9cc7fae61d9b", "44a5f91d045def99"),
    ("validation/baseline-heavy", "reference"): ("da5c9cc7fae61d9b", "003a42ea2cef9a9a"),
    ("validation/baseline-heavy", "series"): ("da5c9cc7fae61d9b", "003a42ea2cef9a9a"),
    ("validation/baseline-heavy", "stream"): ("da5c9cc7fae61d9b", "44a5f91d045def99"),
    ("validation/baseline-light", "default"): ("b8b7b91a5d350130", "d9665b6a2698fa47"),
    ("validation/baseline-light", "reference"): ("b8b7b91a5d350130", "853276fbf7d590c0"),
    ("validation/baseline-light", "series"): ("b8b7b91a5d350130", "853276fbf7d590c0"),
    ("validation/baseline-light", "stream"): ("b8b7b91a5d350130", "d9665b6a2698fa47"),
    ("validation/dynamic-window", "default"): ("e409af09ca7f552e", "d84cb22ce839f6df"),
    ("validation/dynamic-window", "reference"): ("e409af09ca7f552e", "d84cb22ce839f6df"),
    ("validation/dynamic-window", "series"): ("e409af09ca7f552e", "d84cb22ce839f6df"),
    ("validation/kv-int8", "default"): ("c720c5f129f9e3d5", "acebd090770923a7"),
    ("validation/kv-int8", "reference"): ("c720c5f129f9e3d5", "cfec93a0ea9ae971"),
    ("validation/kv-int8", "series"): ("c720c5f129f9e3d5", "cfec93a0ea9ae971"),
    ("validation/kv-int8", "stream"): ("c720c5f129f9e3d5", "acebd090770923a7"),
    ("validation/prefix-shared", "default"): ("c77930a0de788bfd", "960add2d60b22abf"),
    ("validation/prefix-shared", "reference"): ("c77930a0de788bfd", "960add2d60b22abf"),
    ("validation/prefix-shared", "series"): ("c77930a0de788bfd", "960add2d60b22abf"),
    ("validation/prefix-tiered", "default"): ("e978b3b9e041705a", "6ebffea3b869a10d"),
    ("validation/prefix-tiered", "reference"): ("e978b3b9e041705a", "6ebffea3b869a10d"),
    ("validation/prefix-tiered", "series"): ("e978b3b9e041705a", "6ebffea3b869a10d"),
    ("validation/seqpar-2", "default"): ("6e8531739653a673", "37d032cb63398b99"),
    ("validation/seqpar-2", "reference"): ("5da7207c24cf4cc5", "2358f0db8a3aed14"),
    ("validation/seqpar-2", "series"): ("5da7207c24cf4cc5", "2358f0db8a3aed14"),
    ("validation/seqpar-2", "stream"): ("6e8531739653a673", "37d032cb63398b99"),
    ("validation/speculative-code", "default"): ("be37a4a00785ca74", "668ff627b5df499e"),
    ("validation/speculative-code", "reference"): ("be37a4a00785ca74", "668ff627b5df499e"),
    ("validation/speculative-code", "series"): ("be37a4a00785ca74", "668ff627b5df499e"),
    ("validation/speculative-int8", "default"): ("b83daaadee565601", "1ee8c1064c39705f"),
    ("validation/speculative-int8", "reference"): ("b83daaadee565601", "1ee8c1064c39705f"),
    ("validation/speculative-int8", "series"): ("b83daaadee565601", "1ee8c1064c39705f"),
    ("validation/speculative-math", "default"): ("2a911e54f588c65d", "f6b21ea8433ae68a"),
    ("validation/speculative-math", "reference"): ("2a911e54f588c65d", "f6b21ea8433ae68a"),
    ("validation/speculative-math", "series"): ("2a911e54f588c65d", "f6b21ea8433ae68a"),
    ("validation/tiered-host-ssd", "default"): ("3f85f105fe17b78e", "b6e71b110057adae"),
    ("validation/tiered-host-ssd", "reference"): ("3f85f105fe17b78e", "b6e71b110057adae"),
    ("validation/tiered-host-ssd", "series"): ("3f85f105fe17b78e", "b6e71b110057adae"),
    ("very-long-single-gpu", "default"): ("442d46626ddfb6b3", "f7b2f6fc2f1a22f3"),
    ("very-long-single-gpu", "reference"): ("442d46626ddfb6b3", "f7b2f6fc2f1a22f3"),
    ("very-long-single-gpu", "series"): ("442d46626ddfb6b3", "f7b2f6fc2f1a22f3"),
    ("very-long-single-gpu", "stream"): ("442d46626ddfb6b3", "f7b2f6fc2f1a22f3"),
}


def _cases() -> list[object]:
    cases: list[object] = []
    for name, mode in EXPECTED:
        marks = [pytest.mark.slow] if name in SLOW and mode != "default" else []
        cases.append(pytest.param(name, mode, id=f"{name}-{mode}", marks=marks))
    return cases


def test_every_shipped_scenario_is_pinned() -> None:
    """A scenario added to data/scenarios must be pinned here too (run it, then add its digests)."""
    expected = {(name, mode) for name in SCENARIOS for mode in MODES if applies(name, mode)}
    assert expected == set(EXPECTED)


@pytest.mark.parametrize(("name", "mode"), _cases())
def test_records_are_bit_identical(name: str, mode: str) -> None:
    assert digests(name, mode) == EXPECTED[(name, mode)]
