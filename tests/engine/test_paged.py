"""Paged attention = dense attention; the engine's batched generation = one-at-a-time generation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import dense_greedy
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig, RequestRejected
from tripath.engine.kv.paged import KVCacheManager, KVTensors
from tripath.engine.kv.paged_attention import PagedAttention, SequenceChunk
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel, dense_causal_attention
from tripath.engine.sampling import SamplingParams, sample, top_p_filter

pytestmark = pytest.mark.usefixtures("one_torch_thread")


CONFIG = PRESETS["tiny-gqa"]
LENGTHS = [5, 17, 33, 1, 40, 9]


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    return LlamaModel(CONFIG, torch.Generator().manual_seed(1)).eval()


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(2)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in LENGTHS]


@pytest.fixture(scope="module")
def reference(model, prompts) -> list[list[int]]:
    return [dense_greedy(model, p, 10) for p in prompts]


def test_paged_attention_equals_dense_for_mixed_chunks():
    """One step holding 2 decodes, a fresh prompt and a continued chunk; every row equals dense attention."""
    torch.manual_seed(0)
    hq, hkv, d, bs = CONFIG.num_heads, CONFIG.num_kv_heads, int(CONFIG.head_dim), 4
    lengths = {0: 9, 1: 14, 2: 6, 3: 11}  # full sequence lengths
    cached = {0: 8, 1: 13, 2: 0, 3: 5}  # decode, decode, fresh prefill, continued chunk
    q = {s: torch.randn(1, n, hq, d) for s, n in lengths.items()}
    k = {s: torch.randn(1, n, hkv, d) for s, n in lengths.items()}
    v = {s: torch.randn(1, n, hkv, d) for s, n in lengths.items()}
    manager = KVCacheManager(num_blocks=32, block_size=bs)
    kv = KVTensors.allocate(CONFIG, 32, bs, torch.float32, "cpu")
    for s, c in cached.items():  # write the cached prefix through a first, separate step
        manager.reserve(s, lengths[s])
        if c:
            pre = PagedAttention(kv, [SequenceChunk(0, c, manager.block_table(s))], hq // hkv)
            pre(0, q[s][:, :c], k[s][:, :c], v[s][:, :c])
    chunks = [SequenceChunk(c, lengths[s] - c, manager.block_table(s)) for s, c in cached.items()]
    att = PagedAttention(kv, chunks, hq // hkv)
    packed = [torch.cat([t[s][:, cached[s] :] for s in lengths], dim=1) for t in (q, k, v)]  # [1, N, H, D]
    out = att(0, *packed)
    row = 0
    for s, n in lengths.items():
        ref = dense_causal_attention(q[s], k[s], v[s], hq // hkv)[0, cached[s] :]  # [new, Hq, D]
        torch.testing.assert_close(out[0, row : row + n - cached[s]], ref, rtol=0, atol=1e-5)
        row += n - cached[s]
    expected_positions = [p for s, c in cached.items() for p in range(c, lengths[s])]
    assert att.positions[0].tolist() == expected_positions


def test_batched_generation_equals_one_at_a_time(model, prompts, reference):
    engine = Engine(model, EngineConfig(block_size=4, num_blocks=128))
    assert engine.generate(prompts, 10) == reference
    alone = [Engine(model, EngineConfig(block_size=4, num_blocks=128)).generate([p], 10)[0] for p in prompts]
    assert alone == reference


def test_preemption_and_chunked_prefill_keep_outputs(model, prompts, reference):
    # 16 blocks of 4 = 64 slots for 6 sequences of up to 49 tokens: preemption is forced
    engine = Engine(model, EngineConfig(block_size=4, num_blocks=16, max_batched_tokens=20))
    ids = [engine.add_request(p, 10) for p in prompts]
    records = []
    while engine.has_unfinished:
        records.append(engine.step())
        used = engine.config.num_blocks - engine.kv_manager.pool.num_free
        assert used <= engine.config.num_blocks
    assert sum(r.num_preempted for r in records) > 0
    assert max(r.blocks_used for r in records) == 16 and records[-1].blocks_used == 0
    assert max(r.num_tokens for r in records) <= 20
    assert [engine.output(i) for i in ids] == reference
    assert engine.kv_manager.pool.num_free == 16  # everything returned
    assert all(engine.sequences[i].num_preemptions >= 0 for i in ids)


def test_step_records_account_for_every_token(model, prompts):
    engine = Engine(model, EngineConfig(block_size=8, num_blocks=64, max_batch_size=3))
    for p in prompts:
        engine.add_request(p, 4)
    records = []
    while engine.has_unfinished:
        records.append(engine.step())
    assert max(r.batch_size for r in records) <= 3
    # no preemption here: every prompt token is prefilled once, every later token decoded once
    assert sum(r.prefill_tokens for r in records) == sum(LENGTHS)
    assert sum(r.decode_seqs for r in records) == len(prompts) * 3
    assert all(r.num_tokens == r.prefill_tokens + r.decode_seqs for r in records)
    assert sorted(i for r in records for i in r.finished) == list(range(len(prompts)))
    assert all(r.wall_s > 0 for r in records)


def test_requests_that_cannot_fit_are_rejected(model):
    engine = Engine(model, EngineConfig(block_size=4, num_blocks=4))
    with pytest.raises(RequestRejected, match="pool holds 16"):
        engine.add_request(list(range(10)), 10)
    with pytest.raises(RequestRejected, match="max_position_embeddings"):
        Engine(model, EngineConfig()).add_request([1] * 500, 13)
    unchunked = Engine(model, EngineConfig(max_batched_tokens=32, chunked_prefill=False))
    with pytest.raises(RequestRejected, match="max_batched_tokens is 32"):
        unchunked.add_request([1] * 30, 4)  # 33 tokens to recompute after a preemption
    assert unchunked.generate([[1] * 30], 3)[0] == Engine(model, EngineConfig()).generate([[1] * 30], 3)[0]


def test_top_p_filter_hand_computed():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]])
    # row 0, p=0.7: 0.5 then 0.3 (mass before 0.5 < 0.7); 0.15 has 0.8 before it -> dropped
    # row 1, p=1.0: everything kept
    out = top_p_filter(probs, torch.tensor([0.7, 1.0]))
    torch.testing.assert_close(out[0], torch.tensor([0.625, 0.375, 0.0, 0.0]))
    torch.testing.assert_close(out[1], probs[1])


def test_sampling_is_seeded_and_respects_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(2000, 1)
    params = [SamplingParams(temperature=1.0, top_p=0.7)] * 2000
    a = sample(logits.clone(), params, torch.Generator().manual_seed(3))
    b = sample(logits.clone(), params, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    assert set(a.tolist()) == {0, 1}
    share = (a == 0).float().mean().item()
    assert abs(share - 0.625) < 4 * (0.625 * 0.375 / 2000) ** 0.5  # binomial, 4 sigma
    greedy = sample(logits[:3].clone(), [SamplingParams()] * 3, None)
    assert greedy.tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(temperature=1.0, top_p=0.0)


def test_temperature_generation_reproducible(model, prompts):
    params = SamplingParams(temperature=0.8, top_p=0.9)
    runs = []
    for _ in range(2):
        engine = Engine(model, EngineConfig(block_size=4, num_blocks=128), torch.Generator().manual_seed(11))
        runs.append(engine.generate(prompts[:3], 6, params))
    assert runs[0] == runs[1]


MICRO = PRESETS["tiny-mha"]


@pytest.fixture(scope="module")
def micro_model() -> LlamaModel:
    return LlamaModel(MICRO, torch.Generator().manual_seed(5)).eval()


@settings(max_examples=12, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    new_tokens=st.integers(1, 8),
    block_size=st.sampled_from([1, 3, 8]),
    spare_blocks=st.integers(0, 12),
    max_batched_tokens=st.integers(8, 64),
    max_batch_size=st.integers(1, 4),
)
def test_any_schedule_gives_the_same_greedy_outputs(
    micro_model, lengths, new_tokens, block_size, spare_blocks, max_batched_tokens, max_batch_size
):
    """Whatever the pool size and limits (preemption, chunking, queueing), outputs equal a roomy engine's."""
    g = torch.Generator().manual_seed(sum(lengths))
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]
    roomy = Engine(micro_model, EngineConfig(block_size=16, num_blocks=64))
    expected = [roomy.generate([p], new_tokens)[0] for p in prompts]
    longest = max(lengths) + new_tokens - 1
    num_blocks = -(-longest // block_size) + spare_blocks  # the longest request always fits alone
    config = EngineConfig(max_batch_size, max_batched_tokens, block_size, num_blocks)
    tight = Engine(micro_model, config)
    ids = [tight.add_request(p, new_tokens) for p in prompts]
    while tight.has_unfinished:
        rec = tight.step()
        assert rec.batch_size <= max_batch_size and rec.num_tokens <= max_batched_tokens
        live = [t.blocks for t in tight.kv_manager.tables.values()]
        flat = [b for blocks in live for b in blocks]
        assert len(flat) == len(set(flat)) == tight.kv_manager.blocks_used  # no sharing, no leak
    assert [tight.output(i) for i in ids] == expected
    assert tight.kv_manager.pool.num_free == num_blocks
