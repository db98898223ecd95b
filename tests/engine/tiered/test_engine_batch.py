"""The tiered KV cache inside the continuous-batching Engine: bit-identical to the paged pool, a fault ends one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.engine.step_record import StepRecord
from tripath.engine.tiered.tier_config import TierConfig

CFG = PRESETS["tiny-gqa"]  # 2 layers, 2 KV heads x 8 dims: a page of 16 tokens is 2 KiB in fp32
LENGTHS = (300, 170, 90, 40)  # different lengths, admitted together
NEW = 10
# 4 sequences x 2 layers x (1 sink + 2 window + 1 straddle) chunks pinned = 32 pages, plus the longest one
# layer's unpinned rest (310 tokens = 20 chunks - 4) = 48: every sequence fits on the device at once, while
# all of them hold (20 + 11 + 7 + 4) x 2 = 84 pages, so 28 go past the 8-page host tier onto the SSD.
TIERS = TierConfig(chunk_tokens=16, device_pages=48, host_pages=8, ssd_pages=1000, sink_tokens=4, window_tokens=32)
BATCH = {"max_batch_size": 8, "max_batched_tokens": 256, "block_size": 16}  # 256: prompts are prefilled in chunks


@pytest.fixture(scope="module")
def model(one_torch_thread) -> LlamaModel:
    return LlamaModel(CFG, torch.Generator().manual_seed(1)).eval()


def prompts(seed: int = 2) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=gen).tolist() for n in LENGTHS]


def run(model: LlamaModel, config: EngineConfig) -> tuple[list[list[int]], list[torch.Tensor], list[StepRecord],
                                                           Engine]:
    """Outputs, the logits of every step (as the LM head produced them) and the step records."""
    logits: list[torch.Tensor] = []
    hook = model.lm_head.register_forward_hook(lambda _m, _i, out: logits.append(out.detach().clone()))
    engine = Engine(model, config)
    try:
        ids = [engine.add_request(p, NEW) for p in prompts()]
        steps = []
        while engine.has_unfinished:
            steps.append(engine.step())
        outs = [engine.output(i) for i in ids]
    finally:
        hook.remove()
    return outs, logits, steps, engine


@pytest.mark.parametrize("prefetch", [False, True])
def test_batched_tiered_generation_is_bit_identical_to_the_paged_pool(model, tmp_path, prefetch):
    plain_out, plain_logits, plain_steps, _ = run(model, EngineConfig(num_blocks=256, **BATCH))
    tiers = TierConfig(**{**TIERS.__dict__, "ssd_dir": str(tmp_path), "prefetch": prefetch})
    out, logits, steps, engine = run(model, EngineConfig(num_blocks=1, tiered=tiers, **BATCH))
    with engine:
        # the same schedule: several sequences per step, chunked prefills beside decodes
        assert [(s.batch_size, s.num_tokens) for s in steps] == [(s.batch_size, s.num_tokens) for s in plain_steps]
        assert max(s.batch_size for s in steps) == len(LENGTHS)
        assert any(s.prefill_seqs and s.decode_seqs for s in steps)
        assert out == plain_out
        assert len(logits) == len(plain_logits)
        assert all(torch.equal(a.view(torch.int32), b.view(torch.int32)) for a, b in zip(logits, plain_logits,
                                                                                        strict=True))
        stats = engine.backend.cache.tiers.stats
        for link in ("device->host", "host->ssd", "ssd->host", "host->device"):
            assert stats.get(link).pages > 0, link
        # the steps' per-link fields add up to the tiers' own counters, in whole pages
        page = engine.backend.cache.tiers.page_bytes
        for link, name in (("host->ssd", "host_ssd"), ("ssd->host", "ssd_host"), ("device->host", "device_host")):
            moved = sum(getattr(s, f"paging_bytes_{name}") for s in steps)
            assert moved == stats.get(link).bytes and moved % page == 0
            assert sum(getattr(s, f"paging_s_{name}") for s in steps) == pytest.approx(stats.get(link).seconds)
        assert all(s.failed == () for s in steps) and not engine.errors
        assert engine.backend.cache.residency() == {"device": 0, "host": 0, "ssd": 0}  # finished: all freed
        assert engine.kv_manager.blocks_used == 0
        directory = engine.backend.cache.tiers.ssd.directory
        assert directory is not None and directory.is_dir()
    assert not directory.exists() and not list(tmp_path.iterdir())  # temp files removed on shutdown


def test_step_records_of_the_paged_pool_carry_zero_paging(model):
    _, _, steps, _ = run(model, EngineConfig(num_blocks=256, **BATCH))
    row = steps[0].to_dict()
    assert row["paging_bytes_host_ssd"] == 0 and row["paging_stall_s"] == 0.0 and "failed" not in row


def ssd_files(engine: Engine) -> list[Path]:
    directory = engine.backend.cache.tiers.ssd.directory
    assert directory is not None
    return sorted(directory.glob("page-*.kv"))


@pytest.mark.parametrize("damage", ["missing", "flipped byte", "enospc"])
def test_a_fault_ends_only_its_request_while_the_others_run(model, tmp_path, damage):
    plain_out, _, _, _ = run(model, EngineConfig(num_blocks=256, **BATCH))
    tiers = TierConfig(**{**TIERS.__dict__, "ssd_dir": str(tmp_path)})
    with Engine(model, EngineConfig(num_blocks=1, tiered=tiers, **BATCH)) as engine:
        ids = [engine.add_request(p, NEW) for p in prompts()]
        records = [engine.step() for _ in range(3)]  # every prompt prefilled; the oldest pages are on the SSD
        assert all(engine.sequences[i].output_ids for i in ids)
        cache = engine.backend.cache
        on_ssd = {key[0] for key, state in cache.pages.items() if state.tier == "ssd"}
        if damage == "enospc":
            # the next page files are written into /dev/full: whoever needs a page moved to SSD hits ENOSPC
            directory, first = cache.tiers.ssd.directory, cache.tiers.ssd.next_page_id
            for page_id in list(cache.tiers.ssd._free_ids) + list(range(first, first + 200)):
                path = directory / f"page-{page_id}.kv"
                path.unlink(missing_ok=True)
                os.symlink("/dev/full", path)
        else:
            victims = [(key, state.slot) for key, state in cache.pages.items() if state.tier == "ssd" and key[0] == 0]
            assert victims and on_ssd != {0}  # another request's pages are on the SSD too, and stay intact
            for _, page_id in victims:
                path = cache.tiers.ssd.path(page_id)
                if damage == "missing":
                    path.unlink()
                else:
                    blob = bytearray(path.read_bytes())
                    blob[-5] ^= 0x01
                    path.write_bytes(bytes(blob))
        while engine.has_unfinished:
            records.append(engine.step())
        failed = {rid for r in records for rid in r.failed}
        assert failed, "the damage must end a request"
        expected = {"missing": "PageMissing", "flipped byte": "PageCorrupt", "enospc": "FileSystemFull"}[damage]
        for rid in failed:
            assert engine.errors[rid].startswith(expected)
            assert len(engine.output(rid)) < NEW  # ended early, nothing after the fault
        if damage != "enospc":
            assert failed == {0}
        survivors = [i for i in ids if i not in failed]
        assert survivors  # the engine kept serving the others, and their outputs are exact
        for i in survivors:
            assert engine.output(i) == plain_out[i] and i not in engine.errors
        assert cache.residency() == {"device": 0, "host": 0, "ssd": 0} and engine.kv_manager.blocks_used == 0
        if damage == "enospc":
            for path in ssd_files(engine):
                if path.is_symlink():
                    path.unlink()
        # and the next request is answered exactly as the paged pool answers it
        assert engine.generate([prompts()[1]], NEW)[0] == plain_out[1]


def test_unwritable_directory_fails_only_requests_that_spill(model, tmp_path):
    plain_out, _, _, _ = run(model, EngineConfig(num_blocks=256, **BATCH))
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file where the SSD directory should be")
    tiers = TierConfig(**{**TIERS.__dict__, "ssd_dir": str(blocker / "kv")})
    with Engine(model, EngineConfig(num_blocks=1, tiered=tiers, **BATCH)) as engine:
        ids = [engine.add_request(p, NEW) for p in prompts()]
        records = []
        while engine.has_unfinished:
            records.append(engine.step())
        failed = {rid for r in records for rid in r.failed}
        assert failed and len(failed) < len(ids)
        for rid in failed:
            assert engine.errors[rid].startswith("TierUnwritable: SSD tier: cannot create a directory")
        for i in ids:
            if i not in failed:
                assert engine.output(i) == plain_out[i]
        assert engine.generate([prompts()[3]], NEW)[0] == plain_out[3]  # short: never spills


def test_requests_the_tiers_can_never_hold_are_rejected_up_front(model):
    tiers = TierConfig(chunk_tokens=16, device_pages=12, host_pages=4, ssd_pages=10, sink_tokens=4, window_tokens=32)
    with Engine(model, EngineConfig(num_blocks=1, tiered=tiers, **BATCH)) as engine:
        # 26 pages less the spare hold 12 chunks per layer: 300 + 10 tokens need 20
        assert "the tiers hold 24" in engine.check_request(300, 10)
        assert "device pool holds 12" in engine.check_request(150, 10)  # 8 pinned + 6 unpinned > 12
        assert engine.check_request(40, 10) is None


def test_device_pool_limit_makes_requests_wait_instead_of_failing(model, tmp_path):
    # room on the device for the pinned pages of about two of the four sequences at a time
    tiers = TierConfig(**{**TIERS.__dict__, "device_pages": 30, "ssd_dir": str(tmp_path)})
    plain_out, _, _, _ = run(model, EngineConfig(num_blocks=256, **BATCH))
    out, _, steps, engine = run(model, EngineConfig(num_blocks=1, tiered=tiers, **BATCH))
    with engine:
        assert out == plain_out and not engine.errors
        assert max(s.batch_size for s in steps) < len(LENGTHS)


def test_tiers_too_small_for_everyone_preempt_by_recompute_and_still_give_the_same_tokens(model, tmp_path):
    # prompts of exactly 10 and 6 chunks fill the tiers' 16 chunks per layer ((24 + 4 + 5 - 1 spare) // 2);
    # the first decode needs an 11th chunk, so the later request is preempted and recomputed afterwards
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (160, 96)]
    tiers = TierConfig(chunk_tokens=16, device_pages=24, host_pages=4, ssd_pages=5, ssd_dir=str(tmp_path),
                       sink_tokens=4, window_tokens=32)
    plain = Engine(model, EngineConfig(num_blocks=256, **BATCH))
    alone = [plain.generate([p], NEW)[0] for p in prompts]
    with Engine(model, EngineConfig(num_blocks=1, tiered=tiers, **BATCH)) as engine:
        ids = [engine.add_request(p, NEW) for p in prompts]
        steps = []
        while engine.has_unfinished:
            steps.append(engine.step())
        assert steps[0].batch_size == 2 and sum(s.num_preempted for s in steps) == 1
        assert engine.backend.cache.tiers.stats.get("ssd->host").pages > 0
        assert [engine.output(i) for i in ids] == alone and not engine.errors
        assert engine.backend.cache.residency() == {"device": 0, "host": 0, "ssd": 0}
