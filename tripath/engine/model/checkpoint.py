"""HF-layout checkpoints: config.json + model.safetensors (or sharded with model.safetensors.index.json).

Only safetensors, never pickle, never a download: a checkpoint is a local folder.  Every
problem with the folder (missing file, truncated file, missing / unexpected tensor, wrong
shape, non-float dtype) raises InputError naming the file and the tensor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from tripath.core.atomic import replacing, write_text
from tripath.core.errors import InputError, check_regular_file, read_input_text, shown
from tripath.engine.model.config import ModelConfig
from tripath.engine.model.model import LlamaModel

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Old HF checkpoints store the RoPE frequencies; they are recomputed here, so they are skipped.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_FLOAT_DTYPES = {"F32", "F16", "BF16", "F64"}


def _weights_to_save(model: LlamaModel, config: ModelConfig) -> dict[str, torch.Tensor]:
    state = {}
    for name, tensor in model.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        if t.untyped_storage().nbytes() != t.numel() * t.element_size():
            t = t.clone()  # a view into a larger buffer (fusion.py): safetensors needs its own storage
        state[name] = t
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # HF omits the tied head; safetensors refuses shared storage
    return state


def save_checkpoint(
    model: LlamaModel, config: ModelConfig, directory: str | os.PathLike, max_shard_bytes: int | None = None
) -> Path:
    """Write config.json and the weights (one file, or shards of at most max_shard_bytes plus an index)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    state = _weights_to_save(model, config)
    meta = {"format": "pt"}
    if max_shard_bytes is None:
        with replacing(out / WEIGHTS_FILE) as tmp:
            save_file(state, str(tmp), metadata=meta)
    else:
        shards: list[dict[str, torch.Tensor]] = [{}]
        size = 0
        for name, tensor in state.items():
            nbytes = tensor.numel() * tensor.element_size()
            if shards[-1] and size + nbytes > max_shard_bytes:
                shards.append({})
                size = 0
            shards[-1][name] = tensor
            size += nbytes
        weight_map: dict[str, str] = {}
        for i, shard in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            with replacing(out / fname) as tmp:
                save_file(shard, str(tmp), metadata=meta)
            weight_map.update({name: fname for name in shard})
        total = sum(t.numel() * t.element_size() for t in state.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        write_text(out / INDEX_FILE, json.dumps(index, indent=2))
    text = json.dumps(config.to_hf_dict() | {"torch_dtype": _dtype_name(model)}, indent=2)
    write_text(out / CONFIG_FILE, text)
    # weights of an earlier save in another layout would shadow this one (the index wins on load)
    written = {WEIGHTS_FILE} if max_shard_bytes is None else set(weight_map.values()) | {INDEX_FILE}
    for stale in [out / WEIGHTS_FILE, out / INDEX_FILE, *out.glob("model-*-of-*.safetensors")]:
        if stale.name not in written and stale.is_file():
            stale.unlink()
    return out


def _dtype_name(model: LlamaModel) -> str:
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def load_config(directory: str | os.PathLike) -> ModelConfig:
    path = Path(directory) / CONFIG_FILE
    check_regular_file(path)
    if not path.is_file():
        raise InputError(str(path), None, "missing config.json")
    try:
        return ModelConfig.from_hf_dict(_json_object(path))
    except InputError as exc:  # from_hf_dict names the key; the file is ours to add
        raise InputError(str(path), exc.field, exc.problem) from None


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in one of the checkpoint's files; anything else (unreadable, not UTF-8, malformed, nested
    past Python's stack, an integer past its digit limit, not an object) is an InputError naming the file."""
    text = read_input_text(path, f"missing {path.name}", f"cannot read {path.name}")
    try:
        raw = json.loads(text)
    except RecursionError:
        raise InputError(str(path), None, "not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, or an integer past Python's int-to-text digit limit
        raise InputError(str(path), None, f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InputError(str(path), None, "must be a JSON object")
    return raw


def _index_shards(index_path: Path) -> dict[str, str]:
    """The index's weight_map (tensor name -> shard file name), each name a file inside the checkpoint folder:
    relative, without "..", so an index cannot point the loader at a file elsewhere (symbolic links inside the
    folder, as the HF cache makes, are followed as usual)."""
    mapping = _json_object(index_path).get("weight_map")
    if not isinstance(mapping, dict):
        raise InputError(str(index_path), "weight_map", "must be an object of tensor name -> shard file name")
    for name, fname in mapping.items():
        where = f"weight_map.{name}"
        if not isinstance(fname, str) or not fname:
            raise InputError(str(index_path), where, f"must be a shard file name, got {shown(fname)}")
        shard = PurePosixPath(fname)
        if "\0" in fname or shard.is_absolute() or ".." in shard.parts:
            raise InputError(str(index_path), where, f"shard {shown(fname)} is not a file inside the checkpoint "
                                                     "folder")
    return mapping


def _weight_map(directory: Path) -> dict[str, Path]:
    """tensor name -> file holding it, from the index (sharded) or the single file."""
    index_path = directory / INDEX_FILE
    single = directory / WEIGHTS_FILE
    check_regular_file(index_path)
    check_regular_file(single)
    if index_path.is_file():
        mapping = _index_shards(index_path)
        files = {fname: directory / fname for fname in set(mapping.values())}
        for fname, fpath in files.items():
            check_regular_file(fpath)
            if not fpath.is_file():
                tensor = next(name for name, shard in mapping.items() if shard == fname)
                raise InputError(str(index_path), f"weight_map.{tensor}", f"shard {shown(fname)} is missing ({fpath})")
        return {name: files[fname] for name, fname in mapping.items()}
    if not single.is_file():
        problem = f"missing weights: no {WEIGHTS_FILE} and no {INDEX_FILE}"
        raise InputError(str(directory), WEIGHTS_FILE, problem)
    try:
        with safe_open(str(single), framework="pt") as f:
            return {name: single for name in f.keys()}
    except (SafetensorError, OSError) as exc:
        raise InputError(str(single), None, f"not a readable safetensors file: {exc}") from exc


def load_checkpoint(
    directory: str | os.PathLike, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> tuple[ModelConfig, LlamaModel]:
    """Read an HF-layout LLaMA checkpoint folder into a LlamaModel in ``dtype`` on ``device`` (eval mode)."""
    folder = Path(directory)
    if not folder.is_dir():
        raise InputError(str(folder), None, "checkpoint folder does not exist")
    config = load_config(folder)
    located = {n: p for n, p in _weight_map(folder).items() if not n.endswith(_IGNORED_SUFFIXES)}
    with torch.device("meta"):
        model = LlamaModel(config, initialize=False)
    expected = dict(model.named_parameters(remove_duplicate=False))
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight")
        located.pop("lm_head.weight", None)  # some exporters write the tied head anyway
    for name in expected:
        if name not in located:
            where = next(iter(located.values()), folder / WEIGHTS_FILE)
            raise InputError(str(where), name, "missing tensor")
    for name, path in located.items():
        if name not in expected:
            raise InputError(str(path), name, "unexpected tensor (not a LLaMA parameter for this config)")
    by_file: dict[Path, list[str]] = {}
    for name, path in located.items():
        by_file.setdefault(path, []).append(name)
    # every tensor's shape and dtype from the files' headers before any memory is taken: a config.json whose
    # sizes do not match its weights is refused here, not by an allocation of the size it claims
    _check_tensors(by_file, {name: tuple(param.shape) for name, param in expected.items()})
    model = model.to_empty(device=device).to(dtype)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    params = dict(model.named_parameters())
    with torch.no_grad():
        for path, names in by_file.items():
            try:
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    for name in names:
                        params[name].copy_(f.get_tensor(name).to(dtype))
            except SafetensorError as exc:
                raise InputError(str(path), None, f"not a readable safetensors file: {exc}") from exc
    return config, model.eval()


def _check_tensors(by_file: dict[Path, list[str]], shapes: dict[str, tuple[int, ...]]) -> None:
    """Each file holds its named tensors, each of its expected shape and a float dtype (headers only)."""
    for path, names in by_file.items():
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                present = set(f.keys())
                for name in names:
                    if name not in present:
                        raise InputError(str(path), name, "missing tensor (named in the index)")
                    tensor_slice = f.get_slice(name)
                    got = tuple(tensor_slice.get_shape())
                    if got != shapes[name]:
                        raise InputError(str(path), name, f"wrong shape {list(got)}, expected {list(shapes[name])}")
                    if tensor_slice.get_dtype() not in _FLOAT_DTYPES:
                        problem = f"wrong dtype {tensor_slice.get_dtype()}, expected F32, F16 or BF16"
                        raise InputError(str(path), name, problem)
        except SafetensorError as exc:
            raise InputError(str(path), None, f"not a readable safetensors file: {exc}") from exc
