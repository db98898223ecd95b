"""The GPU validation tables: tripath's shipped GPU profiles against published GPU results, as markdown.

Each table is recomputed from the shipped profiles; the errors are reported as they come out (no coefficient is
adjusted to any of these targets). docs/gpu_validation.md holds the output with the method and the discussion.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.speculative import expected_tokens
from tripath.planning.validation.vllm_serving import OLDER_PROFILE, PROFILE, SOURCE, StageResult, validate
from tripath.profile.profile import load_profile


def _pct(x: float) -> str:
    return f"{x:+.0%}"


def _ms(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def vllm_serving_table(results: list[StageResult], older: list[StageResult]) -> str:
    """Measured vs simulated P50/P90/P99 per stage with the relative errors, on the measured-kernel profile, beside
    the older (Vidur) profile's errors on the same workload."""
    lines = [f"### vLLM serving on H100, Llama-2-70B TP4 (profile `{PROFILE}`; older `{OLDER_PROFILE}`)", "",
             f"Measured: {SOURCE}. Per-token measured = 2 x the reported TPOT (see the method). Simulated: Poisson "
             "arrivals, 100 distinct prompts cycled with prefix caching on, chunked prefill (2,048 tokens), at most "
             "128 sequences.", "",
             "| stage | metric | measured P50 / P90 / P99 (ms) | simulated P50 / P90 / P99 (ms) "
             "| error P50 / P90 / P99 | older profile's error P50 / P90 / P99 |",
             "|---|---|---|---|---|---|"]
    for r, o in zip(results, older, strict=True):
        s = r.stage
        if s.overloaded:
            continue
        errors, old = r.errors(), o.errors()
        measured = {"TTFT": s.ttft_ms, "per token": tuple(2.0 * v for v in s.tpot_ms), "E2E": s.e2e_ms}
        simulated = {"TTFT": r.ttft_ms, "per token": r.per_token_ms, "E2E": r.e2e_ms}
        for name, key in (("TTFT", "ttft"), ("per token", "per_token"), ("E2E", "e2e")):
            m, sim, e, oe = measured[name], simulated[name], errors[key], old[key]
            lines.append(f"| {s.label} | {name} | {' / '.join(_ms(v) for v in m)} | "
                         f"{' / '.join(_ms(v) for v in sim)} | {' / '.join(_pct(v) for v in e)} | "
                         f"{' / '.join(_pct(v) for v in oe)} |")
    lines += ["", "| stage | measured output tok/s | simulated output tok/s | error | older profile's error | cost "
              "queries outside the measured domain |", "|---|---|---|---|---|---|"]
    for r, o in zip(results, older, strict=True):
        lines.append(f"| {r.stage.label}{' (overloaded)' if r.stage.overloaded else ''} | {r.stage.output_tok_s:.0f} "
                     f"| {r.output_tok_s:.0f} | {_pct(r.throughput_error)} | {_pct(o.throughput_error)} | "
                     f"{r.outside_domain:.1%} |")
    return "\n".join(lines)


def render_tables() -> str:
    """Every validation table, as the generated block of docs/gpu_validation.md."""
    profile = load_profile(PROFILES_DIR / f"{PROFILE}.json")
    older = load_profile(PROFILES_DIR / f"{OLDER_PROFILE}.json")
    return "\n\n".join([spec_bench_table(), vllm_blog_table(), seed_tables(),
                         vllm_serving_table(validate(profile), validate(older))])


# Spec-Bench (Xia et al., arXiv 2401.07851; hemingkx/Spec-Bench Leaderboard.md): SpS, Vicuna-7B with a 68M draft,
# A100, greedy, fp16, batch 1: speedup per category (reference/engines.md)
SPEC_BENCH_SPEEDUP = {"multi-turn": 1.66, "translation": 1.13, "summarization": 1.62, "QA": 1.49, "math": 1.47,
                      "RAG": 1.55}
SPEC_BENCH_TASK = {"multi-turn": "dialogue", "translation": "translation", "summarization": "summarization",
                   "QA": "qa", "math": "math", "RAG": "rag"}
SPEC_BENCH_PROFILE = "published-llama2-7b-a100"
SPEC_BENCH_CONTEXT = 512  # chosen: a few hundred prompt tokens, the size of Spec-Bench's prompts (stated)


def spec_bench_table() -> str:
    """Predicted batch-1 speedup E(a, K) / (K c + v) per Spec-Bench category from that category's acceptance."""
    profile = load_profile(PROFILES_DIR / f"{SPEC_BENCH_PROFILE}.json")
    section = profile.speculative
    assert section is not None and section.round_costs is not None
    rc = section.round_costs
    lines = [f"### Spec-Bench SpS on Vicuna-7B, A100 (profile `{SPEC_BENCH_PROFILE}`, draft {section.draft_model})", "",
             "Measured: Spec-Bench Leaderboard (A100, greedy, fp16, batch 1), speedup per category. Predicted: "
             f"E(a, K) / (K c(1, S) + v(K, 1, S)) at S = {SPEC_BENCH_CONTEXT} cached tokens, with each category's "
             "acceptance from the profile (docs/acceptance.md: one a from the published mean accepted tokens, "
             "as no per-category figure is published).", "",
             "| category | acceptance a (K) | c | v(K) | predicted speedup | measured | error |",
             "|---|---|---|---|---|---|---|"]
    s = SPEC_BENCH_CONTEXT + 1.0
    for category, measured in SPEC_BENCH_SPEEDUP.items():
        entry = profile.acceptance[SPEC_BENCH_TASK[category]]
        k, a = entry.k, entry.mean
        predicted = expected_tokens(k, a) / rc.round_factor(k, 1, s)
        lines.append(f"| {category} | {a:.3f} ({k}) | {rc.cost_ratio(1, s):.3f} | {rc.verify_ratio(k, 1, s):.3f} | "
                     f"{predicted:.2f}x | {measured:.2f}x | {_pct(predicted / measured - 1.0)} |")
    return "\n".join(lines)


SEED_PROFILE_70B = "published-llama2-70b-tp2-a100"
SEED_PAGING = {4096: (0.0, 45.0), 8192: (0.0, 80.0), 16384: (35.0, 120.0), 32768: (85.0, 200.0), 65536: (150.0, 350.0)}
SEED_SP = {4096: (45.0, 25.0, 5.0), 8192: (80.0, 45.0, 5.0), 16384: (160.0, 90.0, 10.0), 32768: (320.0, 175.0, 15.0)}


def seed_tables() -> str:
    """SEEDS.md Tables 3.2 and 3.3 recomputed on the published A100 LLaMA-2-70B profile (TP2)."""
    profile = load_profile(PROFILES_DIR / f"{SEED_PROFILE_70B}.json")
    decode, prefill = profile.costs["decode"], profile.costs["prefill"]
    b = profile.model.kv_bytes_per_token
    tp = int(profile.key.tp)
    budget = profile.memory.kv_capacity_bytes // b
    link = profile.paging["device_host"]
    lines = [f"### The seed's Table 3.2 (paging) on `{SEED_PROFILE_70B}`", "",
             f"One request alone (batch 1). KV budget {budget:,} tokens "
             f"({profile.memory.kv_capacity_bytes / 2**30:.1f} "
             f"GiB over {tp} GPUs); the KV beyond it lives on the host and is read back every decode step over the "
             f"{tp} GPUs' own PCIe links in parallel ({link.cost.coefficients['bandwidth_gbps'].value:g} GB/s each, "
             "the bus figure: a lower bound on time). Per-token = the decode step + that paging.", "",
             "| length | KV (GB) | beyond the budget (GB) | paging per step: seed / here (ms) | per-token: seed P99 / "
             "here (ms) |", "|---|---|---|---|---|"]
    for length, (seed_paging, seed_p99) in SEED_PAGING.items():
        beyond = max(0, length - budget) * b
        paging = link.marginal_ms(beyond / tp)
        step = decode.evaluate(batch=1, total_context=length)
        lines.append(f"| {length // 1024}K | {length * b / 1e9:.1f} | {beyond / 1e9:.1f} | {seed_paging:g} / "
                     f"{paging:.1f} | {seed_p99:g} / {step + paging:.1f} |")
    two_k = link.marginal_ms(2048 * b / tp)
    lines += ["", f"Paging 2K more tokens costs {two_k:.1f} ms here ({tp} links of "
              f"{link.cost.coefficients['bandwidth_gbps'].value:g} GB/s), against the seed's \"about +3 ms\".", ""]
    sp = profile.sequence_parallel.get(2)
    lines += [f"### The seed's Table 3.3 (SP on 2 GPUs) on `{SEED_PROFILE_70B}` with SP degree 2 (4 GPUs)", "",
              "Prefill of one prompt of that length, one TP2 replica against one TP2 x SP2 replica (the SP section's "
              "zigzag ring, docs/seqpar_gpu.md); decode: one step at batch 1 with the KV split over the two ranks "
              "plus the decode merge and collectives.", "",
              "| length | seed: 1 GPU / 2 GPU SP (ms) | seed speedup, merge (ms) | prefill here: TP2 / SP2 (ms) | "
              "prefill speedup, merge (ms) | decode step here: TP2 / SP2 (ms) |", "|---|---|---|---|---|---|"]
    if sp is None:
        return "\n".join([*lines, "| (the profile has no SP degree 2) | | | | | |"])
    from tripath.simulator.paths.seqpar import SpPhysics

    physics = SpPhysics(sp)
    fixed = prefill.evaluate(new_tokens=0, context_tokens=0)

    def prefill_ms(t: float, c: float) -> float:
        return prefill.evaluate(new_tokens=t, context_tokens=c)

    def decode_ms(batch: float, context: float) -> float:
        return decode.evaluate(batch=batch, total_context=context)

    sp_prefill, sp_decode = physics.prefill_fn(prefill_ms, fixed), physics.decode_fn(decode_ms)
    for length, (one, two, merge) in SEED_SP.items():
        base, split = prefill_ms(length, 0), sp_prefill(length, 0)
        lines.append(f"| {length // 1024}K | {one:g} / {two:g} | {one / two:.2f}x, {merge:g} | {base:.0f} / "
                     f"{split:.0f} | {base / split:.2f}x, {physics.merge_ms(length):.1f} | "
                     f"{decode_ms(1, length):.1f} / {float(sp_decode(1, length)):.1f} |")
    return "\n".join(lines)


# vLLM blog (vllm-project.github.io/_posts/2024-10-17-spec-decode.md; reference/engines.md): Llama-3-70B on
# 4 x H100 with a draft model, ShareGPT: 1.5x faster at QPS 1, 1.4x slower at high QPS
BLOG_PROFILE = "aic-llama3.1-70b-tp4-h100"
BLOG_LOW, BLOG_HIGH = (1.0, 1.5), (0.8, 1.0 / 1.4)  # (rate, measured speedup): low is QPS 1; high is chosen below
BLOG_REQUESTS = 600


def _blog_scenario(rate: float | None, load: float | None, speculative: bool) -> dict[str, Any]:
    arrival = {"kind": "poisson", **({"rate_per_s": rate} if rate is not None else {"load_fraction": load})}
    data: dict[str, Any] = {
        "name": "vllm-blog-llama3-70b",
        "description": "ShareGPT stand-in: the Azure 2023 conversation trace's lengths (measured)",
        "workload": {"requests": BLOG_REQUESTS, "arrival": arrival, "tasks": {"dialogue": 1.0},
                     "prompt_tokens": {"kind": "empirical", "trace": "azure-conv-2023", "column": "prompt"},
                     "output_tokens": {"kind": "empirical", "trace": "azure-conv-2023", "column": "output"}},
        "cluster": {"gpus": 4},
        "batching": {"policy": "continuous", "max_batch_size": 256, "max_batched_tokens": 8192,
                     "preemption": "recompute"},
    }
    if speculative:
        data["strategy"] = {"speculative": {"k": 4}}
    return data


def vllm_blog_table() -> str:
    """Baseline / speculative mean request latency at QPS 1 and near the baseline's saturation."""
    from tripath.simulator.runner import simulate
    from tripath.simulator.scenario.scenario import scenario_from_dict

    profile = load_profile(PROFILES_DIR / f"{BLOG_PROFILE}.json")
    section = profile.speculative
    assert section is not None
    base_high = simulate(scenario_from_dict(_blog_scenario(None, BLOG_HIGH[0], False), None), profile)
    high_rate = float(base_high.rate_per_s or 0.0)

    def mean_e2e(rate: float, speculative: bool) -> float:
        result = simulate(scenario_from_dict(_blog_scenario(rate, None, speculative), None), profile)
        done = [r for r in result.runs[0].records if r.completed]
        return float(np.mean([r.finish_s - r.arrival_s for r in done]))

    lines = [f"### vLLM blog: Llama-3-70B on 4 x H100 with a draft model (profile `{BLOG_PROFILE}`, draft "
             f"{section.draft_model}, K = 4)", "",
             "Measured: the vLLM blog (2024-10-17), ShareGPT: 1.5x faster at QPS 1, 1.4x slower at high QPS. "
             "Simulated: Poisson arrivals, the Azure 2023 conversation trace's lengths standing in for ShareGPT, "
             f"{BLOG_REQUESTS} requests, dialogue acceptance from the profile, max batch 256; high QPS = 80 % of the "
             f"baseline's saturation estimate (chosen: the blog does not give its rate), {high_rate:.2f} req/s.", "",
             "| load | measured speedup | simulated speedup (mean E2E baseline / speculative) | sign |",
             "|---|---|---|---|"]
    for label, rate, measured in (("QPS 1", BLOG_LOW[0], BLOG_LOW[1]),
                                  (f"high ({high_rate:.2f} req/s)", high_rate, BLOG_HIGH[1])):
        speedup = mean_e2e(rate, False) / mean_e2e(rate, True)
        sign = "right" if (speedup > 1) == (measured > 1) else "WRONG"
        lines.append(f"| {label} | {measured:.2f}x | {speedup:.2f}x ({_pct(speedup / measured - 1.0)}) | {sign} |")
    spec_high = simulate(scenario_from_dict(_blog_scenario(None, BLOG_HIGH[0], True), None), profile)
    base_sat, spec_sat = base_high.saturation, spec_high.saturation
    if base_sat is not None and spec_sat is not None:
        lines += ["", "Saturation estimates (tripath/simulator/paths/capacity.py): baseline "
                  f"{base_sat.requests_per_s:.2f} "
                  f"req/s at batch {base_sat.batch}, speculative {spec_sat.requests_per_s:.2f} req/s: speculation "
                  f"{'lowers' if spec_sat.requests_per_s < base_sat.requests_per_s else 'raises'} the capacity."]
    return "\n".join(lines)
