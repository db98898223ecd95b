"""Measured paging cost of the tiered KV cache, and this machine's plain copy / file bandwidth beside it.

For one context length: a sequence is prefilled, then decoded for a few steps twice, once with every
page on the device (tiering off: same code path, no transfers) and once with a device pool that
holds only the pinned pages plus one layer's context and a host tier that holds half of the rest,
so every step moves pages over both links.  Per link it reports pages, bytes, seconds, ms per 2K
tokens of KV moved, and achieved GB/s; the plain figures are one torch copy and one file write /
read of the same total bytes, timed in the same run.  The hidden share is the part of the paging
time the main thread did not wait for (it ran on the prefetch thread while layers computed):
1 - (main-thread time in the cache, tiered - untiered) / paging time.  It is measured from the
cache's own clock rather than from whole-step times, which other jobs on a shared CPU blur.

Every transfer and every plain reference is timed on two clocks: wall time, and the CPU time of the
thread doing it (user + system, which covers memcpy and page-cache file I/O on a CPU).  On a CPU
shared with other jobs the wall clock also counts time the thread waited for a core, so the CPU-time
ratio is the steadier comparison of the same work; on CUDA, or when reads come from the disk itself
(drop_page_cache), waits are real cost and only the wall clock counts.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import torch

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.config import ModelConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.tier_config import TierConfig

LINKS = ("device->host", "host->device", "host->ssd", "ssd->host")


@dataclass(frozen=True)
class LinkPoint:
    context: int
    link: str
    pages: int
    bytes: int
    seconds: float
    ms_per_2k_tokens: float  # seconds per token of KV moved over this link x 2048 (all layers of a token)
    gb_per_s: float
    plain_gb_per_s: float  # the same bytes in one plain copy / file write / file read
    cpu_gb_per_s: float = float("nan")  # bytes per second of the transferring thread's CPU time
    plain_cpu_gb_per_s: float = float("nan")  # the plain transfer's, on the same clock


@dataclass(frozen=True)
class StepPoint:
    context: int
    kv_mib: float
    step_ms_untiered: float  # median decode step, every page on the device
    step_ms_tiered: float
    paging_ms_per_step: float  # all links, measured inside the transfers
    stall_ms_untiered: float  # per step, main-thread time in the cache (append + gather), all on device
    stall_ms_tiered: float  # the same with paging: synchronous transfers and waits for prefetches
    hidden_share: float  # 1 - (extra main-thread cache time) / (paging time), clipped to [0, 1]
    residency: str  # pages per tier after prefill


def _best_seconds(fn: object, repeats: int) -> tuple[float, float]:
    """The fastest of `repeats` runs on each clock: (wall seconds, this thread's CPU seconds)."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn()  # type: ignore[operator]
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.thread_time() - start_cpu)
    return wall, cpu


def _rates(nbytes: int, seconds: tuple[float, float]) -> tuple[float, float]:
    return tuple(nbytes / s / 1e9 if s > 0 else float("nan") for s in seconds)  # type: ignore[return-value]


def plain_copy_gbps(nbytes: int, device: torch.device, repeats: int = 3) -> dict[str, tuple[float, float]]:
    """One tensor copy of nbytes each way between the device pool's memory and (pinned) host memory:
    (wall GB/s, CPU-time GB/s) per link."""
    pin = device.type == "cuda"
    host = torch.ones(nbytes // 4, dtype=torch.float32, pin_memory=pin)
    dev = torch.empty_like(host, device=device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    h2d = _best_seconds(lambda: (dev.copy_(host), sync()), repeats)
    d2h = _best_seconds(lambda: (host.copy_(dev), sync()), repeats)
    return {"host->device": _rates(nbytes, h2d), "device->host": _rates(nbytes, d2h)}


def plain_file_gbps(nbytes: int, directory: str | None, repeats: int = 3) -> dict[str, tuple[float, float]]:
    """One file write (flushed, like an SSD page) and one read of nbytes in a temp file:
    (wall GB/s, CPU-time GB/s) per link."""
    payload = os.urandom(1 << 20) * max(1, nbytes >> 20)
    fd, path = tempfile.mkstemp(prefix="tripath-plain-", dir=directory)
    os.close(fd)
    try:
        def write() -> None:
            with open(path, "wb") as f:
                f.write(payload)
                f.flush()

        def read() -> None:
            with open(path, "rb") as f:
                f.read()

        w = _best_seconds(write, repeats)
        r = _best_seconds(read, repeats)
    finally:
        os.unlink(path)
    return {"host->ssd": _rates(len(payload), w), "ssd->host": _rates(len(payload), r)}


def _decode_ms(model: LlamaModel, prompt: list[int], tiers: TierConfig, steps: int, sinks: int, window: int,
               prefetch: bool) -> tuple[list[float], dict[str, tuple[int, int, float, float]], str, float]:
    """Per-step wall ms of `steps` decodes after the prefill, the links' (pages, bytes, wall s, CPU s) over
    them, the residency after prefill, and the main thread's ms per step inside the cache."""
    tiers = TierConfig(**{**tiers.__dict__, "sink_tokens": sinks, "window_tokens": window, "prefetch": prefetch})
    config = EngineConfig(max_batch_size=1, max_batched_tokens=len(prompt), block_size=tiers.chunk_tokens,
                          num_blocks=1, fuse_projections=False, tiered=tiers)
    with Engine(model, config) as eng:
        cache = eng.backend.cache
        rid = eng.add_request(prompt, steps + 3)
        eng.step()  # prefill, not timed
        eng.step()  # two warm-up decodes: first-touch allocations, thread start-up
        eng.step()
        res = cache.residency()
        before = {k: (v.pages, v.bytes, v.seconds) for k, v in cache.tiers.stats.links.items()}
        stall0 = cache.stall_s
        times, per_step = [], {link: [] for link in LINKS}
        cpu_per_step: dict[str, list[float]] = {link: [] for link in LINKS}
        for _ in range(steps):
            start = time.perf_counter()
            seconds = {link: cache.tiers.stats.get(link).seconds for link in LINKS}
            cpu = {link: cache.tiers.stats.get(link).cpu_seconds for link in LINKS}
            eng.step()
            times.append((time.perf_counter() - start) * 1e3)
            for link in LINKS:
                per_step[link].append(cache.tiers.stats.get(link).seconds - seconds[link])
                cpu_per_step[link].append(cache.tiers.stats.get(link).cpu_seconds - cpu[link])
        after = cache.tiers.stats.links
        stall_ms = (cache.stall_s - stall0) * 1e3 / steps
        if rid in eng.errors:  # a fault would leave the timings meaningless
            raise RuntimeError(f"paging measurement at {len(prompt)} tokens failed: {eng.errors[rid]}")
        delta = {}
        for link in LINKS:
            p0, b0, s0 = before.get(link, (0, 0, 0.0))
            now = after.get(link)
            # seconds: the median step's time x steps, so one step stalled by another job does not dominate
            median = sorted(per_step[link])[steps // 2]
            cpu_median = sorted(cpu_per_step[link])[steps // 2]
            delta[link] = ((0, 0, 0.0, 0.0) if now is None
                           else (now.pages - p0, now.bytes - b0, median * steps, cpu_median * steps))
    return times, delta, f"{res['device']}/{res['host']}/{res['ssd']}", stall_ms


def measure_paging(config: ModelConfig, context: int, chunk_tokens: int = 256, steps: int = 4, sinks: int = 4,
                   window: int = 256, prefetch: bool = True, ssd_dir: str | None = None,
                   seed: int = 0) -> tuple[StepPoint, list[LinkPoint]]:
    """Paging cost of decoding after `context` tokens of a random-weight model of this shape (fp32)."""
    model = LlamaModel(config, torch.Generator().manual_seed(seed)).eval()
    device = next(model.parameters()).device
    prompt = torch.randint(0, config.vocab_size, (context,), generator=torch.Generator().manual_seed(seed + 1))
    chunks = -(-(context + steps + 2) // chunk_tokens)  # the KV of prompt + (steps + 3) outputs - 1
    pinned = -(-sinks // chunk_tokens) + -(-window // chunk_tokens) + 1  # per layer
    total_pages = chunks * config.num_layers
    roomy = TierConfig(chunk_tokens, device_pages=total_pages + 1, host_pages=0, ssd_pages=0, ssd_dir=ssd_dir)
    device_pages = pinned * config.num_layers + chunks + 1
    spill = max(total_pages - device_pages, 2)
    tight = TierConfig(chunk_tokens, device_pages=device_pages, host_pages=spill // 2,
                       ssd_pages=spill + config.num_layers * 4, ssd_dir=ssd_dir)
    ids = prompt.tolist()
    off, _, _, stall_off = _decode_ms(model, ids, roomy, steps, sinks, window, prefetch)
    on, links, res, stall_on = _decode_ms(model, ids, tight, steps, sinks, window, prefetch)
    kv_token_bytes = config.kv_bytes_per_token(4)
    page_bytes = kv_token_bytes // config.num_layers * chunk_tokens
    moved = sum(link[1] for link in links.values())
    plain = {**plain_copy_gbps(max(moved // 4, page_bytes), device),
             **plain_file_gbps(max(moved // 4, page_bytes), ssd_dir)}
    points = []
    for link, (pages, nbytes, seconds, cpu_seconds) in links.items():
        tokens = nbytes / kv_token_bytes
        per_2k = seconds * 1e3 / tokens * 2048 if tokens else float("nan")
        gbps, cpu_gbps = _rates(nbytes, (seconds, cpu_seconds))
        points.append(LinkPoint(context, link, pages, nbytes, seconds, per_2k, gbps, plain[link][0], cpu_gbps,
                                plain[link][1]))
    paging_ms = sum(link[2] for link in links.values()) * 1e3 / steps
    off_ms, on_ms = sorted(off)[len(off) // 2], sorted(on)[len(on) // 2]
    # the main thread's extra time in the cache is the paging it waited for; the rest ran behind compute
    hidden = 1.0 - (stall_on - stall_off) / paging_ms if paging_ms > 0 else float("nan")
    step = StepPoint(context, context * kv_token_bytes / 2**20, off_ms, on_ms, paging_ms, stall_off, stall_on,
                     min(1.0, max(0.0, hidden)), res)
    return step, points
