"""Inference transform: fuse q/k/v and gate/up projections into one matmul each.

Model code stays plain math (model.py); this rewrites a loaded model for serving.  The
separate HF-named parameters become views into the fused matrix, so the state_dict keeps
HF's names and values, no weight memory is duplicated, and an in-place update of either
name changes both.  Fewer, wider matmuls matter most for small batches, where each
launch (GPU) or call (CPU) costs more than its arithmetic.
"""

from __future__ import annotations

import torch
from torch import nn

from tripath.engine.model.model import LlamaModel


def _fuse(weights: list[nn.Parameter]) -> tuple[torch.Tensor, list[nn.Parameter]]:
    """Concatenate along output rows; return the fused matrix and parameters that view into it."""
    fused = torch.cat([w.detach() for w in weights], dim=0)  # [sum(out_i), in]
    views, start = [], 0
    for w in weights:
        rows = w.shape[0]
        views.append(nn.Parameter(fused[start : start + rows], requires_grad=w.requires_grad))
        start += rows
    return fused, views


@torch.no_grad()
def fuse_projections(model: LlamaModel) -> LlamaModel:
    """In place: every layer computes q/k/v and gate/up with one matmul each. Returns the model."""
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if attn.qkv_weight is None:
            fused, (q, k, v) = _fuse([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
            attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight = q, k, v
            attn.qkv_weight = fused
        if mlp.gate_up_weight is None:
            fused, (gate, up) = _fuse([mlp.gate_proj.weight, mlp.up_proj.weight])
            mlp.gate_proj.weight, mlp.up_proj.weight = gate, up
            mlp.gate_up_weight = fused
    return model
