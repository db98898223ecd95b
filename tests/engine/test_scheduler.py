"""Scheduler lookahead (a decoding strategy's draft slots): reserved with a decoding sequence's next token, counted
against the step's token budget, and never asked for a prefill chunk."""

from __future__ import annotations

from tripath.engine.kv.paged import KVCacheManager
from tripath.engine.scheduler import Scheduler, SchedulerConfig
from tripath.engine.sequence import Sequence, SequenceStatus


def _decoding(request_id: int, prompt: int) -> Sequence:
    """A sequence that has prefilled its prompt and emitted one token: its next chunk is that token."""
    seq = Sequence(request_id, list(range(prompt)), 8)
    seq.output_ids.append(0)
    seq.num_computed = prompt
    return seq


def _admit(sched: Scheduler, seq: Sequence) -> None:
    sched.add(seq)
    sched.waiting.popleft()
    sched.running.append(seq)
    sched.kv.reserve(seq.request_id, seq.num_computed)
    seq.status = SequenceStatus.RUNNING


def test_lookahead_slots_are_reserved_and_spend_the_token_budget() -> None:
    asked: list[int] = []

    def lookahead(seq: Sequence) -> int:
        asked.append(seq.request_id)
        return 3

    kv = KVCacheManager(16, 4)
    sched = Scheduler(SchedulerConfig(max_batched_tokens=10), kv, lookahead)
    a, b = _decoding(0, 5), _decoding(1, 6)
    _admit(sched, a)
    _admit(sched, b)
    sched.add(Sequence(2, list(range(9)), 4))  # a prompt: no lookahead, gets what the budget leaves
    plan = sched.schedule()
    shapes = [(c.seq.request_id, c.num_new, c.num_lookahead) for c in plan.chunks]
    # 10 tokens: 1 + 3 for each decoding sequence, then 2 of the prompt's 9 (chunked prefill)
    assert shapes == [(0, 1, 3), (1, 1, 3), (2, 2, 0)]
    assert asked == [0, 1]  # only decoding sequences are asked
    assert kv.tables[0].num_tokens == 5 + 1 + 3 and kv.tables[1].num_tokens == 6 + 1 + 3
    assert kv.tables[2].num_tokens == 2


def test_lookahead_is_capped_by_the_budget_left() -> None:
    kv = KVCacheManager(16, 4)
    sched = Scheduler(SchedulerConfig(max_batched_tokens=6), kv, lambda seq: 4)
    a, b = _decoding(0, 5), _decoding(1, 6)
    _admit(sched, a)
    _admit(sched, b)
    plan = sched.schedule()
    assert [(c.num_new, c.num_lookahead) for c in plan.chunks] == [(1, 4), (1, 0)]  # 1 + 4, then 1 + 0
    assert kv.tables[1].num_tokens == 7
