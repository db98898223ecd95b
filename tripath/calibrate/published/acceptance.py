"""Published per-task draft acceptance for named (target, draft) pairs, as profile acceptance entries.

Two tables (docs/acceptance.md gives the figures, their citations and the task mapping):

- ``llama2-70b/llama2-7b``: the seed's Table 3.1 (SEEDS.md), read from the seed profile, which holds it
  (source "seed");
- ``vicuna-7b/vicuna-68m``: Spec-Bench's SpS row (small draft model). Spec-Bench publishes one mean accepted
  tokens per round (MAT, bonus token included) over all its categories, not one per category, so every
  category gets the a with E(K, a) = MAT at the K of its SpS runs (source "derived"). The category speedups
  Spec-Bench also publishes are the validation target for the speedup predicted from this acceptance, so they
  are never used here.

Spec-Bench categories map onto tripath task names (a scenario's ``[workload.tasks]`` keys) by ``SPEC_BENCH_TASKS``;
Spec-Bench has no code category, so the pair has no ``code`` entry.
"""

from __future__ import annotations

from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError
from tripath.core.speculative import acceptance_for_tokens
from tripath.profile.profile import load_profile
from tripath.profile.speculative import TaskAcceptance

SEED_PAIR = "llama2-70b/llama2-7b"
SPEC_BENCH_PAIR = "vicuna-7b/vicuna-68m"
SEED_PROFILE = "seed-llama2-70b-a100"

# Spec-Bench category (Leaderboard.md column) -> tripath task name
SPEC_BENCH_TASKS = {"Multi-turn Conversation": "dialogue", "Translation": "translation",
                    "Summarization": "summarization", "Question Answering": "qa",
                    "Mathematical Reasoning": "math", "Retrieval-aug. Generation": "rag"}
OUTSIDE_SPEC_BENCH = ("code",)  # tripath tasks of the shipped scenarios that Spec-Bench does not measure
# hemingkx/Spec-Bench Leaderboard.md, "Leaderboard on A100", Vicuna-7B-v1.3 table, SpS row, "#Mean Accepted Tokens"
SPEC_BENCH_SPS_MAT = 2.28
# SpS runs transformers' assisted generation (evaluation/inference_sps.py, model/sps/decoding.py) pinned at
# transformers==4.37.1 (requirements.txt), whose GenerationConfig defaults num_assistant_tokens to 5
SPEC_BENCH_SPS_K = 5
SPEC_BENCH_CITATION = ("Spec-Bench (Xia et al., arXiv 2401.07851; hemingkx/Spec-Bench Leaderboard.md, A100 80GB, "
                       "Vicuna-7B-v1.3 target, vicuna-68m draft, greedy, FP16, batch 1): SpS mean accepted tokens "
                       f"{SPEC_BENCH_SPS_MAT} per round over all six categories")


def spec_bench_acceptance() -> dict[str, TaskAcceptance]:
    """The Spec-Bench SpS pair's acceptance per tripath task: the a with E(K, a) = the published MAT."""
    a = acceptance_for_tokens(SPEC_BENCH_SPS_K, SPEC_BENCH_SPS_MAT)
    entries = {}
    for category, task in SPEC_BENCH_TASKS.items():
        note = (f"{SPEC_BENCH_CITATION}; a = E^-1(K = {SPEC_BENCH_SPS_K}, {SPEC_BENCH_SPS_MAT}) with E(K, a) = "
                f"(1 - a^(K+1)) / (1 - a); assumptions: K = {SPEC_BENCH_SPS_K}, transformers 4.37.1's default "
                "num_assistant_tokens (its heuristic schedule moves K by +2 / -1 per round), and the same a in "
                f"every category (a per-category MAT is not published); Spec-Bench category {category!r}")
        entries[task] = TaskAcceptance(a, SPEC_BENCH_SPS_K, None, "derived", note)
    # Spec-Bench has no code category; the published MAT is an average over its categories, and the same a stands
    # for each of them, so a task outside them gets that overall a too, said so (the seed's tasks include code)
    for task in OUTSIDE_SPEC_BENCH:
        entries[task] = TaskAcceptance(a, SPEC_BENCH_SPS_K, None, "derived", (
            f"{SPEC_BENCH_CITATION}; a = E^-1(K = {SPEC_BENCH_SPS_K}, {SPEC_BENCH_SPS_MAT}), the overall a: Spec-Bench "
            f"has no {task!r} category, so this is the average over its six (a per-category MAT is not published), "
            f"not a measurement of {task}"))
    return entries


def seed_acceptance() -> dict[str, TaskAcceptance]:
    """The seed's Table 3.1 acceptance per task, as the seed profile holds it (source "seed")."""
    return dict(load_profile(PROFILES_DIR / f"{SEED_PROFILE}.json").acceptance)


PAIRS = {SEED_PAIR: seed_acceptance, SPEC_BENCH_PAIR: spec_bench_acceptance}


def acceptance_for_pair(name: str) -> dict[str, TaskAcceptance]:
    """The published acceptance table of the (target, draft) pair ``name`` ("TARGET/DRAFT", keys of ``PAIRS``)."""
    if name not in PAIRS:
        raise InputError(None, "acceptance pair", f"unknown (target, draft) pair {name!r}; known: "
                                                  f"{', '.join(PAIRS)}")
    return PAIRS[name]()
