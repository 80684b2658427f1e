"""Scaled dot-product attention kept whole through PyTorch's decompositions.

Core-ATen decomposition turns ``F.scaled_dot_product_attention`` into its maths (the
query and key each scaled by the root of the scale, a guard for fully masked rows):
correct, but no longer the one op fusec runs as one attention kernel. So the
``torch.compile`` backend rewrites Dynamo's calls of it into ``fusec::sdpa``, an
opaque custom op with the same arguments (PyTorch's own SDPA when run in eager), and
``torch.export`` programs are decomposed with SDPA left out of the table; both then
lower to ``ai.attention`` (``torch_lowerings``). An SDPA that Dynamo's graph holds inside
a function it does not inline (``F.multi_head_attention_forward``: torchvision's ViT)
reaches AOTAutograd whole and becomes the fused kernel ATen picks for the device (cuDNN,
flash or memory-efficient on CUDA, flash on CPU); those lower to ``ai.attention`` too,
the CPU one kept out of the decomposition tables here.

The same tables keep the activations fusec has one op for (``KEPT_ACTIVATIONS``:
hardswish, hardsigmoid, SiLU, Mish) whole: core ATen writes them as float32 maths
between two casts for f16/bf16 tensors, which the cuda target ran as a pointwise kernel
after the conv (MobileNetV3: 121 kernels against the ONNX path's 99, whose HardSwish and
HardSigmoid are one op each and fuse into the conv's epilogue).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import fx


@torch.library.custom_op("fusec::sdpa", mutates_args=())
def sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` as one opaque op."""
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )


@sdpa.register_fake
def _sdpa_shape(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *_: Any, **__: Any
) -> torch.Tensor:
    """The result's shape: the query's, with the value's last dim (the other arguments,
    ``sdpa``'s, change no shape)."""
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


#: Dynamo's targets of an SDPA call.
_SDPA_TARGETS = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)


def keep_attention(gm: fx.GraphModule) -> int:
    """Make each SDPA call of a Dynamo graph a ``fusec::sdpa`` call; their count."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _SDPA_TARGETS:
            node.target = torch.ops.fusec.sdpa.default
            count += 1
    if count:
        gm.recompile()
    return count


#: Activations kept out of the decomposition tables: each lowers to one ai op.
KEPT_ACTIVATIONS = ("hardswish", "hardsigmoid", "silu", "mish")


def _keep_activations(table: dict) -> dict:
    for name in KEPT_ACTIVATIONS:
        table.pop(getattr(torch.ops.aten, name).default, None)
    return table


def core_decompositions_keeping_attention() -> Any:
    """PyTorch's core-ATen decompositions (the backend's AOTAutograd table) but those of
    the fused SDPA kernels ATen picks for an SDPA that Dynamo's graph holds inside a
    function it does not inline (``F.multi_head_attention_forward``, torchvision's ViT):
    ``_scaled_dot_product_flash_attention_for_cpu`` stays one node, as the CUDA ones do
    (none of them has a decomposition), and lowers to ``ai.attention``; and but those of
    ``KEPT_ACTIVATIONS``."""
    from torch._decomp import core_aten_decompositions

    table = core_aten_decompositions()
    table.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    return _keep_activations(table)


def decompositions_keeping_attention() -> dict:
    """``torch.export``'s default decompositions but SDPA's, its CPU kernel's and
    ``KEPT_ACTIVATIONS``' (each stays one node)."""
    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.scaled_dot_product_attention.default, None)
    table.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    return _keep_activations(table)
