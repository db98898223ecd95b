"""aiconfigurator-core's silicon sample against tripath and against the estimator's own static prediction.

``systems/silicon_sample.csv`` in the installed aiconfigurator-core (Apache-2.0, read where it is installed, never
copied) holds end-to-end serving measurements at a fixed client concurrency: ``batch_size`` users each send the
next request when the previous one ends, prompts of ``isl`` tokens, ``osl`` output tokens, one replica of
``tp_size`` GPUs. ``silicon_ttft_ms`` / ``silicon_tpot_ms`` are the benchmark client's *means* (NVIDIA's tooling
that fills these columns writes ``metrics["mean_ttft"] * 1000`` and ``metrics["mean_tpot"] * 1000``; TPOT per
request is (E2E - TTFT) / (output - 1), averaged over requests).

In scope: ``mode == "agg"`` rows of the models tripath ships (``MODEL_PATHS``: dense and mixture-of-experts;
DeepSeek-R1 has DeepSeek-V3's architecture and is served with its profiles), on H100 SXM / H200 / B200
(``SYSTEMS``), served by vLLM or SGLang. Covered (``load_rows``): 16-bit or fp8 weights (gpt-oss-120b's rows, which
the sample labels ``nvfp4``, are its own mxfp4 checkpoint: tripath's "fp4"), one replica of tp 1, 2, 4 or 8 GPUs
with the experts sharded by TP (``moe_tp_size == tp_size``, ``moe_ep_size == 1``) or by expert parallelism over
the same GPUs (``moe_ep_size == tp_size``, ``moe_tp_size == 1``, the ``-ep`` profiles), and a shipped profile for
the row's layout. Attention data parallelism is covered too (a mixture-of-experts replica of D ranks of
``tp_size`` GPUs, the experts over all D x tp of them: the ``-dpD`` profiles, one rank's each): D is
``attention_dp_size``, or, where the sample leaves it blank (the H200 Qwen3-235B vLLM rows), the experts' GPUs
``moe_tp_size x moe_ep_size`` over ``tp_size`` (tp 1 with moe_tp 2 is D = 2, tp 2 with moe_tp 4 is D = 2), the
experts again by TP (``moe_ep_size == 1``) or by EP (``moe_tp_size == 1``) over the D x tp GPUs. Every other
in-scope row is counted, with the reason, by ``not_covered`` (the doc's second table).

An assumption, aiconfigurator-core's convention: with attention data parallelism a row's ``batch_size`` is per DP
rank (its own results report ``concurrency = batch_size x attention_dp_size``), so the measured load is
``users = batch_size x D`` clients; the sample does not say how its runs counted them.

Each row is answered twice, and neither answer is adjusted to the measurement:

- tripath: the row's aic profile (``profile_name``), a closed loop of ``users = batch_size x D`` (``users``; D 1
  without attention DP) on one replica of tp x D GPUs, fixed lengths,
  chunked batching with recompute preemption (vLLM V1 and SGLang both chunk prefills and preempt by recompute),
  ``max_batched_tokens`` 8,192 (vLLM V1's API-server default on GPUs of 70 GiB or more, SGLang's
  ``chunked_prefill_size`` on 80-160 GB GPUs) and ``max_batch_size`` max(256, batch_size) (per rank) so the
  batch never caps the load. ``requests_for(users)`` requests; the first ``users`` (sent together at t = 0) are
  warm-up and dropped. TTFT counts from the send, TPOT is per request (finish - first token) / (osl - 1), both
  averaged.
- the estimator: ``run_static(batch_size, isl, osl)`` -> (context_ms, generation_ms, total): TTFT =
  context_ms (the whole batch prefilled together), TPOT = generation_ms / (osl - 1); with attention DP compiled
  for the row's D (attention_dp_size, the experts over tp x D GPUs), ``batch_size`` per rank. It is compiled
  with the row's backend version when the package accepts it, else its current version for that system and
  backend (``estimator_version`` in the output says which).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np

from tripath.core.data_dirs import DATA_DIR, PROFILES_DIR
from tripath.core.errors import InputError
from tripath.profile.catalog import MODELS, profile_name
from tripath.profile.profile import Profile, load_profile
from tripath.simulator.runner import simulate
from tripath.simulator.scenario.scenario import scenario_from_dict

ROWS_CSV = DATA_DIR / "validation" / "silicon_rows.csv"
# the silicon sample's model_path -> (tripath model, weights when gemm_quant_mode is empty: the checkpoint's own)
MODEL_PATHS = {
    "deepseek-ai/DeepSeek-R1": ("deepseek-v3", "fp8"),  # DeepSeek-V3's architecture (same config shapes)
    "deepseek-ai/DeepSeek-V3": ("deepseek-v3", "fp8"),
    "meta-llama/Llama-3.1-70B": ("llama-3.1-70b", "fp16"),
    "meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b", "fp16"),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("llama-3.1-8b", "fp8"),
    "Qwen/Qwen3-32B": ("qwen3-32b", "fp16"),
    "Qwen/Qwen3-235B-A22B-FP8": ("qwen3-235b-a22b", "fp8"),
    "openai/gpt-oss-120b": ("gpt-oss-120b", "fp4"),
}
# checkpoints whose own 4-bit experts the sample labels nvfp4: gpt-oss-120b ships mxfp4 experts (tripath's "fp4",
# tripath/calibrate/aic/architecture.py); NVFP4 weights of any other model are not modelled
OWN_FP4 = {"openai/gpt-oss-120b"}
TPS = (1, 2, 4, 8)  # one replica on one node
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200"}
BACKENDS = ("vllm", "sglang")
# gemm_quant_mode -> tripath weights; fp8_block (block-scaled fp8) moves the same bytes as per-tensor fp8
QUANT_MODES = {"fp8": "fp8", "fp8_block": "fp8"}
MAX_BATCHED_TOKENS = 8192
MIN_REQUESTS = 40
SIGNIFICANT = 6
COLUMNS = ("id", "system", "backend", "backend_version", "model_path", "gemm_quant_mode", "tp", "moe_tp", "moe_ep",
           "attention_dp", "concurrency",
           "isl", "osl", "profile", "requests", "silicon_ttft_ms", "silicon_tpot_ms", "tripath_ttft_ms",
           "tripath_ttft_median_ms", "tripath_tpot_ms", "estimator_version", "estimator_ttft_ms",
           "estimator_tpot_ms", "tripath_ttft_err", "tripath_tpot_err", "estimator_ttft_err", "estimator_tpot_err")


def silicon_csv() -> Path:
    """The installed aiconfigurator-core's silicon sample (an InputError when the package is not installed)."""
    try:
        root = resources.files("aiconfigurator_core")
    except ModuleNotFoundError as exc:
        raise InputError(None, "aiconfigurator-core", "not installed (pip install -e '.[test]')") from exc
    return Path(str(root / "systems" / "silicon_sample.csv"))


@dataclass(frozen=True)
class SiliconRow:
    """One measured agg run and what tripath serves it with."""

    id: str
    system: str
    backend: str
    backend_version: str  # "" when the sample does not say
    model_path: str
    gemm_quant_mode: str  # "" when the checkpoint's own (16-bit) weights
    tp: int
    concurrency: int  # the sample's batch_size: concurrent client users (per attention data-parallel rank)
    isl: int
    osl: int
    ttft_ms: float  # measured means
    tpot_ms: float
    moe_tp: int = 0  # a mixture-of-experts row's expert sharding (0: a dense model, none given)
    moe_ep: int = 0
    attention_dp: int = 1  # attention data-parallel ranks of tp GPUs (``rank_count``)

    @property
    def expert_parallel(self) -> bool:
        """Experts sharded by expert parallelism over the replica's tp x D GPUs (the ``-ep`` profiles); over one GPU
        both are one."""
        gpus = self.tp * self.attention_dp
        return gpus > 1 and self.moe_ep == gpus

    @property
    def users(self) -> int:
        """Concurrent clients of the closed loop: ``batch_size`` per attention data-parallel rank (module
        docstring: aiconfigurator-core's convention, an assumption)."""
        return self.concurrency * self.attention_dp

    @property
    def model(self) -> str:
        return MODEL_PATHS[self.model_path][0]

    @property
    def hardware(self) -> str:
        return SYSTEMS[self.system]

    @property
    def weights(self) -> str:
        if self.gemm_quant_mode == "nvfp4" and self.model_path in OWN_FP4:
            return "fp4"
        return QUANT_MODES.get(self.gemm_quant_mode, MODEL_PATHS[self.model_path][1])

    @property
    def group(self) -> tuple[str, str, str]:
        """(system, backend, model) of the doc's table."""
        return self.system, self.backend, self.model

    @property
    def profile(self) -> str:
        return profile_name(MODELS[self.model].short, self.hardware, self.tp, self.weights, self.backend,
                            self.expert_parallel, self.attention_dp)


def _in_scope(raw: dict[str, str]) -> bool:
    return (raw["mode"] == "agg" and raw["model_path"] in MODEL_PATHS and raw["system"] in SYSTEMS
            and raw["backend"] in BACKENDS)


def _int(value: str, default: int) -> int:
    return int(float(value)) if value.strip() else default


def rank_count(raw: dict[str, str]) -> int:
    """A mixture-of-experts row's attention data-parallel ranks: ``attention_dp_size``, or where it is blank the
    experts' GPUs (moe_tp x moe_ep) over tp_size when they are a whole multiple of it (else 1: ``uncovered_reason``
    says why); 1 for a dense model."""
    if not MODELS[MODEL_PATHS[raw["model_path"]][0]].moe:
        return 1
    if raw["attention_dp_size"].strip():
        return _int(raw["attention_dp_size"], 1)
    tp, experts = _int(raw["tp_size"], 1), _int(raw["moe_tp_size"], 1) * _int(raw["moe_ep_size"], 1)
    return experts // tp if experts % tp == 0 and experts > tp else 1


def _row(raw: dict[str, str]) -> SiliconRow:
    moe = MODELS[MODEL_PATHS[raw["model_path"]][0]].moe
    return SiliconRow(raw["id"], raw["system"], raw["backend"], raw["backend_version"], raw["model_path"],
                      raw["gemm_quant_mode"], _int(raw["tp_size"], 1), int(float(raw["batch_size"])),
                      int(raw["isl"]), int(raw["osl"]), float(raw["silicon_ttft_ms"]), float(raw["silicon_tpot_ms"]),
                      _int(raw["moe_tp_size"], 1) if moe else 0, _int(raw["moe_ep_size"], 1) if moe else 0,
                      rank_count(raw))


def uncovered_reason(raw: dict[str, str], profiles_dir: Path = PROFILES_DIR) -> str | None:
    """Why an in-scope row is not answered (None: it is covered), the first that applies."""
    quant, tp = raw["gemm_quant_mode"], _int(raw["tp_size"], 1)
    if quant == "nvfp4" and raw["model_path"] not in OWN_FP4:
        return "NVFP4 weights: not modelled"
    if quant not in ("", "nvfp4") and quant not in QUANT_MODES:
        return f"{quant} weights: not modelled"
    if _int(raw["pp_size"], 1) > 1:
        return "pipeline parallel: not modelled"
    if tp not in TPS:
        return f"tp {tp}: more GPUs than one 8-GPU replica"
    row = _row(raw)
    if MODELS[row.model].moe:
        dp = row.attention_dp
        if row.moe_tp * row.moe_ep != tp * dp:
            return (f"experts over moe tp {row.moe_tp} x ep {row.moe_ep} GPUs, not the replica's tp {tp} x "
                    f"attention dp {raw['attention_dp_size'] or '-'}: not modelled")
        if dp not in TPS or tp * dp > max(TPS):
            return f"attention dp {dp} x tp {tp}: more GPUs than one 8-GPU replica"
        if not (row.moe_ep == 1 or row.moe_tp == 1):
            return f"experts by TP {row.moe_tp} x EP {row.moe_ep}: not modelled"
    if not (profiles_dir / f"{row.profile}.json").is_file():
        return f"no profile {row.profile}: {UNBUILT.get(row.profile, _index_skipped().get(row.profile, 'not built'))}"
    return None


# profiles a covered layout would need that the builder refuses (its reason; tripath profile build says so)
UNBUILT = {"aic-deepseek-v3-tp4-b200-fp8-sglang": "deepseek-v3 (673 GB of fp8 weights) leaves under 10 % of 4 x "
                                                   "NVIDIA B200 for KV"}


@cache
def _index_skipped() -> dict[str, str]:
    """data/aic-profiles.json's skipped profiles and the builder's reason, without the model folder's path."""
    import json

    skipped = json.loads((DATA_DIR / "aic-profiles.json").read_text(encoding="utf-8"))["skipped"]
    return {name: reason.split(": ", 1)[1] if reason.startswith("/") else reason for name, reason in skipped.items()}


def _raws(path: Path | None) -> list[dict[str, str]]:
    with (path or silicon_csv()).open(newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if _in_scope(r)]


def load_rows(path: Path | None = None) -> list[SiliconRow]:
    """Every covered row of the silicon sample (module docstring), in file order."""
    return [_row(r) for r in _raws(path) if uncovered_reason(r) is None]


def not_covered(path: Path | None = None) -> list[tuple[dict[str, str], str]]:
    """Every in-scope row that is not answered, with the reason, in file order."""
    return [(r, why) for r in _raws(path) if (why := uncovered_reason(r)) is not None]


def not_covered_table(path: Path | None = None) -> str:
    """The in-scope rows not answered, counted per (system, backend, model path, reason)."""
    counts: dict[tuple[str, str, str, str], int] = {}
    for raw, why in not_covered(path):
        key = (raw["system"], raw["backend"], raw["model_path"], why)
        counts[key] = counts.get(key, 0) + 1
    lines = ["| system | backend | model | rows | why not covered |", "|---|---|---|---|---|"]
    lines += [f"| {s} | {b} | {m} | {n} | {why} |" for (s, b, m, why), n in sorted(counts.items())]
    lines.append(f"| all | | | {sum(counts.values())} | |")
    return "\n".join(lines)


def requests_for(concurrency: int) -> int:
    """4 x the closed loop's users (``concurrency``), at least MIN_REQUESTS: the first ``concurrency`` are warm-up,
    the rest steady state."""
    return max(MIN_REQUESTS, 4 * concurrency)


def row_scenario(row: SiliconRow) -> dict[str, object]:
    """The row as a scenario (a parsed-TOML dict): closed loop of ``row.users``, fixed lengths, one replica of tp
    x D GPUs (the profile's attention data-parallel ranks)."""
    return {
        "name": f"silicon-{row.id}",
        "description": f"aiconfigurator-core silicon sample row {row.id}",
        "workload": {"requests": requests_for(row.users),
                     "arrival": {"kind": "closed", "users": row.users},
                     "tasks": {"dialogue": 1.0},
                     "prompt_tokens": {"kind": "fixed", "value": row.isl},
                     "output_tokens": {"kind": "fixed", "value": row.osl}},
        "cluster": {"gpus": row.tp * row.attention_dp},
        "batching": {"policy": "chunked", "preemption": "recompute", "max_batch_size": max(256, row.concurrency),
                     "max_batched_tokens": MAX_BATCHED_TOKENS},
    }


@dataclass(frozen=True)
class Simulated:
    """tripath's steady-state answer for one row (ms)."""

    ttft_mean: float
    ttft_median: float
    tpot_mean: float
    requests: int  # measured requests (after warm-up)


def simulate_row(row: SiliconRow, profile: Profile, seed: int = 0) -> Simulated:
    """Simulate the row on ``profile``; requests sent in the warm-up (id < users) are dropped."""
    result = simulate(scenario_from_dict(row_scenario(row), None), profile, seed=seed)
    records = [r for r in result.runs[0].records if r.completed and r.request_id >= row.users]
    if not records:
        raise InputError(row.id, "requests", "no request completed after the warm-up")
    ttft = np.array([(r.first_token_s - r.arrival_s) * 1e3 for r in records])
    tpot = np.array([(r.finish_s - r.first_token_s) * 1e3 / max(1, r.output_tokens - 1) for r in records])
    return Simulated(float(ttft.mean()), float(np.median(ttft)), float(tpot.mean()), len(records))


@cache
def shipped_profile(name: str) -> Profile:
    """A shipped profile, read once per process."""
    return load_profile(PROFILES_DIR / f"{name}.json")


def _fmt(value: float | int | str) -> str:
    return f"{value:.{SIGNIFICANT}g}" if isinstance(value, float) else str(value)


def relative_error(predicted: float, measured: float) -> float:
    """predicted / measured - 1."""
    return predicted / measured - 1.0


@dataclass(frozen=True)
class EstimatorAnswer:
    """The estimator's static answer for a row (ms) and the backend version its tables came from; computed by the
    caller (scripts/silicon_validation.py), which may import the estimator: the planning layer does not."""

    version: str
    ttft_ms: float
    tpot_ms: float


def evaluate(row: SiliconRow, estimator: EstimatorAnswer) -> dict[str, str]:
    """One output row (``COLUMNS``, values as written to the CSV) for a silicon row."""
    sim = simulate_row(row, shipped_profile(row.profile))
    est_ttft, est_tpot = estimator.ttft_ms, estimator.tpot_ms
    values: dict[str, float | int | str] = {
        "id": row.id, "system": row.system, "backend": row.backend, "backend_version": row.backend_version,
        "model_path": row.model_path, "gemm_quant_mode": row.gemm_quant_mode, "tp": row.tp,
        "moe_tp": row.moe_tp or "", "moe_ep": row.moe_ep or "",
        "attention_dp": row.attention_dp if row.moe_tp else "",
        "concurrency": row.concurrency, "isl": row.isl, "osl": row.osl, "profile": row.profile,
        "requests": sim.requests, "silicon_ttft_ms": row.ttft_ms, "silicon_tpot_ms": row.tpot_ms,
        "tripath_ttft_ms": sim.ttft_mean, "tripath_ttft_median_ms": sim.ttft_median, "tripath_tpot_ms": sim.tpot_mean,
        "estimator_version": estimator.version, "estimator_ttft_ms": est_ttft, "estimator_tpot_ms": est_tpot,
        "tripath_ttft_err": relative_error(sim.ttft_mean, row.ttft_ms),
        "tripath_tpot_err": relative_error(sim.tpot_mean, row.tpot_ms),
        "estimator_ttft_err": relative_error(est_ttft, row.ttft_ms),
        "estimator_tpot_err": relative_error(est_tpot, row.tpot_ms),
    }
    return {k: _fmt(values[k]) for k in COLUMNS}


def read_results(path: Path = ROWS_CSV) -> list[dict[str, str]]:
    """The written per-row results."""
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_results(rows: Iterable[dict[str, str]], path: Path = ROWS_CSV) -> None:
    """The per-row results as CSV (``COLUMNS``), one line per silicon id."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _mape(rows: list[dict[str, str]], column: str) -> float:
    return float(np.mean([abs(float(r[column])) for r in rows]))


def mape_table(results: list[dict[str, str]]) -> str:
    """TTFT and TPOT MAPE per (system, backend, model) for tripath and the estimator, then over all rows."""
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for r in results:
        model = MODEL_PATHS[r["model_path"]][0]
        groups.setdefault((r["system"], r["backend"], model), []).append(r)
    lines = ["| system | backend | model | rows | tripath TTFT MAPE | estimator TTFT MAPE | tripath TPOT MAPE "
             "| estimator TPOT MAPE |", "|---|---|---|---|---|---|---|---|"]
    labelled = [*sorted(groups.items()), (("all", "", ""), results)]
    for (system, backend, model), rows in labelled:
        cells = [_pct(_mape(rows, c)) for c in ("tripath_ttft_err", "estimator_ttft_err", "tripath_tpot_err",
                                                  "estimator_tpot_err")]
        lines.append(f"| {system} | {backend} | {model} | {len(rows)} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{x:.0%}" if math.isfinite(x) else "n/a"
