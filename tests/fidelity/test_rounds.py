"""Per-request draft rounds: the engine side records them, tripath/fidelity/compare.py compares their spread.

Engine side on tiny random models (the draft IS the target, so every draft token is accepted and the
counts follow from the lengths by hand); compare on synthetic records with hand-computed statistics.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tripath.core.records import COMPLETED, RequestRecord, rejected_record
from tripath.core.request import RequestSpec
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.fidelity.compare import compare, round_rows, tokens_per_round
from tripath.fidelity.engine_side import measure


def rec(rid: int, rounds: int, accepted: int, out: int = 21) -> RequestRecord:
    return RequestRecord(rid, "math", float(rid), 50, out, 0, float(rid), rid + 0.1, rid + 0.1 + 0.01 * (out - 1),
                         COMPLETED, "", rounds, accepted)


def test_tokens_per_round_is_one_plus_accepted_over_rounds_of_completed_requests() -> None:
    records = [rec(0, 10, 10), rec(1, 4, 12), rec(2, 0, 0), rejected_record(3, "math", 3.0, 50, 21, "too long")]
    assert tokens_per_round(records).tolist() == [2.0, 4.0]  # no rounds and rejected: left out


def test_round_rows_by_hand() -> None:
    # real: 2, 3, 4, 5 tokens per round; sim: 3, 3, 3, 3 (the same mean, no spread)
    real = [rec(i, 4, 4 * (i + 1)) for i in range(4)]
    sim = [rec(i, 4, 8) for i in range(4)]
    t = {r.stat: r for r in round_rows(sim, real)}
    assert t["mean"].real == pytest.approx(3.5) and t["mean"].sim == pytest.approx(3.0)
    assert t["sd"].real == pytest.approx(np.std([2, 3, 4, 5], ddof=1)) and t["sd"].sim == 0.0
    assert t["sd"].error == pytest.approx(-1.0)
    assert t["p10"].real == pytest.approx(2.3)  # numpy's linear percentile: 2 + 0.3 x (3 - 2)
    assert t["p90"].real == pytest.approx(4.7)
    assert t["p90"].tail and not t["p10"].tail


def test_round_rows_need_rounds_on_both_sides() -> None:
    real = [rec(i, 0, 0) for i in range(4)]  # an engine side that did not count them
    sim = [rec(i, 4, 8) for i in range(4)]
    assert round_rows(sim, real) == []
    assert not any(r.metric == "tokens_per_round_request" for r in compare(sim, real))


@pytest.fixture(scope="module")
def target(one_torch_thread) -> LlamaModel:
    return LlamaModel(PRESETS["tiny-gqa"], torch.Generator().manual_seed(1)).eval()


def test_engine_side_records_rounds_and_accepted_per_request(target: LlamaModel) -> None:
    # draft = target: greedy drafts always match, so every round of K = 3 emits K + 1 = 4 tokens, K capped at
    # remaining - 1. Output n after the prefill's first token: n - 1 tokens by rounds of min(4, left) tokens,
    # the last plain step (1 left, K = 0) not a draft round. By hand: n = 10 -> 9 left: 4 + 4 + 1 (plain)
    # -> 2 rounds, 6 accepted; n = 7 -> 6 left: 4 + 2 -> 2 rounds, 3 + 1 = 4 accepted; n = 2 -> 1 left: plain.
    data = {"name": "rounds",  # a whole scenario: the engine side builds its engine from the parsed Scenario
            "workload": {"requests": 3, "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                         "tasks": {"code": 1.0}, "prompt_tokens": {"kind": "fixed", "value": 12},
                         "output_tokens": {"kind": "fixed", "value": 10}},
            "batching": {"policy": "continuous", "max_batch_size": 4, "max_batched_tokens": 512},
            "strategy": {"speculative": {"k": 3}}}
    requests = [RequestSpec(0, 0.0, 12, 10, "code"), RequestSpec(1, 0.0, 9, 7, "code"),
                RequestSpec(2, 0.0, 5, 2, "code")]
    measured = measure(data, requests, target, target, kv_tokens=1024, seed=0, default_k=3, clock="cpu")
    got = {r.request_id: (r.draft_rounds, r.accepted_tokens) for r in measured.records}
    assert got == {0: (2, 6), 1: (2, 4), 2: (0, 0)}
    # the engine-wide counters are the per-request ones summed
    rounds = sum(r.draft_rounds for r in measured.records)
    accepted = sum(r.accepted_tokens for r in measured.records)
    assert measured.paths["accepted_per_round"][0] == pytest.approx(accepted / rounds)
