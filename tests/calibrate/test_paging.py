"""The paging sweep through the tiered cache's real tiers: rows per (link, bytes), paging_v1 fits
whose cost grows with bytes, and a 2K-token figure consistent with the model's KV size."""

from __future__ import annotations

import pytest
import torch

from tripath.calibrate.samples import SampleLog, read_samples
from tripath.calibrate.sweeps.paging import LINKS, measure_paging, paging_sections
from tripath.calibrate.timer import TimerConfig
from tripath.engine.model.config import PRESETS

CONFIG = PRESETS["tiny-gqa"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    path = tmp_path_factory.mktemp("paging") / "x.samples.csv"
    with SampleLog.open(path, {"t": 1}) as log:
        measured = measure_paging(CONFIG, torch.float32, torch.device("cpu"), TimerConfig(warmup=1, reps=3), log,
                                  page_counts=(4, 16, 64), chunk_tokens=64, ssd_dir=str(path.parent))
    return path, measured


def test_rows_per_link_and_bytes(swept):
    path, measured = swept
    assert measured == len(LINKS) * 3
    samples = read_samples(path)
    # one page: [2, 64 tokens, 2 KV heads, 8 dims] fp32 = 2 * 64 * 2 * 8 * 4 = 8192 bytes
    assert sorted({s.x2 for s in samples}) == [4 * 8192, 16 * 8192, 64 * 8192]
    assert all(s.min_ms > 0 for s in samples)
    assert not list(path.parent.glob("tripath-paging-*"))  # the SSD tier's temp dir is gone


def test_fits_grow_with_bytes(swept):
    path, _ = swept
    links = paging_sections(read_samples(path), CONFIG.kv_bytes_per_token(4), "min", "test")
    assert set(links) == {*LINKS, "device_host", "host_ssd"}
    for name, link in links.items():
        small, big = link.cost.evaluate(bytes=4 * 8192), link.cost.evaluate(bytes=64 * 8192)
        assert big > small > 0, name
        assert link.cost.coefficients["bandwidth_gbps"].value > 0
        # the 2K-token figure is the bandwidth term for 2048 tokens of this model's KV (all layers)
        nbytes = 2048 * CONFIG.kv_bytes_per_token(4)
        assert link.ms_per_2k_tokens == pytest.approx(nbytes / (link.cost.coefficients["bandwidth_gbps"].value * 1e6))


def test_resume_measures_nothing_twice(swept):
    path, _ = swept
    before = path.read_text()
    with SampleLog.open(path, {"t": 1}) as log:
        assert measure_paging(CONFIG, torch.float32, torch.device("cpu"), TimerConfig(warmup=1, reps=3), log,
                              page_counts=(4, 16, 64), chunk_tokens=64, ssd_dir=str(path.parent)) == 0
    assert path.read_text() == before


def test_chunk_sizes_add_rows_and_per_chunk_fits(swept):
    """A second page size (16 tokens) lands in its own rows; each link gains a fit per chunk size while its main
    fit (pages of 64 tokens) stays what the 64-token rows alone give."""
    path, _ = swept
    main_only = paging_sections(read_samples(path), CONFIG.kv_bytes_per_token(4), "min", "test", main_chunk=64)
    kw = dict(page_counts=(4, 16, 64), chunk_tokens=64, ssd_dir=str(path.parent), more_chunks=(16, 64))
    with SampleLog.open(path, {"t": 1}) as log:
        assert measure_paging(CONFIG, torch.float32, torch.device("cpu"), TimerConfig(warmup=1, reps=3), log,
                              **kw) == len(LINKS) * 3  # 64 is on disk already: only the 16-token pages
    samples = read_samples(path)
    # one 16-token page: 2 * 16 * 2 * 8 * 4 = 2048 bytes
    assert sorted({s.x2 for s in samples if s.sweep == "paging_c16"}) == [4 * 2048, 16 * 2048, 64 * 2048]
    links = paging_sections(samples, CONFIG.kv_bytes_per_token(4), "min", "test", main_chunk=64)
    for name, link in links.items():
        assert sorted(link.by_chunk_tokens) == [16, 64], name
        assert link.cost == main_only[name].cost  # the main fit is untouched by other chunk sizes
        assert link.by_chunk_tokens[64].values() == link.cost.values()
        assert link.cost_for(16) is link.by_chunk_tokens[16] and link.cost_for(None) is link.cost
        assert link.by_chunk_tokens[16].domain["bytes"] == (4 * 2048.0, 64 * 2048.0)
    with SampleLog.open(path, {"t": 1}) as log:
        assert measure_paging(CONFIG, torch.float32, torch.device("cpu"), TimerConfig(warmup=1, reps=3), log,
                              **kw) == 0


def test_per_chunk_fits_recover_a_per_page_setup_by_hand():
    """Synthetic transfers: N pages cost N x (s + page_bytes / B) with s = 0.01 ms and B = 20 GB/s. Within a chunk
    size the fit sees a line through 0 whose slope is 1 / B_eff, B_eff = page_bytes / (s + page_bytes / B) (hand
    formula); small pages get the lower effective bandwidth, and the main fit is the 256-token chunk's."""
    from tripath.calibrate.samples import Sample

    s_ms, bw = 0.01, 20.0
    samples = []
    for chunk, sweep in ((64, "paging_c64"), (256, "paging"), (1024, "paging_c1024")):
        page = chunk * 512  # bytes of one page of a model with 512 KV bytes per token and layer
        for link in range(len(LINKS)):
            for pages in (1, 2, 4, 8, 16):
                ms = pages * (s_ms + page / (bw * 1e6))
                samples.append(Sample(sweep, 0, link, pages * page, ms, ms, ms, 3))
    links = paging_sections(samples, 512 * 6, "min", "synthetic")
    for name, link in links.items():
        for chunk, model in link.by_chunk_tokens.items():
            page = chunk * 512
            expected = page / (s_ms + page / (bw * 1e6)) / 1e6  # GB/s
            assert model.values()["bandwidth_gbps"] == pytest.approx(expected, rel=1e-3), (name, chunk)
            assert model.values()["setup_ms"] == pytest.approx(0.0, abs=1e-4)  # vs 0.01 ms per page
        effective = [link.by_chunk_tokens[c].values()["bandwidth_gbps"] for c in (64, 256, 1024)]
        assert effective == sorted(effective) and effective[-1] < bw
        assert link.cost.values() == link.by_chunk_tokens[256].values()
