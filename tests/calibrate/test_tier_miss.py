"""Measured page misses (tripath/simulator/paths/tiered_engine_rule.py rule 5,
tripath/calibrate/sweeps/tier_miss.py): the cost the
rule charges for a step with N misses, by hand per link set, and the sweep on the tiny model (its miss counts
are the Engine's own and equal the rule's prediction)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY, tiny_paging_link
from tests.helpers import TINY_PAGE_BYTES as PAGE
from tripath.calibrate.samples import Sample, SampleLog
from tripath.calibrate.sweeps.tier_miss import measure_misses, miss_links, sweep_name
from tripath.calibrate.timer import TimerConfig
from tripath.core.data_dirs import MODELS_DIR
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.simulator.paths.tiered_engine_rule import EngineTierRule

MODEL = MODELS_DIR / "tiny-target"


DH, HS = tiny_paging_link(0.01, 1.0), tiny_paging_link(0.02, 0.5)
MISSES = {"miss_host": tiny_paging_link(1.0, 0.5), "miss_ssd": tiny_paging_link(2.0, 0.25),
          "miss_direct": tiny_paging_link(1.5, 0.4)}


def _rule(host_pages: int, measured: bool = True) -> EngineTierRule:
    paging = {"device_host": DH, "host_ssd": HS} | (MISSES if measured else {})
    profile = dataclasses.replace(TINY, paging=paging)
    return EngineTierRule(profile.paging, 256, 6, 3072, device_pages=24, host_pages=host_pages, sink_tokens=4,
                          window_tokens=256)


def test_step_with_n_misses_by_hand() -> None:
    """One sequence of 1,100 tokens on a 24-page device pool: 5 chunks per layer (30 pages > 24), chunks 0
    (sink), 3 and 4 (window) pinned, so 2 x 6 = 12 misses, 1,572,864 bytes; 6 pages off the device.
    host 24 pages (6 < 24): device<->host only, miss_host = 1.0 + 1,572,864 / 0.5e6 = 4.145728 ms;
    host 6 pages (6 >= 6, full): all four links, miss_ssd = 2.0 + 1,572,864 / 0.25e6 = 8.291456 ms;
    no host: miss_direct = 1.5 + 1,572,864 / 0.4e6 = 5.43216 ms. Two sequences of 1,100: 24 misses."""
    for host, want in ((24, 4.145728), (6, 8.291456), (0, 5.43216)):
        _, move_ms, moved = _rule(host).step_ms([1100], [1100])
        assert move_ms == pytest.approx(want, rel=1e-12)
    assert _rule(24).misses([1100, 1100], [1100, 1100]) == (24, 36)
    # 36 pages off the device >= 24 host pages: all four links, 24 misses = 3,145,728 bytes
    assert _rule(24).step_ms([1100, 1100], [1100, 1100])[1] == pytest.approx(2.0 + 3_145_728 / 0.25e6, rel=1e-12)


def test_no_miss_no_setup_and_link_copies_without_the_sweep() -> None:
    """A step that fits moves nothing and pays no per-step setup; a profile without miss_* keeps rule 4's
    per-page link copies: 12 pages each way over device<->host = 24 x (0.01 + 131,072 / 1e6) ms."""
    assert _rule(24).step_ms([1000], [1000])[1] == 0.0
    assert _rule(24, measured=False).step_ms([1100], [1100])[1] == pytest.approx(24 * (0.01 + PAGE / 1e6))


def test_miss_links_fit_the_wall_rows() -> None:
    """Rows on an exact line (1 ms + bytes / 0.5 GB/s) give that line back; thread-CPU rows are not fitted."""
    rows = [Sample(sweep_name("host", 256), 0, m, m * PAGE, 1.0 + m * PAGE / 0.5e6, 0.0, 0.0, 9) for m in (12, 18, 24)]
    rows += [Sample(sweep_name("host", 256, cpu=True), 0, m, m * PAGE, 0.1 * m, 0.0, 0.0, 9) for m in (12, 18, 24)]
    links = miss_links(rows, 3072, 256, "test")
    assert set(links) == {"miss_host"}
    cost = links["miss_host"].cost
    assert cost.coefficients["setup_ms"].value == pytest.approx(1.0, rel=1e-4)
    assert cost.coefficients["bandwidth_gbps"].value == pytest.approx(0.5, rel=1e-4)


def test_sweep_on_the_tiny_model_counts_the_rules_misses(tmp_path: Path) -> None:
    """The Engine's own miss counts per step equal the rule's: batch 1 at 1,100 tokens misses 2 unpinned chunks
    x 6 layers = 12 pages a step, crossing each link set; the rows are written once (resume)."""
    torch.set_num_threads(1)
    model = load_checkpoint(str(MODEL))[1]
    log = SampleLog.open(tmp_path / "s.csv", {"test": 1})
    try:
        written = measure_misses(model, TimerConfig(warmup=0, reps=1), log, 256, points=((1, 1100),),
                                 ssd_dir=str(tmp_path))
        assert written == 6
        assert measure_misses(model, TimerConfig(warmup=0, reps=1), log, 256, points=((1, 1100),)) == 0
    finally:
        log.close()
    for kind in ("host", "ssd", "direct"):
        (row,) = [s for s in log.samples if s.sweep == sweep_name(kind, 256)]
        assert (row.x1, row.x2, row.reps) == (12, 12 * PAGE, 4)
    assert _rule(24).misses([1101], [1101])[0] == 12
