"""The measured side: a validation scenario's requests served by the real engine on this machine.

The engine is built from the same scenario tables the simulator reads, parsed to a Scenario and turned into an
EngineConfig by tripath.fidelity.engine_settings.engine_settings, the function `tripath serve` uses too (the KV
pool holds the tokens the simulator's KV budget holds, the tiers the host and SSD tokens it sizes),
[strategy.speculative] -> Engine with SpeculativeDecoding and the tiny draft at
fixed K (with [strategy.compression]: the target's KV compressed, the draft's exact). Policies
continuous/chunked go through tripath.engine.workload_replay.serve; static/dynamic through the same loop with
tripath.engine.batching_policy's Windowed policy. A path the engine cannot serve in a timed loop yet raises
NotAvailable with what is missing: the report says "not run: <reason>", never a made-up number.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tripath.core.errors import InputError
from tripath.core.prefix import key_bytes
from tripath.core.records import RequestRecord
from tripath.core.request import RequestSpec
from tripath.core.speculative import FixedK
from tripath.engine.batching_policy import Windowed
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.speculative.decoding import SpeculativeDecoding
from tripath.engine.speculative.metrics import SpecCounters
from tripath.engine.speculative.proposers import DraftModelProposer
from tripath.engine.workload_replay import PromptSource, prefix_hit_tokens, serve
from tripath.fidelity.engine_settings import BLOCK_SIZE, engine_settings
from tripath.fidelity.tier_paging import move_stall_ms_per_request
from tripath.simulator.scenario.scenario import Scenario, scenario_from_dict

Paths = dict[str, tuple[float | None, str]]


class CpuClock:
    """Contention-free time: this thread's CPU time while it works, plus the idle gaps it skips.

    With one torch thread the engine computes on the calling thread, so time.thread_time() is what a
    step costs on an idle core (the clock the profile was calibrated with); other jobs on the shared
    cores inflate it far less than wall time, but not by nothing (shared caches and memory bandwidth:
    docs/fidelity.md, "Machine noise"). Waiting for the next arrival advances the clock without sleeping.
    """

    def __init__(self) -> None:
        self.base = time.thread_time()
        self.idle = 0.0

    def __call__(self) -> float:
        return time.thread_time() - self.base + self.idle

    def sleep(self, seconds: float) -> None:
        self.idle += max(0.0, seconds)


CLOCKS = ("wall", "cpu")


class NotAvailable(Exception):
    """One side of a scenario cannot run yet; the message says what is missing."""


@dataclass(frozen=True)
class Measured:
    records: list[RequestRecord]
    paths: Paths  # per-path quantities: name -> (value, unit)
    steps: int
    prompt_source: str
    wall_s: float  # wall time of the whole replay
    core_share: float | None = None  # thread CPU s / wall s of its steps (wall clock only; idle core: ~1)
    mean_batch: float | None = None  # sequences per engine step, averaged over steps


def scenario_of(data: dict[str, Any], source: str | None) -> Scenario:
    """The parsed Scenario of a validation case's table (NotAvailable where the scenario reader refuses it)."""
    try:
        return scenario_from_dict(copy.deepcopy(data), source)
    except InputError as exc:
        raise NotAvailable(f"engine: {exc.field}: {exc.problem}") from None


def engine_config(data: dict[str, Any], kv_tokens: int, layers: int, tier_tokens: tuple[int, int] = (0, 0),
                  source: str | None = None) -> EngineConfig:
    """The engine the validation case describes: its parsed Scenario through engine_settings (the function
    `tripath serve` uses), on the ``kv_tokens`` of device KV the simulator's budget holds and the (host, SSD)
    ``tier_tokens`` it sizes from the scenario (tripath.fidelity.sim_side.tier_tokens). NotAvailable where
    the scenario reader or the engine (EngineConfig / TierConfig) refuses it: that ends this case only."""
    try:
        return engine_settings(scenario_of(data, source), kv_tokens, layers, *tier_tokens)
    except ValueError as exc:
        raise NotAvailable(f"engine: {exc}") from None


def unsupported(data: dict[str, Any]) -> str | None:
    """What the engine side lacks for this scenario, or None when it can be served."""
    strategy = data.get("strategy", {})
    missing = []
    fields_ = {f.name for f in dataclasses.fields(EngineConfig)}
    if "tiered" in strategy and "tiered" not in fields_:
        missing.append("the Engine has no tiered KV option (EngineConfig.tiered)")
    if "compression" in strategy and "kv_compression" not in fields_:
        missing.append("the Engine has no compressed-KV option (EngineConfig.kv_compression)")
    if "speculative" in strategy and "tiered" in strategy:
        missing.append("speculative decoding has no tiered KV: EngineConfig.tiered serves plain decoding only")
    if {"tiered", "compression"} <= set(strategy):
        missing.append("EngineConfig cannot combine tiered with kv_compression")
    if "sequence_parallel" in strategy:
        if len(strategy) > 1:
            missing.append("sequence parallelism is served alone (tripath/fidelity/seqpar_serving.py), not combined")
        if int(data.get("batching", {}).get("max_batch_size", 256)) != 1:
            missing.append("tripath/engine/seqpar/parallel.py holds one sequence at a time: set "
                           "batching.max_batch_size = 1")
    spec = strategy.get("speculative")
    if spec is not None and spec.get("proposer", "draft") != "draft":
        missing.append(f"proposer {spec.get('proposer')!r} is not wired into the validation runner")
    if spec is not None and spec.get("adaptive", False):
        missing.append("adaptive K needs SpecCosts from the profile; the validation runner uses fixed K")
    policy = data.get("batching", {}).get("policy", "continuous")
    prefix = strategy.get("prefix_cache")
    if prefix is not None and prefix.get("enabled", True):
        # the engine's prefix blocks are its pages: the paged pool's blocks, or the tiered store's chunks
        tiered = strategy.get("tiered")
        page, field = ((BLOCK_SIZE, "the engine's block size") if tiered is None else
                       (int(tiered.get("chunk_tokens", 256)), "strategy.tiered.chunk_tokens"))
        if int(prefix.get("block_tokens", 512)) != page:
            missing.append(f"the engine's prefix cache keys blocks of its page size ({field}): set "
                           f"strategy.prefix_cache.block_tokens = {page}")
        if set(strategy) - {"prefix_cache", "tiered", "speculative"}:
            missing.append("the engine's prefix cache runs on the plain paged pool or the tiered store, with or "
                           "without speculative decoding, not combined with other paths")
        if policy not in ("continuous", "chunked"):
            missing.append("prefix caching is replayed with continuous or chunked batching only")
    if spec is not None and policy in ("static", "dynamic"):
        missing.append("the speculative engine batches continuously only")
    if data.get("batching", {}).get("preemption", "none") != "none":
        missing.append("preemption modes other than the engine's own are not configurable")
    return "; ".join(missing) or None


class KeyedPrompts:
    """Prompt ids built from the simulator's block keys, so the engine's prompts share blocks exactly where the
    simulator's keys repeat: each full block's ids are drawn from a generator seeded by its key (the same key,
    the same ids), the partial last block from ``tail``. Handed out in serving order (arrival, then id),
    skipping the requests the engine rejects (serve draws no prompt for them)."""

    def __init__(self, keys: tuple[tuple[bytes, ...], ...], block_tokens: int, requests: list[RequestSpec],
                 tail: PromptSource, rejects: Any) -> None:
        order = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
        self.queue = [r for r in order if rejects(r.prompt_tokens, r.output_tokens) is None]
        self.keys, self.block_tokens, self.tail = keys, block_tokens, tail
        self.vocab = tail.vocab

    @property
    def source(self) -> str:
        return f"simulator prefix keys ({self.block_tokens}-token blocks) + {self.tail.source} tails"

    def _block(self, key: bytes) -> list[int]:
        seed = int.from_bytes(hashlib.blake2b(key_bytes(key), digest_size=8).digest(), "little")
        return np.random.default_rng(seed).integers(0, self.vocab, size=self.block_tokens).tolist()

    def prompt(self, task: str, length: int) -> list[int]:
        spec = self.queue.pop(0)
        if spec.prompt_tokens != length:
            raise RuntimeError(f"request {spec.request_id}: prompts out of order ({length} != {spec.prompt_tokens})")
        ids = [t for key in self.keys[spec.request_id] for t in self._block(key)]
        return ids + self.tail.prompt(task, length - len(ids))[: length - len(ids)]


def build_engine(data: dict[str, Any], target: LlamaModel, draft: LlamaModel | None, kv_tokens: int, seed: int,
                 default_k: int, tier_tokens: tuple[int, int] = (0, 0),
                 source: str | None = None) -> tuple[Engine, SpecCounters | None]:
    """The engine the scenario describes (tripath.fidelity.engine_settings, as `tripath serve` builds it) on
    ``kv_tokens`` of device KV and ``tier_tokens`` = (host, SSD) tokens as the simulator sizes them; with
    [strategy.speculative] the draft proposes at the scenario's fixed K (else ``default_k``)."""
    reason = unsupported(data)
    if reason is not None:
        raise NotAvailable(f"engine: {reason}")
    cfg = engine_config(data, kv_tokens, target.config.num_layers, tier_tokens, source)
    gen = torch.Generator().manual_seed(seed)
    spec = scenario_of(data, source).strategy.speculative
    if spec is None:
        return Engine(target, cfg, gen), None
    if draft is None:
        raise NotAvailable("engine: speculative decoding needs the draft checkpoint")
    proposer = DraftModelProposer(draft, cfg.num_blocks, cfg.block_size, torch.Generator().manual_seed(seed + 1))
    strategy = SpeculativeDecoding(proposer, FixedK(spec.k if spec.k is not None else default_k))
    return Engine(target, cfg, gen, strategy), strategy.counters


def measure(data: dict[str, Any], requests: list[RequestSpec], target: LlamaModel, draft: LlamaModel | None,
            kv_tokens: int, seed: int, default_k: int, clock: str = "wall", target_path: str | None = None,
            tier_tokens: tuple[int, int] = (0, 0), prefix_keys: Any = None, source: str | None = None) -> Measured:
    """Serve ``requests`` on the engine this scenario describes (greedy, EOS ignored).

    clock "wall": real time, what users see on this (shared) machine; "cpu": CpuClock, the replay
    an idle core would give (the difference between the two is the machine's contention). ``source``: the
    scenario file's path (a trace's CSV is read relative to it).
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock: must be one of {CLOCKS}, got {clock!r}")
    reason = unsupported(data)
    if reason is not None:
        raise NotAvailable(f"engine: {reason}")
    prompts = PromptSource(np.random.default_rng(seed + 1), target.config.vocab_size)
    sp = data.get("strategy", {}).get("sequence_parallel")
    if sp is not None:
        return _measure_seqpar(data, requests, prompts, target_path, int(sp.get("degree", 2)), clock)
    engine, counters = build_engine(data, target, draft, kv_tokens, seed, default_k, tier_tokens, source)
    if prefix_keys is not None:  # tripath.fidelity.sim_side.prefix_keys_for: the simulator's block keys
        prompts = KeyedPrompts(prefix_keys.keys, prefix_keys.block_tokens, requests, prompts, engine.check_request)
    timing: dict[str, Any] = {}
    if clock == "cpu":
        cpu = CpuClock()
        timing = {"clock": cpu, "sleep": cpu.sleep}
    batching = data.get("batching", {})
    policy = batching.get("policy", "continuous")
    t0, cpu0 = time.perf_counter(), time.thread_time()
    if policy in ("static", "dynamic"):
        window = Windowed(int(batching.get("max_batch_size", 256)), float(batching.get("max_wait_ms", 0.0)) / 1000.0,
                          policy == "dynamic")
        result = serve(engine, requests, prompts, **timing, batching=window)
    elif policy in ("continuous", "chunked"):
        result = serve(engine, requests, prompts, **timing)
    else:
        raise NotAvailable(f"engine: batching policy {policy!r} has no engine-side loop (adaptive tunes the "
                           "window from the SLA; not replayed)")
    wall, cpu_s = time.perf_counter() - t0, time.thread_time() - cpu0
    paths: Paths = {}
    if counters is not None:
        # serve()'s warm-up asks 2 tokens: K is capped at 0 for it, so it adds no draft round here
        paths["accepted_per_round"] = (counters.num_accepted_tokens / counters.num_drafts
                                       if counters.num_drafts else None, "draft tokens")
        paths["acceptance"] = (counters.per_token_acceptance, "fraction")
    if "tiered" in data.get("strategy", {}):
        # as the simulator books it: page moves' stall beyond a step that moves nothing
        # (tripath/fidelity/tier_paging.py)
        done = sum(r.completed for r in result.records)
        paths["paging_ms_per_request"] = (move_stall_ms_per_request(result.steps, done), "ms")
    hits = prefix_hit_tokens(engine, result.records)
    if hits is not None:  # prefix caching: prompt tokens taken from the cache over all prompt tokens served
        paths["prefix_hit_rate"] = (hits[0] / hits[1] if hits[1] else None, "fraction of prompt tokens")
    busy = sum(step.wall_s for step in result.steps)
    # the share of a core the engine's thread got while stepping: 1.0 on an idle core (contention gauge)
    share = cpu_s / busy if clock == "wall" and busy > 0 else None
    batch = sum(step.batch_size for step in result.steps) / len(result.steps) if result.steps else None
    return Measured(result.records, paths, len(result.steps), result.prompt_source, wall, share, batch)


def _measure_seqpar(data: dict[str, Any], requests: list[RequestSpec], prompts: PromptSource,
                    target_path: str | None, degree: int, clock: str) -> Measured:
    """Sequence parallelism: ``degree`` spawned gloo ranks load the checkpoint and serve FCFS, batch 1."""
    from tripath.fidelity.seqpar_serving import serve_seqpar

    if target_path is None:
        raise NotAvailable("engine: sequence parallelism needs the target checkpoint path (ranks load it)")
    ids = [prompts.prompt(r.task, r.prompt_tokens) for r in requests]
    t0 = time.perf_counter()
    served = serve_seqpar(target_path, degree, requests, ids, clock)
    # core share: the ranks' thread CPU / wall outside their collectives, the fewest (wall clock only)
    return Measured(served.records, {"merge_ms_per_request": (served.merge_s * 1000.0, "ms")},
                    sum(r.output_tokens for r in requests), prompts.source, time.perf_counter() - t0,
                    served.core_share if clock == "wall" else None)
