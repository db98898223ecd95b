"""Real vLLM serving on H100 against the simulator: Llama-2-70B TP4, four inference-perf workloads.

The measured side is inference-sim/training at commit c4f03409 (default_args/*-llama-2-70b*-tp4-*: vLLM with
max_model_len 4096, max_num_batched_tokens 2048, max_num_seqs 128 on H100 SXM; inference-perf ``shared_prefix``
prompts, ``ignore_eos``, "constant" load), as summarised with its caveats in the shared reference
``vllm-h100-serving.md``. Only figures are cited here, never the files (the repository has no licence).

Each stage is simulated on its own as the load generator really sent it (the reference's last section):
- Poisson arrivals at the stage rate (inference-perf's "constant" load drew exponential gaps, CV 0.99-1.02);
- prompts cycled over 100 distinct prompts (a request's prompt equals the one 100 requests earlier in 98-99.6 % of
  requests), their lengths uniform over the stage's measured prompt_len min..max, outputs fixed at the requested
  output_len (EOS ignored);
- vLLM V1's defaults as the server ran them: prefix caching on (16-token blocks, tripath's prefix cache), chunked
  prefill under the 2,048-token budget, at most 128 sequences. tripath's prefix cache runs without preemption;
  the KV pool (about 500K tokens) holds every stage's working set, so vLLM's recompute preemption never had cause
  to run outside the overloaded reasoning run.
Per-token time is compared with 2 x the reported TPOT: that build of inference-perf counted about two streamed
events per token, so its TPOT is half the per-token interval (the reference gives the evidence). The overloaded
reasoning run (a third of its requests hit the client's 300 s timeout) is compared on throughput only.
Two profiles are run: ``PROFILE`` (aiconfigurator-core's measured kernels) and ``OLDER_PROFILE`` (Vidur's 2024
operator timings), so the gain is visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tripath.profile.profile import Profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict

SOURCE = ("inference-sim/training @ c4f03409 (vLLM on H100 SXM, Llama-2-70B TP4, inference-perf), as summarised "
          "in reference/vllm-h100-serving.md")
PROFILE = "aic-llama2-70b-tp4-h100"
OLDER_PROFILE = "published-llama2-70b-tp4-h100"
DISTINCT_PROMPTS = 100  # the load generator's cycle (reference: lag-100 repeats)
PREFIX_BLOCK_TOKENS = 16  # vLLM's default block size
VLLM_LIMITS = {"max_batch_size": 128, "max_batched_tokens": 2048}  # max_num_seqs, max_num_batched_tokens
QUANTILES = (50, 90, 99)


@dataclass(frozen=True)
class Stage:
    """One load stage as measured: its load, its lengths, and latency percentiles (ms) at P50/P90/P99."""

    workload: str
    stage: int
    rate_per_s: float
    duration_s: float
    prompt_range: tuple[int, int]  # measured prompt_len min, max
    output_tokens: int  # the requested output_len (ignore_eos)
    ttft_ms: tuple[float, float, float]
    tpot_ms: tuple[float, float, float]  # as reported: half the per-token interval (module docstring)
    e2e_ms: tuple[float, float, float]
    output_tok_s: float  # measured output throughput
    overloaded: bool = False

    @property
    def label(self) -> str:
        return f"{self.workload} stage {self.stage} ({self.rate_per_s:g} req/s)"


STAGES = (
    Stage("general", 0, 8.0, 600.0, (559, 589), 248, (55.2, 63.2, 121.0), (9.27, 9.45, 12.8),
          (4666.0, 4754.0, 6450.0), 1955.0),
    Stage("general", 1, 20.0, 600.0, (559, 589), 248, (68.3, 250.0, 987.0), (11.0, 11.3, 11.4),
          (5515.0, 5839.0, 6656.0), 4875.0),
    Stage("codegen", 0, 5.0, 600.0, (577, 609), 247, (51.2, 58.7, 106.0), (8.56, 8.87, 11.0),
          (4288.0, 4446.0, 5568.0), 1218.0),
    Stage("codegen", 1, 10.0, 600.0, (577, 609), 247, (56.6, 64.3, 67.7), (9.46, 9.58, 9.68),
          (4742.0, 4803.0, 4853.0), 2432.0),
    Stage("roleplay", 0, 6.0, 1200.0, (769, 808), 251, (53.5, 61.1, 96.3), (8.92, 9.24, 11.6),
          (4542.0, 4703.0, 5935.0), 1494.0),
    Stage("reasoning", 0, 4.0, 1200.0, (1056, 1117), 1448, (109886.0, 230379.0, 253549.0), (15.0, 15.2, 15.3),
          (153177.0, 273946.0, 297163.0), 3076.0, overloaded=True),
)


def stage_scenario(stage: Stage) -> dict[str, Any]:
    """The scenario of one stage (a parsed-TOML dict)."""
    low, high = stage.prompt_range
    return {
        "name": f"vllm-h100-{stage.workload}-{stage.stage}",
        "description": f"{stage.label}: {SOURCE}",
        "workload": {"duration_s": stage.duration_s,
                     "arrival": {"kind": "poisson", "rate_per_s": stage.rate_per_s},
                     "tasks": {stage.workload: 1.0},
                     "prompt_tokens": {"kind": "uniform", "low": low, "high": high},
                     "output_tokens": {"kind": "fixed", "value": stage.output_tokens},
                     "prefix": {"kind": "cycle", "prompts": DISTINCT_PROMPTS}},
        "cluster": {"gpus": 4},
        "batching": {"policy": "chunked", "preemption": "none", **VLLM_LIMITS},
        "strategy": {"prefix_cache": {"enabled": True, "block_tokens": PREFIX_BLOCK_TOKENS}},
    }


@dataclass(frozen=True)
class StageResult:
    stage: Stage
    ttft_ms: tuple[float, float, float]
    per_token_ms: tuple[float, float, float]  # simulated per-request TPOT
    e2e_ms: tuple[float, float, float]
    output_tok_s: float
    completed: int
    outside_domain: float  # fraction of cost queries outside the profile's measured domain

    def errors(self) -> dict[str, tuple[float, float, float]]:
        """Relative error (simulated / measured - 1) per metric at P50/P90/P99; per-token against 2 x TPOT."""
        measured = {"ttft": self.stage.ttft_ms, "per_token": tuple(2.0 * v for v in self.stage.tpot_ms),
                    "e2e": self.stage.e2e_ms}
        simulated = {"ttft": self.ttft_ms, "per_token": self.per_token_ms, "e2e": self.e2e_ms}
        return {k: tuple(s / m - 1.0 for s, m in zip(simulated[k], measured[k], strict=True)) for k in measured}

    @property
    def throughput_error(self) -> float:
        return self.output_tok_s / self.stage.output_tok_s - 1.0


def _pcts(values: np.ndarray) -> tuple[float, float, float]:
    p50, p90, p99 = np.percentile(values, QUANTILES)
    return float(p50), float(p90), float(p99)


def run_stage(stage: Stage, profile: Profile, seed: int = 0) -> StageResult:
    """Simulate one stage on ``profile`` (one replication)."""
    scenario = scenario_from_dict(stage_scenario(stage), None)
    result = simulate(scenario, profile, seed=seed)
    records = [r for r in result.runs[0].records if r.completed]
    ttft = np.array([(r.first_token_s - r.arrival_s) * 1000.0 for r in records])
    tpot = np.array([(r.finish_s - r.first_token_s) * 1000.0 / max(1, r.output_tokens - 1) for r in records])
    e2e = np.array([(r.finish_s - r.arrival_s) * 1000.0 for r in records])
    start = min(r.arrival_s for r in records)
    end = max(r.finish_s for r in records)
    tok_s = sum(r.output_tokens for r in records) / (end - start)
    if not stage.overloaded:  # under load the offered rate is the served one: output rate = rate x output
        tok_s = sum(r.output_tokens for r in records) / stage.duration_s
    counts = result.runs[0].extrapolations.to_dict()
    queries = counts["prefill_queries"] + counts["decode_queries"]
    outside = counts["prefill_outside_domain"] + counts["decode_outside_domain"]
    return StageResult(stage, _pcts(ttft), _pcts(tpot), _pcts(e2e), float(tok_s), len(records),
                       outside / queries if queries else 0.0)


def validate(profile: Profile, seed: int = 0) -> list[StageResult]:
    """Every stage on ``profile``."""
    return [run_stage(stage, profile, seed) for stage in STAGES]
