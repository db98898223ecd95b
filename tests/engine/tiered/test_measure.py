"""The measurement helpers behind scripts/measurements/measure_kv.py and benchmarks/bench_tiered.py."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import load_script
from tripath.engine.kv.modes import KVCompression
from tripath.engine.kv.quality import (
    compare,
    greedy_acceptance,
    greedy_with_cache,
    needle_prompts,
    teacher_forced_logits,
)
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel

CFG = PRESETS["tiny-gqa"]
_METER = load_script("scripts/measurements/paging_meter.py")  # a scripts-only helper, not a package module
LINKS, measure_paging = _METER.LINKS, _METER.measure_paging


@pytest.fixture(scope="module")
def model(one_torch_thread) -> LlamaModel:
    return LlamaModel(CFG, torch.Generator().manual_seed(1)).eval()


def test_paging_moves_whole_pages_over_every_link(tmp_path):
    step, links = measure_paging(CFG, 200, chunk_tokens=16, steps=2, sinks=4, window=32, ssd_dir=str(tmp_path))
    page_bytes = 2 * 16 * CFG.num_kv_heads * CFG.head_dim * 4
    assert [p.link for p in links] == list(LINKS)
    for p in links:
        assert p.pages > 0 and p.bytes == p.pages * page_bytes and p.seconds > 0
        # ms per 2K tokens = seconds per token moved x 2048, a token being all layers' K and V
        tokens = p.bytes / CFG.kv_bytes_per_token(4)
        assert p.ms_per_2k_tokens == pytest.approx(p.seconds * 1e3 / tokens * 2048)
    assert 0.0 <= step.hidden_share <= 1.0 and step.paging_ms_per_step > 0
    assert not list(tmp_path.iterdir())  # the SSD tier cleaned up after itself


def test_a_draft_identical_to_the_target_is_always_accepted(model):
    prompt = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    accepted, proposed, rejections, rounds = greedy_acceptance(model, model, prompt, 13, KVCompression("fp"), k=5)
    # 13 tokens: rounds of 5 accepted drafts + 1 target token (6, 6), then K capped to 0 for the last one
    assert (accepted, proposed, rejections, rounds) == (10, 10, 0, 3)


def test_acceptance_replay_hand_computed(model):
    prompt = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    other = LlamaModel(CFG, torch.Generator().manual_seed(9)).eval()  # a draft that rarely agrees
    text = greedy_with_cache(model, prompt, 12, KVCompression("fp"))
    with torch.inference_mode():
        guess = other(torch.tensor([prompt + text]))[0, len(prompt) - 1 : -1].argmax(-1).tolist()
    match = [g == t for g, t in zip(guess, text, strict=True)]
    accepted, proposed, rejections, rounds = greedy_acceptance(model, other, prompt, 12, KVCompression("fp"), k=3)
    pos = acc = prop = rej = rnd = 0  # replay by hand: each round proposes min(3, left - 1), stops at a miss
    while pos < 12:
        kk = min(3, 11 - pos)
        n = next((i for i in range(kk) if not match[pos + i]), kk)
        acc, prop, rej, rnd, pos = acc + n, prop + kk, rej + (n < kk), rnd + 1, pos + n + 1
    assert (accepted, proposed, rejections, rounds) == (acc, prop, rej, rnd)
    assert rejections > 0


def test_full_precision_mode_has_zero_divergence(model):
    prompt = torch.randint(0, 256, (70,), generator=torch.Generator().manual_seed(3)).tolist()
    ref = prompt[:40]
    fp, fp_bytes = teacher_forced_logits(model, prompt, ref, KVCompression("fp", value_group=8))
    q = compare(fp, fp, ref, fp_bytes)
    assert q.kl_sum == pytest.approx(0.0, abs=1e-6) and q.top1_agree == len(ref)
    assert fp_bytes == CFG.kv_bytes_per_token(4)
    int4, int4_bytes = teacher_forced_logits(model, prompt, ref, KVCompression("int4", group=16, value_group=8))
    q4 = compare(fp, int4, ref, int4_bytes)
    assert q4.kl_sum > 0 and int4_bytes < fp_bytes / 2


def test_needle_prompts_hold_the_fact_early_and_ask_at_the_end():
    report = "Report: Zephyr Turbines\nValemont Paper grew. The weather was foggy. Umbra Optics declined."
    pairs = needle_prompts([report], 3, 50, seed=0)
    for prompt, answer in pairs:
        assert prompt.startswith("Report: Zephyr Turbines\nZephyr Turbines employs" + answer + " people")
        assert prompt.endswith("\nSummary: Zephyr Turbines employs") and len(prompt) > 100
