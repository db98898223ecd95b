"""Checkpoint folders: round trips (single file, sharded, tied, transformers-written) and clear errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from tripath.core.errors import InputError
from tripath.engine.model.checkpoint import INDEX_FILE, WEIGHTS_FILE, load_checkpoint, save_checkpoint
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


CONFIG = PRESETS["tiny-gqa"]
IDS = torch.arange(0, 40).view(1, 40)


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    return LlamaModel(CONFIG, torch.Generator().manual_seed(4)).eval()


def _same_logits(a: LlamaModel, b: LlamaModel) -> bool:
    with torch.no_grad():
        return torch.equal(a(IDS), b(IDS))


def test_single_file_round_trip(model, tmp_path):
    save_checkpoint(model, CONFIG, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", WEIGHTS_FILE]  # no temp files left
    config, loaded = load_checkpoint(tmp_path)
    assert config == CONFIG and _same_logits(model, loaded)


def test_sharded_round_trip(model, tmp_path):
    save_checkpoint(model, CONFIG, tmp_path, max_shard_bytes=60_000)
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 2 and all((tmp_path / s).is_file() for s in shards)
    assert set(index["weight_map"]) == set(model.state_dict())
    _, loaded = load_checkpoint(tmp_path)
    assert _same_logits(model, loaded)


def test_tied_embeddings_and_dtype_cast(tmp_path):
    config = replace(CONFIG, tie_word_embeddings=True)
    model = LlamaModel(config).eval()
    save_checkpoint(model, config, tmp_path)
    assert "lm_head.weight" not in load_file(tmp_path / WEIGHTS_FILE)  # as HF writes tied models
    _, loaded = load_checkpoint(tmp_path, dtype=torch.bfloat16)
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert loaded.lm_head.weight.dtype == torch.bfloat16


def test_loads_what_transformers_saves(tmp_path):
    hf = LlamaForCausalLM(LlamaConfig(**CONFIG.to_hf_dict())).eval()
    hf.save_pretrained(tmp_path, safe_serialization=True)
    config, loaded = load_checkpoint(tmp_path)
    assert config == CONFIG
    with torch.no_grad():
        assert (loaded(IDS) - hf(IDS).logits).abs().max().item() <= 1e-4


def _saved(model: LlamaModel, tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    save_checkpoint(model, CONFIG, tmp_path)
    return tmp_path / WEIGHTS_FILE, load_file(tmp_path / WEIGHTS_FILE)


def test_missing_folder_config_and_weights(model, tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(InputError, match="missing config.json"):
        load_checkpoint(tmp_path)
    save_checkpoint(model, CONFIG, tmp_path)
    (tmp_path / WEIGHTS_FILE).unlink()
    with pytest.raises(InputError, match="missing weights"):
        load_checkpoint(tmp_path)


def test_missing_tensor_names_it(model, tmp_path):
    path, tensors = _saved(model, tmp_path)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, path)
    with pytest.raises(InputError) as err:
        load_checkpoint(tmp_path)
    assert err.value.field == "model.layers.1.mlp.up_proj.weight" and "missing" in err.value.problem


def test_unexpected_tensor_names_it(model, tmp_path):
    path, tensors = _saved(model, tmp_path)
    tensors["model.layers.9.mlp.up_proj.weight"] = torch.zeros(2)
    save_file(tensors, path)
    with pytest.raises(InputError, match=r"model\.layers\.9\.mlp\.up_proj\.weight: unexpected"):
        load_checkpoint(tmp_path)


def test_wrong_shape_names_tensor_and_shapes(model, tmp_path):
    path, tensors = _saved(model, tmp_path)
    tensors["model.norm.weight"] = torch.ones(CONFIG.hidden_size + 1)
    save_file(tensors, path)
    with pytest.raises(InputError, match=r"model\.norm\.weight: wrong shape \[65\], expected \[64\]"):
        load_checkpoint(tmp_path)


def test_wrong_dtype_is_rejected(model, tmp_path):
    path, tensors = _saved(model, tmp_path)
    tensors["model.norm.weight"] = torch.ones(CONFIG.hidden_size, dtype=torch.int32)
    save_file(tensors, path)
    with pytest.raises(InputError, match=r"model\.norm\.weight: wrong dtype I32"):
        load_checkpoint(tmp_path)


def test_truncated_file_is_rejected(model, tmp_path):
    path, _ = _saved(model, tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="not a readable safetensors file") as err:
        load_checkpoint(tmp_path)
    assert err.value.source == str(path)


def test_missing_shard_and_bad_config(model, tmp_path):
    save_checkpoint(model, CONFIG, tmp_path, max_shard_bytes=60_000)
    shard = sorted(tmp_path.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(InputError, match="is missing"):
        load_checkpoint(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(raw | {"num_key_value_heads": 3}))
    with pytest.raises(InputError) as err:
        load_checkpoint(tmp_path)
    assert "num_kv_heads" in str(err.value) and err.value.source.endswith("config.json")


def test_resaving_in_another_layout_leaves_no_stale_weights(model, tmp_path):
    save_checkpoint(model, CONFIG, tmp_path, max_shard_bytes=60_000)
    other = LlamaModel(CONFIG, torch.Generator().manual_seed(99)).eval()
    save_checkpoint(other, CONFIG, tmp_path)  # single file now: the old index must not win
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", WEIGHTS_FILE]
    _, loaded = load_checkpoint(tmp_path)
    assert _same_logits(other, loaded)
    save_checkpoint(model, CONFIG, tmp_path, max_shard_bytes=200_000)
    assert not (tmp_path / WEIGHTS_FILE).exists()
    _, loaded = load_checkpoint(tmp_path)
    assert _same_logits(model, loaded)
