"""Sampled speculative decoding in the engine (temperature, top-p, the shipped pair) produces the
same token distribution as plain sampling: the second output token (the first one a speculative
round decides) of many sequences, two-sample chi-square at significance 0.001."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chi2_contingency

from tripath.core.data_dirs import MODELS_DIR
from tripath.core.speculative import FixedK
from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.checkpoint import load_checkpoint
from tripath.engine.model.tokenizer import ByteTokenizer
from tripath.engine.sampling import SamplingParams
from tripath.engine.speculative.decoding import SpeculativeDecoding
from tripath.engine.speculative.proposers import DraftModelProposer

BATCH, BATCHES = 400, 3
PROMPT = ByteTokenizer().encode("Summary: ", add_bos=True)  # an uncertain continuation: many tokens share the mass
SAMPLING = SamplingParams(temperature=1.0, top_p=0.95)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _second_tokens(make: object) -> np.ndarray:
    out = []
    for b in range(BATCHES):
        engine = make(b)
        out += [o[1] for o in engine.generate([PROMPT] * BATCH, 3, SAMPLING)]
    return np.array(out)


def _pvalue(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """Two-sample chi-square on token counts; tokens seen < 10 times in all are pooled into one cell."""
    cats = np.union1d(x, y)
    table = np.array([[np.sum(z == c) for c in cats] for z in (x, y)])  # [2, C]
    common = table.sum(0) >= 10
    pooled = np.column_stack([table[:, common], table[:, ~common].sum(1, keepdims=True)])
    pooled = pooled[:, pooled.sum(0) > 0]
    return float(chi2_contingency(pooled).pvalue), pooled.shape[1]


def test_sampled_speculation_matches_plain_sampling_in_distribution():
    target = load_checkpoint(MODELS_DIR / "tiny-target")[1]
    draft = load_checkpoint(MODELS_DIR / "tiny-draft")[1]
    cfg = EngineConfig(max_batch_size=BATCH, max_batched_tokens=BATCH * 24, num_blocks=2 * BATCH, block_size=16)
    plain = _second_tokens(lambda b: Engine(target, cfg, torch.Generator().manual_seed(100 + b)))
    spec = _second_tokens(
        lambda b: Engine(
            target,
            cfg,
            torch.Generator().manual_seed(300 + b),
            SpeculativeDecoding(
                DraftModelProposer(draft, cfg.num_blocks, cfg.block_size, torch.Generator().manual_seed(200 + b)),
                FixedK(1),  # the round after the prefill: K = min(1, 3 - 1 - 1) = 1 draft token
            ),
        )
    )
    p, cells = _pvalue(plain, spec)
    assert cells >= 3  # a real distribution, not one token
    assert p > 1e-3
    # power: a sampler that kept every draft token would emit the draft's distribution; the same test rejects it
    drafted = _second_tokens(lambda b: Engine(draft, cfg, torch.Generator().manual_seed(400 + b)))
    assert _pvalue(plain, drafted)[0] < 1e-3
