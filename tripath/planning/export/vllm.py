"""The vLLM (V1) suggestion: ``vllm serve`` with the simulated settings vLLM has (settings.py states the rule)."""

from __future__ import annotations

import json
from typing import Any

from tripath.planning.candidates import Candidate
from tripath.planning.export.common import assemble, batching_notes, speculative_notes
from tripath.planning.export.settings import NO_MATCH, Setting, Simulated, Suggestion, gib
from tripath.profile.profile import Profile
from tripath.simulator.scenario.strategy import SpeculativeSpec, TieredSpec

VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)  # vllm/config/cache.py BlockSize
LMCACHE_CONNECTOR = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


class VllmSuggestion(Suggestion):
    """``vllm serve MODEL`` with flags and environment."""

    ENGINE = "vLLM"
    KEY = "vllm"
    LAUNCH = ("vllm", "serve")



def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(", ", ": "))

def vllm_suggestion(profile: Profile, data: dict[str, Any], candidate: Candidate,
                    replicas: int | None = None) -> VllmSuggestion:
    """The vLLM (V1) flags for one replica of ``candidate`` on ``profile`` with the scenario's batching: exactly
    the simulated settings vLLM has, each with its simulated value; the rest as notes (settings.py's docstring)."""
    sim = Simulated.of(profile, data, candidate)
    b = sim.scenario.batching
    settings = [Setting("--tensor-parallel-size", str(sim.tp), "profile key.tp" + (
        "" if sim.dp == 1 else ": the tensor-parallel degree of each attention data-parallel rank"))]
    if sim.dp > 1:
        settings.append(Setting("--data-parallel-size", str(sim.dp),
                                f"profile key.attention_dp: {sim.dp} attention data-parallel ranks of tp {sim.tp} "
                                f"GPU(s) each, one replica on {sim.gpus} GPUs; the MoE layers span all {sim.gpus} "
                                "(vLLM: a DP x TP tensor-parallel group, or expert parallel with "
                                "--enable-expert-parallel)"))
    settings.append(Setting("--max-num-seqs", str(b.max_batch_size),
                            sim.batching_source("max_batch_size") + sim.rank_note("vLLM", "--max-num-seqs")))
    notes = batching_notes(sim, "vLLM", "--max-num-seqs")
    if b.policy in ("continuous", "chunked"):
        settings.append(Setting("--max-num-batched-tokens", str(b.max_batched_tokens),
                                sim.batching_source("max_batched_tokens") + ": the simulated per-iteration token "
                                "budget" + sim.rank_note("vLLM", "--max-num-batched-tokens")))
    if b.policy == "chunked":
        settings.append(Setting("--enable-chunked-prefill", None,
                                "scenario batching.policy 'chunked': every decode takes one token of the budget, "
                                "then prompts take chunks of the rest (Sarathi-Serve; vLLM V1's scheduler)"))
    elif b.policy == "continuous":
        notes.append(f"{NO_MATCH} batching.policy 'continuous': the simulation prefilled each admitted prompt "
                     f"whole within the {b.max_batched_tokens}-token budget (the first always admitted, strict "
                     "FCFS). vLLM V1 chunks long prompts; its --no-enable-chunked-prefill needs "
                     "--max-num-batched-tokens >= --max-model-len and lets later requests pass one that does not "
                     "fit, so it is not the simulated rule either. Served, prefill is chunked: rerun the scenario "
                     "with batching.policy = \"chunked\" for numbers that match")
    settings += _vllm_prefix(sim, notes)
    return assemble(VllmSuggestion, sim, candidate.name, replicas, settings, notes, _vllm_speculative)


def _vllm_prefix(sim: Simulated, notes: list[str]) -> list[Setting]:
    """Prefix caching on or off as simulated (vLLM V1 turns it on by default), its block size, and the offload
    of evicted prefix blocks when the candidate tiers them."""
    spec = sim.scenario.strategy.prefix_cache
    if spec is None:
        return [Setting("--no-enable-prefix-caching", None,
                        "the candidate has no prefix_cache: the simulation reused no prefixes, and vLLM V1 caches "
                        "them by default")]
    out = [Setting("--enable-prefix-caching", None, "candidate prefix_cache: automatic prefix caching")]
    if spec.block_tokens in VLLM_BLOCK_SIZES:
        out.append(Setting("--block-size", str(spec.block_tokens),
                           "candidate prefix_cache.block_tokens: the simulated cache block (hits are whole blocks)"))
    else:
        notes.append(f"{NO_MATCH} prefix_cache.block_tokens {spec.block_tokens}: vLLM's --block-size takes "
                     f"{', '.join(map(str, VLLM_BLOCK_SIZES))}, so its cache keeps its default block (16 tokens) "
                     f"and can reuse shared prefixes shorter than the simulated {spec.block_tokens}-token blocks")
    tiered = sim.scenario.strategy.tiered
    if tiered is not None:
        out += _lmcache(sim, tiered, spec.block_tokens)
    return out


def _lmcache(sim: Simulated, tiered: TieredSpec, block_tokens: int) -> list[Setting]:
    """prefix_cache + tiered: evicted prefix blocks kept in host memory (and SSD), loaded back on a hit, as
    LMCache's vLLM connector does. LMCache sizes are GiB per tensor-parallel rank (each rank's worker runs its
    own engine and holds its 1/tp share of the KV: LMCache/LMCache#2901), so one replica's tier / tp."""
    host, host_from, ssd, ssd_from = sim.tiers_gib(tiered)
    per_rank = f" / tp {sim.tp} (LMCache sizes its caches in GiB per tensor-parallel rank)" + (
        "" if sim.dp == 1 else f"; the tier is one attention data-parallel rank's, and each of the {sim.dp} vLLM "
                               "DP ranks' workers run their own LMCache")
    out = [Setting("--kv-transfer-config", json.dumps(LMCACHE_CONNECTOR, separators=(",", ":")),
                   "candidate prefix_cache+tiered: evicted prefix blocks kept below the GPU and loaded back on a "
                   "hit, through LMCache's vLLM connector"),
           Setting("LMCACHE_CHUNK_SIZE", str(block_tokens),
                   "candidate prefix_cache.block_tokens: the simulated block, LMCache's unit of reuse", env=True),
           Setting("LMCACHE_LOCAL_CPU", "True", "candidate tiered: the host-memory tier", env=True),
           Setting("LMCACHE_MAX_LOCAL_CPU_SIZE", gib(host / sim.tp), f"{host_from} ({gib(host)} GiB){per_rank}",
                   env=True)]
    if ssd > 0:
        out += [Setting("LMCACHE_LOCAL_DISK", "file:///PATH/ON/YOUR/SSD/",
                        f"candidate tiered: the SSD tier ({ssd_from}); the path is yours to fill in", env=True),
                Setting("LMCACHE_MAX_LOCAL_DISK_SIZE", gib(ssd / sim.tp), f"{ssd_from} ({gib(ssd)} GiB){per_rank}",
                        env=True)]
    return out


def _vllm_speculative(sim: Simulated, spec: SpeculativeSpec, notes: list[str]) -> list[Setting]:
    k, k_from = sim.speculative_k(spec)
    notes += speculative_notes(sim, spec, k, "vLLM")
    if spec.proposer == "prompt_lookup":
        notes.append("the n-gram window (prompt_lookup_min/max) is vLLM's default: the simulation priced prompt "
                     "lookup by the profile's measured acceptance, not by a window")
        return [Setting("--speculative-config", _json({"method": "ngram", "num_speculative_tokens": k}),
                        f"method ngram: the candidate's prompt-lookup proposer; num_speculative_tokens from "
                        f"{k_from}")]
    draft = sim.draft()
    if draft.mtp:
        return [Setting("--speculative-config", _json({"method": "deepseek_mtp", "num_speculative_tokens": k}),
                        f"method deepseek_mtp: profile speculative.draft_model {draft.name!r}, the checkpoint's own "
                        f"multi-token-prediction layer; num_speculative_tokens from {k_from}")]
    if draft.repo is None:
        notes.append(draft.why_none())
        return []
    config: dict[str, Any] = {"method": "draft_model", "model": draft.repo, "num_speculative_tokens": k}
    if draft.tp is not None and draft.tp != sim.tp:
        config["draft_tensor_parallel_size"] = draft.tp
    return [Setting("--speculative-config", _json(config),
                    f"model: profile speculative.draft_model {draft.name!r}, the Hugging Face repository "
                    f"{draft.repo}; num_speculative_tokens from {k_from}")]
