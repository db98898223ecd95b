"""Speculative decoding mechanics on tiny random models: a round emits accepted + 1 tokens (1 at zero
accept, K+1 at full accept), both paged caches hold exactly the accepted prefix after every
round (block tables and K/V contents), batching with a different K and acceptance per sequence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.engine.speculative.oracle import OracleProposer
from tripath.core.request import RequestSpec
from tripath.core.speculative import FixedK
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.model import LlamaModel
from tripath.engine.sampling import SamplingParams
from tripath.engine.speculative.decoding import SpeculativeDecoding
from tripath.engine.speculative.proposers import DraftModelProposer, PromptLookupProposer
from tripath.engine.workload_replay import PromptSource, serve

CFG = EngineConfig(num_blocks=64, block_size=4)
V = 256


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, V, (n,), generator=g).tolist() for n in (7, 13, 3)]


@pytest.fixture(scope="module")
def reference(tiny_target, prompts) -> list[list[int]]:
    return Engine(tiny_target, CFG).generate(prompts, 20)


def _cache_prefix(engine_kv: torch.Tensor, blocks: list[int], n: int) -> torch.Tensor:
    """K/V of a sequence's first n tokens: [layers, 2, n, kv_heads, head_dim]."""
    picked = engine_kv[:, :, blocks]  # [L, 2, nb, bs, H, D]
    return picked.reshape(*picked.shape[:2], -1, *picked.shape[-2:])[:, :, :n]


@pytest.mark.parametrize("k", [1, 3, 6])
def test_round_emits_accepted_plus_one_with_per_sequence_acceptance(tiny_target, prompts, reference, k):
    right = {0: 0, 1: k, 2: 1}  # zero accept, full accept, one accepted then a rejection
    ref = dict(enumerate(reference))
    eng = Engine(tiny_target, CFG, strategy=SpeculativeDecoding(OracleProposer(ref, right, V), FixedK(k)))
    for i, p in enumerate(prompts):
        eng.add_request(p, 20, request_id=i)
    first = eng.step()
    assert first.prefill_seqs == 3 and first.emitted_tokens == 3 and first.draft_tokens == 0
    while eng.has_unfinished:
        before = {s.request_id: len(s.output_ids) for s in eng.scheduler.running}
        rec = eng.step()
        for rid, kk in zip(before, rec.ks, strict=True):
            seq = eng.sequences[rid]
            assert kk == min(k, 20 - before[rid] - 1)  # K capped by what the request still needs
            emitted = len(seq.output_ids) - before[rid]
            assert emitted == min(right[rid], kk) + 1  # zero accept -> 1 token, full accept -> K+1
            if not seq.finished:  # the target cache holds exactly the accepted prefix
                assert eng.kv_manager.tables[rid].num_tokens == seq.num_computed == seq.num_tokens - 1
    outs = [eng.output(i) for i in range(3)]
    assert outs == reference
    assert eng.kv_manager.blocks_used == 0  # every block came back
    expected = drafted = 0
    for rid in right:  # replay the rounds of each request by hand: K capped, min(right, K) accepted
        have = 1
        while have < 20:
            kk = min(k, 20 - have - 1)
            expected += min(right[rid], kk)
            drafted += kk
            have += min(right[rid], kk) + 1
    assert eng.strategy.counters.num_accepted_tokens == expected
    assert eng.strategy.counters.num_draft_tokens == drafted


def _prefill_kv(tiny_target: LlamaModel, tokens: list[int]) -> torch.Tensor:
    """The plain engine's cache after prefilling tokens: [layers, 2, len, kv_heads, head_dim]."""
    plain = Engine(tiny_target, CFG)
    plain.add_request(tokens, 2, request_id=0)
    plain.step()
    return _cache_prefix(plain.backend.kv.kv, plain.kv_manager.block_table(0), len(tokens))


def test_caches_hold_exactly_the_accepted_prefix_with_a_real_draft(tiny_target, tiny_draft, prompts, reference):
    proposer = DraftModelProposer(tiny_draft, CFG.num_blocks, CFG.block_size)
    eng = Engine(tiny_target, CFG, strategy=SpeculativeDecoding(proposer, FixedK(4)))
    for i, p in enumerate(prompts):
        eng.add_request(p, 20, request_id=i)
    rounds = 0
    while eng.has_unfinished and rounds < 4:
        eng.step()
        rounds += 1
        for seq in eng.scheduler.running:
            rid, n = seq.request_id, seq.num_tokens - 1
            assert eng.kv_manager.tables[rid].num_tokens == seq.num_computed == n
            d = proposer.manager.tables.get(rid)
            assert proposer.computed.get(rid, 0) <= n and (d is None or d.num_tokens == proposer.computed[rid])
            # contents: the same K/V as a fresh prefill of the accepted tokens (stale slots are past n)
            got = _cache_prefix(eng.backend.kv.kv, eng.kv_manager.block_table(rid), n)
            want = _prefill_kv(tiny_target, (seq.prompt_ids + seq.output_ids)[:n])
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert rounds == 4 and eng.strategy.counters.num_drafts > 0


def test_draft_model_batched_greedy_equals_target_only(tiny_target, tiny_draft, prompts, reference):
    for k in (2, 5):
        proposer = DraftModelProposer(tiny_draft, CFG.num_blocks, CFG.block_size)
        eng = Engine(tiny_target, CFG, strategy=SpeculativeDecoding(proposer, FixedK(k)))
        assert eng.generate(prompts, 20) == reference
        assert eng.kv_manager.blocks_used == 0 and proposer.manager.blocks_used == 0


def test_prompt_lookup_finds_the_latest_ngram_and_proposes_its_continuation():
    pld = PromptLookupProposer(V, min_ngram=1, max_ngram=3)
    #          0  1  2  3  4  5  6  7  8  9
    tokens = [5, 6, 7, 1, 5, 6, 8, 2, 5, 6]
    assert pld.lookup(tokens, 3) == [8, 2, 5]  # "5 6" last seen at 4..5, followed by 8 2 5
    assert pld.lookup([1, 2, 3, 4], 2) == []  # no earlier occurrence of any suffix
    assert pld.lookup([9, 4, 9], 5) == [4, 9]  # the continuation may be shorter than K


def test_prompt_lookup_batched_greedy_equals_target_only(tiny_target, prompts, reference):
    repetitive = [p * 3 for p in prompts]  # copies give the lookup something to find
    want = Engine(tiny_target, CFG).generate(repetitive, 12)
    eng = Engine(tiny_target, CFG, strategy=SpeculativeDecoding(PromptLookupProposer(V), FixedK(4)))
    assert eng.generate(repetitive, 12) == want
    assert eng.strategy.counters.num_drafts > 0


def test_sampled_speculation_is_seeded(tiny_target, tiny_draft, prompts):
    sp = SamplingParams(temperature=0.8, top_p=0.9)

    def run() -> list[list[int]]:
        proposer = DraftModelProposer(tiny_draft, CFG.num_blocks, CFG.block_size, torch.Generator().manual_seed(5))
        eng = Engine(tiny_target, CFG, torch.Generator().manual_seed(6), SpeculativeDecoding(proposer, FixedK(3)))
        return eng.generate(prompts, 16, sp)

    a, b = run(), run()
    assert a == b and all(len(o) == 16 for o in a)


def test_the_serving_loop_runs_the_speculative_engine(tiny_target, tiny_draft):
    proposer = DraftModelProposer(tiny_draft, CFG.num_blocks, CFG.block_size)
    eng = Engine(tiny_target, CFG, strategy=SpeculativeDecoding(proposer, FixedK(3)))
    reqs = [RequestSpec(i, 0.002 * i, 9, 7, "dialogue") for i in range(4)]
    res = serve(eng, reqs, PromptSource(np.random.default_rng(0), V, None))
    assert [r.status for r in res.records] == ["completed"] * 4
    assert all(r.first_token_s <= r.finish_s for r in res.records)
    # every generated token is accounted for by the step records: 1 per prefill + accepted + 1 per round
    assert sum(s.emitted_tokens for s in res.steps) == 4 * 7  # (the warm-up runs before the records start)


def test_speculation_runs_in_the_engines_scheduler_with_preemption_and_chunked_prefill(tiny_target, tiny_draft,
                                                                                        prompts):
    # 12 blocks of 4 hold 48 tokens, the three requests need 27 + 33 + 23: the scheduler must preempt, and a
    # 16-token budget splits prompts and caps K; both the target's and the draft's pools come back empty
    tight = EngineConfig(num_blocks=12, block_size=4, max_batched_tokens=16)
    want = Engine(tiny_target, tight).generate(prompts, 20)
    proposer = DraftModelProposer(tiny_draft, tight.num_blocks, tight.block_size)
    eng = Engine(tiny_target, tight, strategy=SpeculativeDecoding(proposer, FixedK(4)))
    ids = [eng.add_request(p, 20) for p in prompts]
    steps = []
    while eng.has_unfinished:
        steps.append(eng.step())
        for seq in eng.scheduler.running:  # between steps the target's cache holds no draft slot
            assert eng.kv_manager.tables[seq.request_id].num_tokens <= seq.num_tokens - 1
    assert [eng.output(i) for i in ids] == want
    assert sum(s.num_preempted for s in steps) > 0 and eng.strategy.counters.num_drafts > 0
    assert all(s.num_tokens <= tight.max_batched_tokens for s in steps)  # drafts count against the budget
    assert eng.kv_manager.blocks_used == 0 and proposer.manager.blocks_used == 0


def test_long_prompts_prefill_in_chunks_under_speculation(tiny_target, tiny_draft):
    long = [list(range(i, i + 40)) for i in (1, 50)]  # 40-token prompts, 8-token budget: five chunks each
    cfg = EngineConfig(num_blocks=64, block_size=4, max_batched_tokens=8)
    want = Engine(tiny_target, CFG).generate(long, 10)
    eng = Engine(tiny_target, cfg, strategy=SpeculativeDecoding(DraftModelProposer(tiny_draft, 64, 4), FixedK(3)))
    assert eng.check_request(40, 10) is None
    assert eng.generate(long, 10) == want


def test_speculative_decoding_serves_one_engine_with_paged_or_compressed_kv(tiny_target, tiny_draft):
    from tripath.engine.tiered.tier_config import TierConfig

    strategy = SpeculativeDecoding(DraftModelProposer(tiny_draft, 64, 4))
    Engine(tiny_target, CFG, strategy=strategy)
    with pytest.raises(ValueError, match="one per engine"):
        Engine(tiny_target, CFG, strategy=strategy)
    tiered = EngineConfig(num_blocks=64, block_size=4, tiered=TierConfig(chunk_tokens=4, device_pages=8, host_pages=8,
                                                                              ssd_pages=0, prefetch=False))
    with pytest.raises(ValueError, match="tiered"):
        Engine(tiny_target, tiered, strategy=SpeculativeDecoding(DraftModelProposer(tiny_draft, 64, 4)))
