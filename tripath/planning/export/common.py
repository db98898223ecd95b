"""What both engines' suggestions add the same way: the notes for what no engine does as simulated, the
checkpoint and its precision and expert settings, and ``assemble``, which finishes a suggestion (the rule is
settings.py's)."""

from __future__ import annotations

from collections.abc import Callable

from tripath.planning.export.settings import (
    HF_REPOS,
    KV_CACHE_DTYPES,
    NO_MATCH,
    QUANTIZED_REPOS,
    WINDOWED,
    S,
    Setting,
    Simulated,
    name_and_tp,
)
from tripath.simulator.scenario.strategy import SpeculativeSpec


def _hf(name: str) -> tuple[str, str]:
    """(the name the engine loads, why): the Hugging Face repository where one is known, else the profile's name."""
    base = name_and_tp(name)[0]
    repo = HF_REPOS.get(base)
    if repo is None:
        return base, "no Hugging Face repository known for it: replace with your checkpoint's path"
    return repo, f"the Hugging Face repository of {base!r}"



# --- what no engine does as simulated: the same notes for both -----------------------------------------------
def batching_notes(sim: Simulated, engine: str, seqs_flag: str) -> list[str]:
    """The simulated batch formation and preemption where ``engine`` has no setting that does the same
    (``seqs_flag``: its flag for the most sequences in a batch)."""
    b, notes = sim.scenario.batching, []
    if b.policy in WINDOWED:
        notes.append(f"{NO_MATCH} batching.policy {b.policy!r}: the simulation formed batches outside the engine "
                     f"(a Triton-style {'AIMD-steered ' if b.policy == 'adaptive' else ''}batcher with a "
                     f"{b.max_wait_ms:g} ms window, no token budget); {engine} admits requests at every iteration. "
                     f"{seqs_flag} carries batching.max_batch_size (the simulated maximum), and no token budget "
                     "is exported (none was simulated)")
    if b.preemption == "none":
        notes.append(f"{NO_MATCH} batching.preemption 'none': each simulated request reserved its prompt and its "
                     f"whole output's KV at admission and was never preempted; {engine} allocates KV as tokens are "
                     "written and preempts (recomputes) a request when the cache is full, so it can admit more "
                     "requests than the simulation did")
    elif b.preemption == "swap":
        notes.append(f"{NO_MATCH} batching.preemption 'swap' (a preempted request's KV copied to host memory): "
                     f"{engine} preempts by recomputing (vLLM V1 has no swap space)")
    else:
        notes.append(f"batching.preemption 'recompute' is {engine}'s own default (no flag)")
    return notes


def _path_notes(sim: Simulated, engine: str) -> list[str]:
    """The simulated paths ``engine`` has no feature for: sequence parallelism, live-KV paging, int KV caches."""
    strategy, notes = sim.scenario.strategy, []
    sp = strategy.sequence_parallel
    if sp is not None:
        notes.append(
            f"{NO_MATCH} sequence_parallel degree {sp.degree}: the simulated replica spans tp {sim.tp} x "
            f"{sp.degree} = {sim.tp * sp.degree} GPUs, splitting each prompt's prefill (ring attention) and its KV "
            f"over {sp.degree} ranks. vLLM's --decode-context-parallel-size shards the KV inside the "
            "tensor-parallel group (adds no GPUs) and its --prefill-context-parallel-size is documented for vLLM "
            "Ascend; SGLang's context parallelism is for DeepSeek's sparse attention: none is this split, so no "
            f"context-parallel flag is exported and {engine} would serve this replica on tp {sim.tp} only")
    tiered = strategy.tiered
    if tiered is not None:
        host, _, ssd, _ = sim.tiers_gib(tiered)
        tiers = f"host memory ({host:,.0f} GiB)" + ("" if ssd <= 0 else f" and SSD ({ssd:,.0f} GiB)")
        if strategy.prefix_cache is None:
            notes.append(
                f"{NO_MATCH} tiered: the simulation paged LIVE KV to {tiers} and back every decode step "
                f"({tiered.chunk_tokens}-token pages), so sequences whose KV does not fit the GPU keep decoding. "
                f"{engine} keeps live KV on the GPU and preempts when it is full; its CPU offload (vLLM's "
                "--kv-offloading-backend or LMCache, SGLang's --enable-hierarchical-cache) keeps KV for REUSE by "
                "later requests, which this candidate did not simulate: no offload flag is exported. Its numbers "
                "hold only where the peak live KV fits the GPU (then nothing was paged)")
        else:
            notes.append(
                f"{NO_MATCH} the live-KV part of tiered: besides keeping evicted prefix blocks in {tiers} (exported "
                f"as {engine}'s offload), the simulation also paged running sequences' KV beyond the GPU every "
                f"decode step ({tiered.chunk_tokens}-token pages); {engine} preempts instead, so the numbers hold "
                "where the peak live KV fits the GPU")
    comp = strategy.compression
    if comp is not None and comp.mode not in KV_CACHE_DTYPES:
        notes.append(f"{NO_MATCH} compression.mode {comp.mode!r}: neither vLLM (--kv-cache-dtype auto, bfloat16, "
                     "fp8, fp8_e4m3, fp8_e5m2) nor SGLang (auto, bf16, fp8_e5m2, fp8_e4m3, fp4_e2m1) stores an "
                     f"{comp.mode} KV cache; an fp8 cache has other bytes per token and another accuracy cost, so "
                     "no --kv-cache-dtype is exported and the served cache keeps the model's dtype")
    return notes


def _routing_note(sim: Simulated, replicas: int | None) -> list[str]:
    spec = sim.scenario.strategy.prefix_cache
    if spec is None or spec.routing != "affinity" or (replicas or 1) <= 1:
        return []
    return ["prefix_cache.routing 'affinity': the simulated replicas take a request where its prefix is cached; "
            "that is the router's job in front of the replicas (a KV-aware router such as llm-d's, Dynamo's or "
            "SGLang's router), not a serve flag"]


def speculative_notes(sim: Simulated, spec: SpeculativeSpec, k: int, engine: str) -> list[str]:
    draft = sim.draft()
    notes = []
    if spec.adaptive:
        own = (" (its --speculative-adaptive steers by its own rule, not the simulated controller)"
               if engine == "SGLang" else "")
        notes.append(f"{NO_MATCH} adaptive K: the simulator chose K per sequence from its acceptance, at most {k}, "
                     f"and fell back to plain decoding where speculation did not pay; {engine}'s number of "
                     f"speculative tokens is fixed{own}, so the simulated maximum {k} is exported")
    if spec.proposer == "draft" and draft.tp is not None and draft.tp != sim.tp:
        notes.append(f"the profile priced the draft at tp {draft.tp} and the target at tp {sim.tp}")
    return notes


def assemble(kind: type[S], sim: Simulated, candidate: str, replicas: int | None, settings: list[Setting],
              notes: list[str], speculative: Callable[[Simulated, SpeculativeSpec, list[str]], list[Setting]]) -> S:
    """What both engines add the same way after their batching and prefix settings: the KV cache dtype where it
    is the simulated format, the speculative flags (``speculative``: the engine's), the paths no engine serves
    as simulated, the routing note, and the model."""
    strategy = sim.scenario.strategy
    comp = strategy.compression
    if comp is not None and comp.mode in KV_CACHE_DTYPES:
        settings.append(Setting("--kv-cache-dtype", KV_CACHE_DTYPES[comp.mode][kind.KEY],
                                f"candidate compression.mode {comp.mode!r}: E4M3, one byte per element with "
                                "per-tensor scales, as simulated"))
    if strategy.speculative is not None:
        settings += speculative(sim, strategy.speculative, notes)
    notes += _path_notes(sim, kind.ENGINE) + _routing_note(sim, replicas) + _dp_notes(sim, kind.ENGINE)
    model, why = _checkpoint(kind.KEY, sim, settings, notes)
    return kind(candidate, model, why, replicas, tuple(settings), tuple(notes), sim.gpus)


def _checkpoint(engine: str, sim: Simulated, settings: list[Setting], notes: list[str]) -> tuple[str, str]:
    """(the model the engine loads, why) for the profile's weight precision, adding the settings that serve the
    simulated weights and expert layout: a checkpoint stored at that precision (``QUANTIZED_REPOS``) as it is;
    fp8 from a 16-bit checkpoint by the engine's online fp8 quantization (E4M3 weights and activations, what the
    estimator's fp8 GEMM tables time); experts sharded by expert parallelism over the TP group where the profile
    was built so (``key.expert_parallel``)."""
    key, name = sim.profile.key, sim.profile.model.name
    base = name_and_tp(name)[0]
    repo = QUANTIZED_REPOS.get((base, key.dtype))
    if repo is not None:
        model, why = repo, f"profile model.name {name!r} with {key.dtype} weights: the checkpoint stores them so"
    else:
        model, why = _hf(name)
        why = f"profile model.name {name!r}: {why}"
        if key.dtype == "fp8":
            settings.append(Setting("--quantization", "fp8", "profile key.dtype 'fp8': fp8 (E4M3) weights and "
                                    "activations, as the profile's fp8 GEMM tables were timed; the engine quantizes "
                                    "the 16-bit checkpoint when it loads it"))
        elif key.dtype not in ("fp16", "bf16", "fp32"):
            notes.append(f"{NO_MATCH} the profile's {key.dtype} weights: no checkpoint stored at that precision is "
                         f"known for {base!r} (export/settings.py QUANTIZED_REPOS) and no engine quantizes to it "
                         "online")
    if key.expert_parallel:
        flag, value = ("--enable-expert-parallel", None) if engine == "vllm" else ("--ep-size", str(sim.gpus))
        group = (f"the {sim.tp} GPUs of the TP group" if sim.dp == 1 else
                 f"all {sim.gpus} GPUs of the replica (tp {sim.tp} x attention_dp {sim.dp}"
                 + ("; vLLM's EP size is DP x TP)" if engine == "vllm" else ")"))
        settings.append(Setting(flag, value, f"profile key.expert_parallel: the experts sharded by expert "
                                f"parallelism over {group}, as the profile's MoE layers were timed (the attention "
                                f"stays {'tensor-parallel' if sim.dp == 1 else 'data-parallel over the ranks'})"))
    return model, why


def _dp_notes(sim: Simulated, engine: str) -> list[str]:
    """What attention data parallelism means for the served replica (none without it)."""
    if sim.dp == 1:
        return []
    limits = ("--max-num-seqs and --max-num-batched-tokens are each rank's, as simulated" if engine == "vLLM" else
              "--max-running-requests and --chunked-prefill-size are the ranks' sum, which SGLang divides by "
              "--dp-size")
    return [f"attention data parallelism (profile key.attention_dp {sim.dp}): one replica is this one {engine} "
            f"server on {sim.gpus} GPUs, {sim.dp} ranks of tp {sim.tp}, each running attention for its own batch "
            f"over its own KV pool, the MoE layers over all {sim.gpus} GPUs in lockstep (a rank with nothing to run "
            f"joins with an empty pass); {limits}. The server spreads requests over its ranks itself ({engine}'s "
            "own balancing, not the simulator's router)"]
