"""LlamaModel against HF transformers' LlamaForCausalLM: same config, same weights, same logits (fp32)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tripath.engine.kv.paged import KVCacheManager, KVTensors
from tripath.engine.kv.paged_attention import PagedAttention, SequenceChunk
from tripath.engine.model.config import PRESETS, ModelConfig
from tripath.engine.model.model import LlamaModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


TOL = 1e-4
CONFIGS = {
    "mha": PRESETS["tiny-mha"],
    "gqa-theta5e5": PRESETS["tiny-gqa"],  # 8 query heads over 2 KV heads, rope_theta 500000
    "gqa-tied-theta1e3": replace(PRESETS["tiny-gqa"], num_kv_heads=4, rope_theta=1000.0, tie_word_embeddings=True),
}


def _pair(config: ModelConfig, seed: int = 0) -> tuple[LlamaModel, LlamaForCausalLM]:
    ours = LlamaModel(config, torch.Generator().manual_seed(seed)).eval()
    hf = LlamaForCausalLM(LlamaConfig(**config.to_hf_dict())).eval()
    hf.load_state_dict(ours.state_dict(), strict=True)  # names and shapes match 1:1, or this raises
    return ours, hf


def _ids(n: int, batch: int = 1, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (batch, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dense_prefill_logits_match_hf(name):
    ours, hf = _pair(CONFIGS[name])
    ids = _ids(70, batch=2)
    with torch.no_grad():
        diff = (ours(ids) - hf(ids).logits).abs().max().item()
    assert diff <= TOL


def test_hf_config_reads_our_rope_theta():
    # if transformers ignored our theta the logits would differ; make that failure visible here
    hf_cfg = LlamaConfig(**CONFIGS["gqa-theta5e5"].to_hf_dict())
    assert hf_cfg.rope_parameters["rope_theta"] == 500000.0
    ours, _ = _pair(CONFIGS["gqa-theta5e5"])
    other = LlamaModel(replace(CONFIGS["gqa-theta5e5"], rope_theta=10000.0), torch.Generator().manual_seed(0))
    ids = _ids(40)
    with torch.no_grad():
        assert (ours(ids) - other(ids)).abs().max().item() > 1e-3


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_incremental_decode_through_paged_cache_matches_hf(name):
    """Prefill 2 prompts, then decode step by step through block tables; logits = HF's full-sequence ones."""
    config = CONFIGS[name]
    ours, hf = _pair(config)
    block = 4
    manager = KVCacheManager(num_blocks=64, block_size=block)
    kv = KVTensors.allocate(config, 64, block, torch.float32, "cpu")
    seqs = _ids(30, batch=2, seed=5)  # two sequences of 30 tokens; prompts of 11 and 7 tokens
    prompt = {0: 11, 1: 7}
    with torch.no_grad():
        ref = hf(seqs).logits  # [2, 30, V]
        for sid, n in prompt.items():  # prefill each prompt alone
            manager.reserve(sid, n)
            att = PagedAttention(kv, [SequenceChunk(0, n, manager.block_table(sid))], config.kv_group_size)
            logits = ours(seqs[sid : sid + 1, :n], att.positions, att)[0]
            assert (logits - ref[sid, :n]).abs().max().item() <= TOL
        for step in range(15):  # then decode both in ONE batched forward per step
            pos = [prompt[0] + step, prompt[1] + step]
            chunks = []
            for sid in (0, 1):
                manager.reserve(sid, pos[sid] + 1)
                chunks.append(SequenceChunk(pos[sid], 1, manager.block_table(sid)))
            att = PagedAttention(kv, chunks, config.kv_group_size)
            ids = torch.tensor([[seqs[0, pos[0]], seqs[1, pos[1]]]])  # [1, 2] packed
            logits = ours(ids, att.positions, att)[0]  # [2, V]
            assert (logits[0] - ref[0, pos[0]]).abs().max().item() <= TOL
            assert (logits[1] - ref[1, pos[1]]).abs().max().item() <= TOL


def test_logits_index_selects_positions():
    ours, _ = _pair(CONFIGS["mha"])
    ids = _ids(20)
    with torch.no_grad():
        full = ours(ids)
        picked = ours(ids, logits_index=torch.tensor([3, 19]))
    assert picked.shape == (1, 2, full.shape[-1])
    # same math on a smaller matmul: equal up to fp32 summation order
    torch.testing.assert_close(picked[0], full[0, [3, 19]], rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_forward_close_to_fp32(dtype):
    config = CONFIGS["gqa-theta5e5"]
    ours = LlamaModel(config).eval()
    ids = _ids(32)
    with torch.no_grad():
        ref = ours(ids)
        low = ours.to(dtype)(ids)
    assert low.dtype == dtype
    # 0.02-std random weights give logits of order 0.1; half precision keeps ~3 significant digits
    assert (low.float() - ref).abs().max().item() < 0.05 * ref.abs().max().item() + 1e-2


def test_num_params_matches_module_and_published_llama2():
    for config in CONFIGS.values():
        with torch.device("meta"):
            model = LlamaModel(config, initialize=False)
        assert config.num_params() == sum(p.numel() for p in model.parameters())
    # Llama-2-7b-hf has 6,738,415,616 parameters; 70b: 68,976,648,192 (HF model cards / safetensors index)
    assert PRESETS["llama2-7b"].num_params() == 6_738_415_616
    assert PRESETS["llama2-70b"].num_params() == 68_976_648_192


def test_hf_dict_round_trip_and_validation():
    for config in PRESETS.values():
        assert ModelConfig.from_hf_dict(config.to_hf_dict()) == config
        hf = LlamaConfig(**config.to_hf_dict()).to_dict()
        assert ModelConfig.from_hf_dict(hf) == config  # what transformers itself writes reads back too
    with pytest.raises(ValueError, match="num_kv_heads"):
        ModelConfig(vocab_size=8, hidden_size=64, intermediate_size=8, num_layers=1, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="hidden_size"):
        ModelConfig(vocab_size=8, hidden_size=0, intermediate_size=8, num_layers=1, num_heads=4, num_kv_heads=4)
    with pytest.raises(ValueError, match="rope_type"):
        ModelConfig.from_hf_dict(PRESETS["tiny-mha"].to_hf_dict() | {"rope_parameters": {"rope_type": "llama3"}})
    assert PRESETS["llama2-70b"].kv_bytes_per_token(2) == 327_680  # 0.3125 MiB, as SEEDS.md notes


def test_same_generator_seed_same_weights():
    a = LlamaModel(CONFIGS["mha"], torch.Generator().manual_seed(7))
    b = LlamaModel(CONFIGS["mha"], torch.Generator().manual_seed(7))
    c = LlamaModel(CONFIGS["mha"], torch.Generator().manual_seed(8))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


def test_fused_projections_same_logits_and_state_dict(tmp_path):
    from tripath.engine.model.checkpoint import load_checkpoint, save_checkpoint
    from tripath.engine.model.fusion import fuse_projections

    config = CONFIGS["gqa-theta5e5"]
    plain = LlamaModel(config, torch.Generator().manual_seed(3)).eval()
    fused = fuse_projections(LlamaModel(config, torch.Generator().manual_seed(3)).eval())
    attn = fused.model.layers[0].self_attn
    # the HF-named weights are views into the fused matrix: no extra memory, one source of truth
    assert attn.q_proj.weight.data_ptr() == attn.qkv_weight.data_ptr()
    assert attn.k_proj.weight.data_ptr() == attn.qkv_weight[config.num_heads * config.head_dim :].data_ptr()
    assert list(fused.state_dict()) == list(plain.state_dict())
    ids = _ids(33)
    with torch.no_grad():
        torch.testing.assert_close(fused(ids), plain(ids), rtol=0, atol=1e-5)
    save_checkpoint(fused, config, tmp_path)  # views are saved as their own tensors
    _, loaded = load_checkpoint(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), plain(ids), rtol=0, atol=1e-5)
