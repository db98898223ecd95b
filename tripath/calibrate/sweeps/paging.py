"""Paging sweep: the tiered KV cache's real tiers move N pages over each link; paging_v1 fitted per link.

A page is what ``tripath.engine.tiered.cache`` moves: one layer's K and V for ``chunk_tokens`` tokens,
[2, chunk_tokens, kv_heads, head_dim] in the model's dtype. A transfer of N pages is timed as the
cache performs it, page by page: a tensor copy between the device pool and the host tier
(``device->host``, ``host->device``; on a CPU both are RAM), ``SSDTier.write`` / ``SSDTier.read``
(file per page with an XXH3 header, in a temp directory: ``host->ssd``, ``ssd->host``), over pools
larger than the CPU's caches so each page moves cold, as in the engine (``_transfer``).

Rows in the calibration's samples CSV: sweep ``paging`` (pages of the main chunk size, 256 tokens
unless told) or ``paging_c{C}`` (pages of C tokens, the chunk-size sweep), layers 0, x1 = the link's
index in ``LINKS``, x2 = bytes moved; times in ms (median / min / max of the repetitions).

Profile keys: the four directions, plus the simulator's two link names (``device_host``,
``host_ssd``; tripath/profile/schema.py) fitted to both directions' samples together, and
``gather`` (the tiered Engine's per-step read over the paged Engine's, tripath/calibrate/sweeps/gather.py)
and ``miss_host`` / ``miss_ssd`` / ``miss_direct`` (its steps that miss pages over the same steps all
resident, tripath/calibrate/sweeps/tier_miss.py) where the sweep was given the model. Each
link's ``cost`` is fitted to the main chunk size; with more than one chunk size measured,
``by_chunk_tokens`` holds paging_v1 fitted per chunk size. At one chunk size the bytes of N pages
are N x page bytes, so a per-page setup cost cannot be told from bandwidth: it shows as a lower
effective bandwidth for small pages, and the chunk-size sweep is what exposes it.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch

from tripath.calibrate.fit import fit_formula
from tripath.calibrate.samples import Sample, SampleLog
from tripath.calibrate.sweeps.gather import GATHER, gather_link, measure_gather
from tripath.calibrate.sweeps.tier_miss import measure_misses, miss_links
from tripath.calibrate.timer import TimerConfig
from tripath.engine.model.config import ModelConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.tier_config import TierConfig
from tripath.engine.tiered.tiers import Tiers
from tripath.profile.profile import Coefficient, CostModel, PagingLink

LINKS = ("device->host", "host->device", "host->ssd", "ssd->host")
SIMULATOR_LINKS = {"device_host": ("device->host", "host->device"), "host_ssd": ("host->ssd", "ssd->host")}
PAGE_COUNTS = (1, 2, 4, 8, 16)
CHUNK_TOKENS = 256  # the tiered cache's default page (TierConfig.chunk_tokens)
TOKENS_2K = 2048
COLD_BYTES = 64 * 2**20  # pools of at least this many bytes per tier: larger than a CPU's last-level cache


def _transfer(tiers: Tiers, link: str, pages: int) -> Callable[[], None]:
    """A closure that moves ``pages`` pages over ``link`` once, page by page as the cache does. Each call
    moves the next ``pages`` slots of pools larger than the CPU's caches (``COLD_BYTES``), so a page is cold
    when it moves, as in the engine, where a page is touched once per step between the model's weights and
    activations; the same few pages copied again and again run from the cache at several times the speed
    (docs/tiered_kv.md)."""
    dev, host, ssd = tiers.device_pool.data, tiers.host_pool.data, tiers.ssd
    pool = min(tiers.device_pool.capacity, tiers.host_pool.capacity)
    sync = (lambda: torch.cuda.synchronize(tiers.device)) if tiers.device.type == "cuda" else (lambda: None)
    ids = [ssd.write(host[i]) for i in range(pool)] if link == "ssd->host" else []
    turn = [0]

    def run() -> None:
        first = turn[0] * pages % max(1, pool - pages + 1)
        turn[0] += 1
        slots = range(first, first + pages)
        if link == "device->host":
            for i in slots:
                host[i].copy_(dev[i])
            sync()
        elif link == "host->device":
            for i in slots:
                dev[i].copy_(host[i])
            sync()
        elif link == "host->ssd":
            written = [ssd.write(host[i]) for i in slots]
            for page_id in written:  # slots are reused: the next repetition overwrites the same files
                ssd.delete(page_id)
        else:
            for i in slots:
                host[i].copy_(ssd.read(ids[i]))

    return run


def sweep_name(chunk_tokens: int, main_chunk: int = CHUNK_TOKENS) -> str:
    """The samples-CSV sweep of transfers in pages of ``chunk_tokens`` tokens."""
    return "paging" if chunk_tokens == main_chunk else f"paging_c{chunk_tokens}"


def measure_paging(config: ModelConfig, dtype: torch.dtype, device: torch.device, timer: TimerConfig,
                   log: SampleLog, page_counts: tuple[int, ...] = PAGE_COUNTS, chunk_tokens: int = CHUNK_TOKENS,
                   ssd_dir: str | None = None, more_chunks: tuple[int, ...] = (),
                   model: LlamaModel | None = None) -> int:
    """Time every (chunk size, link, page count) not yet on disk; returns the points measured.

    ``chunk_tokens``: the main page size (rows ``paging``); ``more_chunks``: further page sizes (rows
    ``paging_c{C}``), each moved in the same page counts. With ``model`` (the target), also the tiered
    Engine's decode step against the paged one's per page size (tripath/calibrate/sweeps/gather.py)."""
    measured = 0
    if model is not None:
        measured += measure_gather(model, timer, log, chunk_tokens, more_chunks=more_chunks)
        measured += measure_misses(model, timer, log, chunk_tokens, ssd_dir=ssd_dir)
    for chunk in dict.fromkeys((chunk_tokens, *more_chunks)):
        measured += _measure_chunk(config, dtype, device, timer, log, page_counts, chunk,
                                   sweep_name(chunk, chunk_tokens), ssd_dir)
    return measured


def _measure_chunk(config: ModelConfig, dtype: torch.dtype, device: torch.device, timer: TimerConfig,
                   log: SampleLog, page_counts: tuple[int, ...], chunk_tokens: int, sweep: str,
                   ssd_dir: str | None) -> int:
    page_shape = (2, chunk_tokens, config.num_kv_heads, int(config.head_dim))  # [K/V, tokens, kv heads, dim]
    most = max(page_counts)
    # pages per tier: enough that no repetition reuses a slot (each moves pages untouched since set-up), up to
    # COLD_BYTES; _transfer rotates through them
    pool = max(most, min(-(-COLD_BYTES // _page_bytes(page_shape, dtype)), (timer.warmup + timer.reps) * most))
    measured = 0
    if all((sweep, 0, i, pages * _page_bytes(page_shape, dtype)) in log.done
           for i in range(len(LINKS)) for pages in page_counts):
        return 0  # resume: no tiers (and no SSD temp dir) for a chunk size already on disk
    with tempfile.TemporaryDirectory(prefix="tripath-paging-", dir=ssd_dir) as parent:
        tiers = Tiers(TierConfig(chunk_tokens, device_pages=pool, host_pages=pool, ssd_pages=2 * pool,
                                 ssd_dir=parent), page_shape, dtype, device)
        try:
            tiers.host_pool.data.normal_(generator=torch.Generator().manual_seed(0))  # nonzero payloads
            for index, link in enumerate(LINKS):
                for pages in page_counts:
                    nbytes = pages * tiers.page_bytes
                    if (sweep, 0, index, nbytes) in log.done:
                        continue
                    run = _transfer(tiers, link, pages)
                    for _ in range(timer.warmup):
                        run()
                    ms = []
                    for _ in range(timer.reps):
                        start = time.perf_counter()
                        run()
                        ms.append((time.perf_counter() - start) * 1e3)
                    if link == "ssd->host":
                        for page_id in list(tiers.ssd.live):
                            tiers.ssd.delete(page_id)
                    log.append(Sample.of(sweep, 0, index, nbytes, ms))
                    measured += 1
        finally:
            tiers.close()
    return measured


def _page_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def _fit_link(sel: list[Sample], links: tuple[str, ...], statistic: str, what: str) -> CostModel:
    x = np.array([s.x2 for s in sel], dtype=float)
    y = np.array([s.median_ms if statistic == "median" else s.min_ms for s in sel], dtype=float)
    data = f"{len(sel)} transfers of {', '.join(links)} ({statistic}_ms): {what}"
    result = fit_formula("paging_v1", {"bytes": x}, y, data=data)
    coefficients = {
        "setup_ms": Coefficient(result.coefficients["setup_ms"], "ms", "fitted", "intercept: fixed cost of "
                                "one transfer"),
        "bandwidth_gbps": Coefficient(result.coefficients["bandwidth_gbps"], "GB/s", "fitted",
                                      "inverse slope: bytes moved per second, page by page"),
    }
    return CostModel("paging_v1", coefficients, ("bytes",), {"bytes": (float(x.min()), float(x.max()))},
                     result.quality, f"{' and '.join(links)} through tripath.engine.tiered.tiers, page by page. {what}")


def _chunk_of(sweep: str, main_chunk: int) -> int | None:
    if sweep == "paging":
        return main_chunk
    return int(sweep.removeprefix("paging_c")) if sweep.startswith("paging_c") else None


def paging_sections(samples: list[Sample], kv_bytes_per_token: int, statistic: str, what: str,
                    main_chunk: int = CHUNK_TOKENS) -> dict[str, PagingLink]:
    """paging_v1 per direction and per simulator link, fitted to the ``paging`` rows (pages of ``main_chunk``
    tokens); per chunk size too (``by_chunk_tokens``) when the ``paging_c{C}`` rows hold other sizes."""
    by_chunk: dict[int, list[Sample]] = {}
    for s in samples:
        chunk = _chunk_of(s.sweep, main_chunk)
        if chunk is not None:
            by_chunk.setdefault(chunk, []).append(s)
    rows = by_chunk.get(main_chunk, [])
    out: dict[str, PagingLink] = {}
    groups = {link: (link,) for link in LINKS} | SIMULATOR_LINKS
    for name, links in groups.items():
        sel = [s for s in rows if LINKS[s.x1] in links]
        if len(sel) < 2:
            continue
        model = _fit_link(sel, links, statistic, f"pages of {main_chunk} tokens; {what}")
        per_chunk = {}
        if len(by_chunk) > 1:
            for chunk, chunk_rows in sorted(by_chunk.items()):
                chosen = [s for s in chunk_rows if LINKS[s.x1] in links]
                if len(chosen) >= 2:
                    per_chunk[chunk] = _fit_link(chosen, links, statistic, f"pages of {chunk} tokens; {what}")
        bandwidth = model.evaluate(bytes=TOKENS_2K * kv_bytes_per_token) - model.evaluate(bytes=0.0)
        out[name] = PagingLink(model, bandwidth, per_chunk)
    gather = gather_link(samples, kv_bytes_per_token, what, main_chunk)
    if gather is not None:  # only where the sweep timed the Engine (measure_paging's model)
        out[GATHER] = gather
    out.update(miss_links(samples, kv_bytes_per_token, main_chunk, what))  # likewise (tier_miss.py)
    return out
