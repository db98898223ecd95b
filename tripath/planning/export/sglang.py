"""The SGLang suggestion: ``python -m sglang.launch_server`` with the simulated settings SGLang has (settings.py
states the rule)."""

from __future__ import annotations

import math
from typing import Any

from tripath.planning.candidates import Candidate
from tripath.planning.export.common import assemble, batching_notes, speculative_notes
from tripath.planning.export.settings import NO_MATCH, Setting, Simulated, Suggestion, gib
from tripath.profile.profile import Profile
from tripath.simulator.scenario.strategy import SpeculativeSpec, TieredSpec


class SglangSuggestion(Suggestion):
    """``python -m sglang.launch_server --model-path MODEL`` with flags."""

    ENGINE = "SGLang"
    KEY = "sglang"
    LAUNCH = ("python", "-m", "sglang.launch_server", "--model-path")



def sglang_suggestion(profile: Profile, data: dict[str, Any], candidate: Candidate,
                      replicas: int | None = None) -> SglangSuggestion:
    """The SGLang flags for one replica of ``candidate`` on ``profile``: the same rule as ``vllm_suggestion``."""
    sim = Simulated.of(profile, data, candidate)
    b, strategy = sim.scenario.batching, sim.scenario.strategy
    if sim.dp == 1:
        settings = [Setting("--tp-size", str(sim.tp), "profile key.tp")]
    else:
        settings = [Setting("--tp-size", str(sim.gpus),
                            f"profile key.tp {sim.tp} x key.attention_dp {sim.dp}: with DP attention SGLang's "
                            f"--tp-size is every GPU of the replica, each attention rank taking tp-size / dp-size = "
                            f"{sim.tp}"),
                    Setting("--dp-size", str(sim.dp), f"profile key.attention_dp: {sim.dp} attention data-parallel "
                            "ranks"),
                    Setting("--enable-dp-attention", None,
                            f"profile key.attention_dp {sim.dp}: data parallelism for the attention (each rank its "
                            f"own batch and KV pool), the MoE layers over all {sim.gpus} GPUs")]
    settings.append(Setting("--max-running-requests", str(b.max_batch_size * sim.dp),
                            sim.batching_source("max_batch_size") + _times_dp(sim)
                            + sim.rank_note("SGLang", "--max-running-requests")))
    notes = batching_notes(sim, "SGLang", "--max-running-requests")
    if b.policy == "chunked":
        settings += [Setting("--chunked-prefill-size", str(b.max_batched_tokens * sim.dp),
                             sim.batching_source("max_batched_tokens") + _times_dp(sim) + ": the simulated "
                             "per-iteration token budget" + sim.rank_note("SGLang", "--chunked-prefill-size")),
                     Setting("--enable-mixed-chunk", None,
                             "scenario batching.policy 'chunked': decodes share the iteration and its budget with "
                             "the prompt chunks, as simulated (SGLang subtracts the running decodes from the "
                             "chunk budget)")]
    elif b.policy == "continuous":
        notes.append(f"{NO_MATCH} batching.policy 'continuous': the simulation prefilled each admitted prompt "
                     f"whole within the {b.max_batched_tokens}-token budget, decodes running in the same "
                     "iteration. SGLang chunks prompts by default (--chunked-prefill-size); with chunking off (-1) "
                     "it prefills whole prompts in prefill-only batches while decodes wait, which is not the "
                     "simulated iteration either: rerun with batching.policy = \"chunked\" for numbers that match")
    spec = strategy.prefix_cache
    if spec is None:
        settings.append(Setting("--disable-radix-cache", None,
                                "the candidate has no prefix_cache: the simulation reused no prefixes, and SGLang's "
                                "radix cache reuses them by default"))
    else:
        settings.append(Setting("--page-size", str(spec.block_tokens),
                                "candidate prefix_cache.block_tokens: the simulated cache block (hits are whole "
                                "blocks); SGLang's radix cache is on by default"))
        if strategy.tiered is not None:
            settings += _hicache(sim, strategy.tiered, notes)
    return assemble(SglangSuggestion, sim, candidate.name, replicas, settings, notes, _sglang_speculative)


def _times_dp(sim: Simulated) -> str:
    return "" if sim.dp == 1 else f" x key.attention_dp {sim.dp}"


def _hicache(sim: Simulated, tiered: TieredSpec, notes: list[str]) -> list[Setting]:
    """prefix_cache + tiered: SGLang's hierarchical cache keeps radix-cache blocks evicted from the GPU in a host
    pool and loads them back on a hit. --hicache-size is whole GiB per tensor-parallel rank (each rank's
    scheduler keeps its own pool of its KV share): one replica's host tier / tp, rounded down."""
    host, host_from, ssd, _ = sim.tiers_gib(tiered)
    per_rank = math.floor(host / sim.tp)
    rounded = "" if per_rank == host / sim.tp else f", rounded down from {gib(host / sim.tp)} (SGLang takes whole GiB)"
    if ssd > 0:
        notes.append(f"{NO_MATCH} the simulated SSD tier ({ssd:,.0f} GiB): SGLang's hierarchical cache reaches "
                     "storage through --hicache-storage-backend, whose capacity no flag sets; not exported")
    return [Setting("--enable-hierarchical-cache", None,
                    "candidate prefix_cache+tiered: evicted prefix blocks kept in host memory, loaded back on a hit"),
            Setting("--hicache-size", str(per_rank),
                    f"{host_from} ({gib(host)} GiB) / tp {sim.tp}: GiB per tensor-parallel rank{rounded}" + (
                        "" if sim.dp == 1 else f"; the tier is one attention data-parallel rank's, of tp {sim.tp} "
                                               "GPUs (tp-size / dp-size)"))]


def _sglang_speculative(sim: Simulated, spec: SpeculativeSpec, notes: list[str]) -> list[Setting]:
    k, k_from = sim.speculative_k(spec)
    notes += speculative_notes(sim, spec, k, "SGLang")
    if spec.proposer == "prompt_lookup":
        notes.append(f"{NO_MATCH} proposer 'prompt_lookup': SGLang's NGRAM speculation matches a trie built from "
                     "all requests' tokens and proposes a tree of drafts, not a chain looked up in the request's "
                     "own context as simulated; not exported")
        return []
    draft = sim.draft()
    where = f"{k_from}: K draft tokens per round, one per draft step"
    if draft.mtp:
        head = [Setting("--speculative-algorithm", "EAGLE", f"profile speculative.draft_model {draft.name!r}: the "
                        "checkpoint's own multi-token-prediction layer, which SGLang runs as its EAGLE draft")]
    elif draft.repo is None:
        notes.append(draft.why_none())
        return []
    else:
        head = [Setting("--speculative-algorithm", "STANDALONE", "candidate speculative (proposer 'draft'): a "
                        "separate small draft model"),
                Setting("--speculative-draft-model-path", draft.repo,
                        f"profile speculative.draft_model {draft.name!r}, the Hugging Face repository {draft.repo}")]
    return [*head,
            Setting("--speculative-num-steps", str(k), where),
            Setting("--speculative-eagle-topk", "1", "one draft token per step: the simulated chain (no tree)"),
            Setting("--speculative-num-draft-tokens", str(k + 1),
                    f"{k_from} + 1: the K drafts and the verified token, SGLang's count for a chain (top-k 1)")]
