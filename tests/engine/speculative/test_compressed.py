"""Speculative decoding with the target's KV compressed (tripath/engine/speculative/compressed.py): greedy speculation
reproduces plain greedy decoding on the same compressed store, and after every round the store holds
exactly the accepted prefix (full blocks sealed, the tail block staged with zero rows past the end)."""

from __future__ import annotations

import pytest
import torch

from tests.engine.speculative.oracle import OracleProposer
from tripath.core.speculative import FixedK
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.speculative.decoding import SpeculativeDecoding
from tripath.engine.speculative.proposers import DraftModelProposer

V = 256
BS = 4


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, V, (n,), generator=g).tolist() for n in (7, 13, 3, 30, 21)]


def _cfg(mode: str) -> EngineConfig:
    return EngineConfig(num_blocks=128, block_size=BS, kv_compression=mode)


def _check_store(eng: Engine) -> int:
    """The store holds exactly each running sequence's accepted prefix; returns the rows checked."""
    store, checked = eng.backend.store, 0
    assert store is not None
    live = set()
    for seq in eng.scheduler.running:
        table, n = eng.kv_manager.block_table(seq.request_id), seq.num_computed
        assert len(table) == -(-n // BS)  # no block past the prefix
        live.update(table)
        for index, block in enumerate(table):
            full = (index + 1) * BS <= n
            assert (block in store.staged) != full  # full blocks sealed, the partial tail staged
            if not full:
                rows = store.staged[block][:, :, n % BS :]
                assert rows.abs().sum() == 0  # rejected drafts' K/V are gone
                assert store.staged[block][:, :, : n % BS].abs().sum() > 0
                checked += BS - n % BS
    assert set(store.staged) <= live  # no staging of freed blocks
    return checked


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_greedy_speculation_equals_plain_greedy_on_the_compressed_store(tiny_target, prompts, mode):
    reference = Engine(tiny_target, _cfg(mode)).generate(prompts, 24)
    right = [4, 2, 0, 3, 1]  # per request: full accepts, partial accepts, none
    strategy = SpeculativeDecoding(OracleProposer(reference, right, V), FixedK(4))
    eng = Engine(tiny_target, _cfg(mode), strategy=strategy)
    ids = [eng.add_request(p, 24) for p in prompts]
    checked = 0
    while eng.has_unfinished:
        eng.step()
        checked += _check_store(eng)
    outs = [eng.output(i) for i in ids]
    # Exact here: the verify pass's one remaining difference (a row past a boundary the same pass
    # filled reads that block unquantized, see spec_compressed.py) flips no argmax on these prompts.
    # Measured: 120/120 tokens equal for int8 and int4.
    assert outs == reference
    assert checked > 0 and eng.strategy.counters.num_accepted_tokens > 0
    assert eng.strategy.counters.num_accepted_tokens < eng.strategy.counters.num_draft_tokens  # rollbacks happened
    assert eng.kv_manager.blocks_used == 0 and not eng.backend.store.staged


def test_truncate_drops_rejected_rows_and_blocks(tiny_target):
    eng = Engine(tiny_target, _cfg("int8"))
    store = eng.backend.store
    table = [5, 9, 2]
    for b in table:
        store.open_block(b)
        store.staged[b].fill_(1.0)
    store.seal(5)  # a full block inside the prefix: sealed, untouched by truncation
    store.truncate(table, 6)  # keeps block 5 (sealed) and 2 of block 9's 4 rows
    assert 2 not in store.staged and 5 not in store.staged
    assert store.staged[9][:, :, :2].eq(1.0).all() and store.staged[9][:, :, 2:].eq(0.0).all()
    with pytest.raises(RuntimeError, match="sealed"):
        store.truncate([5], 3)  # a sealed block cannot give rows back


def test_a_real_draft_on_int8_matches_plain_int8(tiny_target, tiny_draft, prompts):
    reference = Engine(tiny_target, _cfg("int8")).generate(prompts, 16)
    proposer = DraftModelProposer(tiny_draft, 128, BS, torch.Generator().manual_seed(4))
    eng = Engine(tiny_target, _cfg("int8"), strategy=SpeculativeDecoding(proposer, FixedK(3)))
    assert eng.generate(prompts, 16) == reference
    assert eng.kv_manager.blocks_used == 0 and not eng.backend.store.staged
