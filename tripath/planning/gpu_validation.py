"""The GPU validation tables: tripath's shipped GPU profiles against published GPU results, as markdown.

Each table is recomputed from the shipped profiles; the errors are reported as they come out (no coefficient is
adjusted to any of these targets). docs/gpu_validation.md holds the output with the method and the discussion.
"""

from __future__ import annotations

from tripath.core.data_dirs import PROFILES_DIR
from tripath.planning.vllm_validation import PROFILE, SOURCE, StageResult, validate
from tripath.profile.profile import load_profile


def _pct(x: float) -> str:
    return f"{x:+.0%}"


def _ms(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def vllm_serving_table(results: list[StageResult]) -> str:
    """Measured vs simulated P50/P90/P99 per stage, with the relative errors."""
    lines = [f"### vLLM serving on H100, Llama-2-70B TP4 (profile `{PROFILE}`)", "",
             f"Measured: {SOURCE}. Per-token measured = 2 x the reported TPOT (see the method).", "",
             "| stage | metric | measured P50 / P90 / P99 (ms) | simulated P50 / P90 / P99 (ms) "
             "| error P50 / P90 / P99 |",
             "|---|---|---|---|---|"]
    for r in results:
        s = r.stage
        if s.overloaded:
            continue
        errors = r.errors()
        measured = {"TTFT": s.ttft_ms, "per token": tuple(2.0 * v for v in s.tpot_ms), "E2E": s.e2e_ms}
        simulated = {"TTFT": r.ttft_ms, "per token": r.per_token_ms, "E2E": r.e2e_ms}
        for name, key in (("TTFT", "ttft"), ("per token", "per_token"), ("E2E", "e2e")):
            m, sim, e = measured[name], simulated[name], errors[key]
            lines.append(f"| {s.label} | {name} | {' / '.join(_ms(v) for v in m)} | "
                         f"{' / '.join(_ms(v) for v in sim)} | {' / '.join(_pct(v) for v in e)} |")
    lines += ["", "| stage | measured output tok/s | simulated output tok/s | error | cost queries outside the "
              "measured domain |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.stage.label}{' (overloaded)' if r.stage.overloaded else ''} | {r.stage.output_tok_s:.0f} "
                     f"| {r.output_tok_s:.0f} | {_pct(r.throughput_error)} | {r.outside_domain:.1%} |")
    return "\n".join(lines)


def render_tables() -> str:
    """Every validation table, as the generated block of docs/gpu_validation.md."""
    profile = load_profile(PROFILES_DIR / f"{PROFILE}.json")
    return vllm_serving_table(validate(profile))


