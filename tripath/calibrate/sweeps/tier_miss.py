"""Miss sweep: what a tiered Engine decode step that misses pages costs over the same step with every page resident.

Once a step's pages exceed the device pool, the engine's LRU misses every unpinned page the step reads
(tripath/simulator/paths/tiered_engine_rule.py, rule 2): each miss evicts a page and pages one in, on the main thread
or on the
fetch-ahead thread the main thread then waits for, through host RAM or SSD files. The link sweep
(paging.py) times bare copies; this sweep times the Engine doing it. Two tiered Engines serve the same
requests with the same page size: one whose device pool holds every page (the reference: its extra over the
paged Engine is ``paging.gather``, gather.py) and one whose pool is the admission minimum (TieredStore
.device_pages_needed), so every step misses a known number of pages. Decode steps are interleaved (one each:
the same contention) and the miss count of every step is read from the Engine's own StepRecord (pages paged
in), not predicted.

Three host configurations, one per set of links a miss crosses (the rule's rule 3):
``host`` (host holds every page off the device: device->host + host->device), ``ssd`` (a host of a few pages,
full: all four links), ``direct`` (no host: the device evicts to SSD).

Clock: wall time (perf_counter). With fetch-ahead on (the Engine's default) the main thread waits for the
background thread's copies and file I/O, time the serving thread's CPU clock does not see; the sweep records
both (rows ``..._cpu``) so the gap shows. The statistic is the median of the paired differences: each pair
ran back to back, so contention from other processes largely cancels within a pair.

Rows: sweep ``tier_miss_{kind}_c{C}`` (wall) and ``tier_miss_{kind}_cpu_c{C}`` (thread CPU), layers 0,
x1 = pages missed per step (exact, from the StepRecords), x2 = their bytes (x1 x page bytes); median, min and
max of the paired step differences in ms. ``miss_links`` fits paging_v1 to the wall rows per kind against x2
(setup_ms: fixed cost of a step that misses; bandwidth: per byte missed) -> profile keys ``paging.miss_{kind}``,
which the engine rule charges instead of the link sweep's per-page copies.
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np
import torch

from tripath.calibrate.fit import FitRefused, fit_formula
from tripath.calibrate.samples import Sample, SampleLog
from tripath.calibrate.timer import TimerConfig
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.tiered.tier_config import TierConfig
from tripath.profile.profile import Coefficient, CostModel, PagingLink
from tripath.profile.sections import MISS_KINDS as KINDS
from tripath.profile.sections import miss_key

PREFIX = "tier_miss"
POINTS = ((1, 1100), (2, 1100), (1, 1300), (2, 1300))  # (batch, prompt): 2 or 3 unpinned chunks per layer at 256
REPS_FACTOR = 4  # steps of 5-20 ms; the difference is several ms, so fewer pairs than the gather sweep's
BLOCK_SIZE = 16


def sweep_name(kind: str, chunk: int, cpu: bool = False) -> str:
    return f"{PREFIX}_{kind}{'_cpu' if cpu else ''}_c{chunk}"


def measure_misses(model: LlamaModel, timer: TimerConfig, log: SampleLog, chunk_tokens: int,
                   points: tuple[tuple[int, int], ...] = POINTS, ssd_dir: str | None = None) -> int:
    """Time interleaved decode steps of a missing and an all-resident tiered Engine per (kind, point) not yet on
    disk; returns the rows written."""
    config = model.config
    steps = timer.warmup + timer.reps * REPS_FACTOR
    per_layer_token = 2 * config.num_kv_heads * int(config.head_dim) * next(model.parameters()).element_size()
    page_bytes = chunk_tokens * per_layer_token
    measured = 0
    for kind in KINDS:
        names = (sweep_name(kind, chunk_tokens), sweep_name(kind, chunk_tokens, True))
        if any(row[0] in names for row in log.done):
            continue  # resume: a kind is measured whole (its points' miss counts are known only once run)
        for batch, prompt in points:
            prompt = min(prompt, config.max_position_embeddings - steps - 2)
            wall, cpu, misses = _interleaved(model, batch, prompt, steps, chunk_tokens, kind, ssd_dir)
            wall, cpu, misses = wall[timer.warmup:], cpu[timer.warmup:], misses[timer.warmup:]
            if not misses or statistics.median(misses) <= 0:
                continue  # nothing missed: the point does not measure a miss (pool too large for it)
            x1 = round(statistics.median(misses))
            for name, ms in zip(names, (wall, cpu), strict=True):
                if (name, 0, x1, x1 * page_bytes) in log.done:
                    continue  # two points with the same miss count: the first stands
                log.append(Sample.of(name, 0, x1, x1 * page_bytes, ms))
                measured += 1
    return measured


def _pools(model: LlamaModel, batch: int, prompt: int, steps: int, chunk: int, kind: str,
           ssd_dir: str | None = None) -> TierConfig:
    """A device pool at the admission minimum (so every step misses) and a host sized for ``kind``."""
    layers = model.config.num_layers
    chunks = -(-(prompt + steps + 1) // chunk)  # per sequence and layer, at the longest length
    total = batch * chunks * layers
    defaults = TierConfig(chunk)  # the Engine's sink and window (the validation's scenarios keep them)
    # TieredStore.device_pages_needed at the longest length, plus one spare page
    pinned = min(chunks, -(-defaults.sink_tokens // chunk) + -(-defaults.window_tokens // chunk) + 1)
    device = batch * pinned * layers + (chunks - pinned) + 1
    off = total - device  # pages off the device once every sequence is at its longest
    # host: room for twice what is off (never full), a quarter of it (full: every miss goes on to SSD), none
    host = {"host": 2 * off + layers, "ssd": max(1, off // 4), "direct": 0}[kind]
    return TierConfig(chunk, device_pages=device, host_pages=host, ssd_pages=4 * total, ssd_dir=ssd_dir)


def _engine(model: LlamaModel, batch: int, prompt: int, steps: int, tiers: TierConfig) -> Engine:
    tokens = batch * (prompt + steps + 1)
    engine = Engine(model, EngineConfig(batch, 2048, BLOCK_SIZE, -(-tokens // BLOCK_SIZE) + batch, tiered=tiers),
                    torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    for _ in range(batch):
        engine.add_request(torch.randint(0, model.config.vocab_size, (prompt,), generator=gen).tolist(), steps + 1)
    return engine


def _interleaved(model: LlamaModel, batch: int, prompt: int, steps: int, chunk: int, kind: str,
                 ssd_dir: str | None) -> tuple[list[float], list[float], list[int]]:
    """(wall ms differences, thread-CPU ms differences, pages missed) per decode step pair."""
    small = _pools(model, batch, prompt, steps, chunk, kind, ssd_dir)
    total = batch * (-(-(prompt + steps + 1) // chunk)) * model.config.num_layers
    big = TierConfig(chunk, device_pages=total + model.config.num_layers, host_pages=0, ssd_pages=0)
    engines = [_engine(model, batch, prompt, steps, tiers) for tiers in (small, big)]
    page = chunk * 2 * model.config.num_kv_heads * int(model.config.head_dim) * next(model.parameters()).element_size()
    wall: list[float] = []
    cpu: list[float] = []
    misses: list[int] = []
    try:
        for engine in engines:  # prompts' prefill, untimed
            first: set[int] = set()
            while len(first) < batch:
                first.update(engine.step().first_tokens)
        with torch.inference_mode():
            for _ in range(steps):
                if not all(e.has_unfinished for e in engines):
                    break
                times = []
                for engine in engines:
                    w0, c0 = time.perf_counter(), time.thread_time()
                    record = engine.step()
                    times.append(((time.perf_counter() - w0) * 1e3, (time.thread_time() - c0) * 1e3))
                    if engine is engines[0]:
                        misses.append(round(record.paging_bytes_host_device / page))
                wall.append(times[0][0] - times[1][0])
                cpu.append(times[0][1] - times[1][1])
    finally:
        for engine in engines:
            engine.close()
    return wall, cpu, misses


def miss_links(samples: list[Sample], kv_bytes_per_token: int, chunk: int, what: str) -> dict[str, PagingLink]:
    """paging.miss_{kind}: paging_v1 fitted to the wall rows of each kind against the bytes missed per step."""
    out: dict[str, PagingLink] = {}
    for kind in KINDS:
        rows = sorted((s for s in samples if s.sweep == sweep_name(kind, chunk) and s.median_ms > 0),
                      key=lambda s: s.x2)
        cpu = {round(s.x2): s.median_ms for s in samples if s.sweep == sweep_name(kind, chunk, True)}
        if len(rows) < 2:
            continue
        x = np.array([round(s.x2) for s in rows], dtype=float)
        y = np.array([s.median_ms for s in rows], dtype=float)
        data = (f"{len(rows)} (batch, context) points, pages of {chunk} tokens, misses crossing {kind!r} links: median "
                f"of paired (missing − all-resident) tiered decode steps, wall clock (thread CPU: "
                f"{', '.join(f'{cpu.get(int(b), math.nan):.2f}' for b in x)} ms against wall "
                f"{', '.join(f'{v:.2f}' for v in y)} ms); {what}")
        try:
            result = fit_formula("paging_v1", {"bytes": x}, y, data=data)
        except FitRefused:
            continue
        coefficients = {
            "setup_ms": Coefficient(result.coefficients["setup_ms"], "ms", "fitted",
                                    "fixed cost of a step that misses (fetch-ahead hand-off, eviction chain)"),
            "bandwidth_gbps": Coefficient(result.coefficients["bandwidth_gbps"], "GB/s", "fitted",
                                          "inverse slope: bytes of the pages missed per second, as the Engine moves "
                                          "them (out and in)"),
        }
        model = CostModel("paging_v1", coefficients, ("bytes",), {"bytes": (float(x.min()), float(x.max()))},
                          result.quality, f"a tiered Engine decode step's misses crossing {kind!r} links over the "
                          f"same step with every page resident, per step, against the bytes of the pages missed; "
                          f"pages of {chunk} tokens; wall clock. {what}")
        per_2k = model.evaluate(bytes=2048 * kv_bytes_per_token) - model.evaluate(bytes=0.0)
        out[miss_key(kind)] = PagingLink(model, per_2k)
    return out
