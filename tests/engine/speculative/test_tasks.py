"""With the shipped tiny pair (fp32): greedy speculative decoding equals greedy target-only decoding
token for token on all four tasks, for several K, batched, with the draft model and with
prompt lookup; and the acceptance it measures is a real, task-dependent number."""

from __future__ import annotations

import pytest

from tripath.core.data_dirs import MODELS_DIR
from tripath.core.speculative import AdaptiveK, ControllerConfig, FixedK, SpecCosts
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.model.model import LlamaModel
from tripath.engine.model.tokenizer import ByteTokenizer
from tripath.engine.speculative.decoding import SpeculativeDecoding
from tripath.engine.speculative.proposers import DraftModelProposer, PromptLookupProposer
from tripath.training.corpus import TASKS, load_eval_prompts

CFG = EngineConfig(num_blocks=320, block_size=16)
NEW = 32


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def pair() -> tuple[LlamaModel, LlamaModel]:
    return load_checkpoint(MODELS_DIR / "tiny-target")[1], load_checkpoint(MODELS_DIR / "tiny-draft")[1]


@pytest.fixture(scope="module")
def prompts() -> dict[str, list[list[int]]]:
    tok = ByteTokenizer()
    samples = load_eval_prompts(MODELS_DIR / "eval_prompts.jsonl")
    return {t: [tok.encode(s.prompt, add_bos=True) for s in samples if s.task == t][:2] for t in TASKS}


@pytest.fixture(scope="module")
def reference(pair, prompts) -> dict[str, list[list[int]]]:
    return {t: Engine(pair[0], CFG).generate(ps, NEW) for t, ps in prompts.items()}


@pytest.mark.parametrize("task", TASKS)
def test_greedy_speculative_equals_target_only(pair, prompts, reference, task):
    target, draft = pair
    rates = {}
    for k in (1, 3, 8):
        proposer = DraftModelProposer(draft, CFG.num_blocks, CFG.block_size)
        eng = Engine(target, CFG, strategy=SpeculativeDecoding(proposer, FixedK(k)))
        assert eng.generate(prompts[task], NEW) == reference[task], f"K={k}"
        rates[k] = eng.strategy.counters.acceptance_rate
    assert all(0.0 < r < 1.0 for r in rates.values())  # the draft is neither useless nor the target
    pld = PromptLookupProposer(target.config.vocab_size)
    lookup = Engine(target, CFG, strategy=SpeculativeDecoding(pld, FixedK(4)))
    assert lookup.generate(prompts[task], NEW) == reference[task]


def test_adaptive_engine_on_the_shipped_pair_is_lossless(pair, prompts, reference):
    target, draft = pair
    batch = [p for t in TASKS for p in prompts[t][:2]]  # all tasks in one batch, each its own K
    want = [o for t in TASKS for o in reference[t][:2]]
    ctrl = AdaptiveK(ControllerConfig(k_max=6), SpecCosts(c=0.3, verify_per_token=0.05))
    proposer = DraftModelProposer(draft, CFG.num_blocks, CFG.block_size)
    eng = Engine(target, CFG, strategy=SpeculativeDecoding(proposer, ctrl))
    ids = [eng.add_request(p, NEW) for p in batch]
    ks_seen = set()
    while eng.has_unfinished:
        ks_seen.update(eng.step().ks)
    assert [eng.output(i) for i in ids] == want
    assert len(ks_seen - {0}) >= 2  # sequences ran with different K
