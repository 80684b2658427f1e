"""ONNX ``LinearAttention`` (opset 27: linear, gated, delta and gated-delta rules) as ai
ops, its recurrence over the sequence unrolled.

Per head, a ``[d_k, d_v]`` state (``past_state``, else zeros) evolves over the T steps
as ONNX's reference defines it, in float32 (16-bit inputs are cast):

* gated rules: ``state *= exp(decay_t)`` (per head, or per key dim);
* delta rules: ``v_t = beta_t * (v_t - k_t @ state)``;
* ``state += k_t^T v_t`` (an outer product: broadcast multiply);
* ``o_t = scale * q_t @ state`` (each key/value head's state repeated for its query
  heads, grouped-query attention).

Each step is a handful of ai ops (slices, one or two batched ``ai.matmul`` of one row),
so the sequence is bounded by ``MAX_STEPS`` (a chunked form is what long prefills need).
The outputs are concatenated over the steps and put back as ``[B, T, H_q * d_v]``;
``present_state`` is the final state in ``past_state``'s type (else the query's).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from fusec.dialect import ops as ai
from fusec.frontend.onnx_attention import _repeat_kv_heads, _split_heads
from fusec.frontend.onnx_core import _reshape_to, converter
from fusec.frontend.onnx_layout import _slice_of
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node

#: The longest sequence whose recurrence is unrolled.
MAX_STEPS = 64
_RULES = ("linear", "gated", "delta", "gated_delta")


@converter(
    "LinearAttention",
    attrs=("chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"),
)
def _linear_attention(imp: Importer, node: Node) -> list[SSAValue]:
    rule = node.attrs.get("update_rule", "gated_delta")
    if rule not in _RULES:
        raise imp.error(f"update_rule '{rule}' is not one of {', '.join(_RULES)}")
    q_heads, kv_heads = (int(node.attrs.get(a, 0)) for a in ("q_num_heads", "kv_num_heads"))
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise imp.error(
            f"q_num_heads ({q_heads}) must be a positive multiple of kv_num_heads ({kv_heads})"
        )
    query, key, value = (imp.input(node, i) for i in range(3))
    if any(len(shape_of(v)) != 3 for v in (query, key, value)):
        raise imp.error("query, key and value must be rank 3 (B, T, H * D)")
    out_type = dtype_of(query)
    q, k, v = (
        _split_heads(imp, _float32(imp, x), h)
        for x, h in ((query, q_heads), (key, kv_heads), (value, kv_heads))
    )
    b, _, steps, d_k = shape_of(q)
    d_v = shape_of(v)[-1]
    if steps > MAX_STEPS:
        raise imp.error(
            f"a sequence of {steps} steps: fusec unrolls LinearAttention up to {MAX_STEPS}",
            "attribute",
        )
    decay = _per_step(imp, node, 4, rule in ("gated", "gated_delta"), kv_heads, d_k, "decay")
    beta = _per_step(imp, node, 5, rule in ("delta", "gated_delta"), kv_heads, 1, "beta")
    past = imp.optional_input(node, 3)
    if past is not None and shape_of(past) != (b, kv_heads, d_k, d_v):
        raise imp.error(f"past_state is {past.type}: ({b}, {kv_heads}, {d_k}, {d_v}) expected")
    state = (
        _float32(imp, past)
        if past is not None
        else imp.constant(np.zeros((b, kv_heads, d_k, d_v)), "f32")
    )
    scale = float(node.attrs.get("scale", 0.0)) or 1.0 / math.sqrt(d_k)
    factor = imp.constant(np.asarray(scale), "f32")
    outputs = []
    for t in range(steps):
        q_t, k_t, v_t = (_slice_of(imp, x, [t], [t + 1], [2], [1]) for x in (q, k, v))
        if decay is not None:  # (B, H, 1, d_k or 1) -> (B, H, d_k or 1, 1)
            g_t = _slice_of(imp, decay, [t], [t + 1], [2], [1])
            g_t = _reshape_to(imp, g_t, (b, kv_heads, shape_of(g_t)[-1], 1))
            state = imp.emit(ai.MulOp, state, imp.emit(ai.ExpOp, g_t))
        if beta is not None:
            retrieved = imp.emit(ai.MatmulOp, k_t, state)
            beta_t = _slice_of(imp, beta, [t], [t + 1], [2], [1])
            v_t = imp.emit(ai.MulOp, beta_t, imp.emit(ai.SubOp, v_t, retrieved))
        column = _reshape_to(imp, k_t, (b, kv_heads, d_k, 1))
        state = imp.emit(ai.AddOp, state, imp.emit(ai.MulOp, column, v_t))
        read = imp.emit(ai.MatmulOp, q_t, _repeat_kv_heads(imp, state, q_heads))
        outputs.append(imp.emit(ai.MulOp, read, factor))
    y = outputs[0] if steps == 1 else imp.emit(ai.ConcatOp, *outputs, axis=2)
    y = _reshape_to(imp, imp.emit(ai.TransposeOp, y, perm=(0, 2, 1, 3)), (b, steps, q_heads * d_v))
    return [_cast(imp, y, out_type), _cast(imp, state, dtype_of(past or query))]


def _float32(imp: Importer, x: SSAValue) -> SSAValue:
    return _cast(imp, x, "f32")


def _cast(imp: Importer, x: SSAValue, dtype: str) -> SSAValue:
    return x if dtype_of(x) == dtype else imp.emit(ai.CastOp, x, dtype)


def _per_step(
    imp: Importer, node: Node, index: int, needed: bool, heads: int, width: int, name: str
) -> SSAValue | None:
    """``decay`` or ``beta`` ``[B, T, H * w or H or 1]`` as float32 ``[B, H or 1, T, w or
    1]``; an error when the rule needs it and it is missing, or forbids it and it is
    given."""
    x = imp.optional_input(node, index)
    if (x is not None) != needed:
        rule = node.attrs.get("update_rule", "gated_delta")
        raise imp.error(f"update_rule '{rule}' {'needs' if needed else 'forbids'} {name}")
    if x is None:
        return None
    if len(shape_of(x)) != 3:
        raise imp.error(f"{name} must be rank 3, got {x.type}")
    b, steps, last = shape_of(x)
    if last in (heads, 1) and (last == heads or name == "beta"):
        x = _reshape_to(imp, _float32(imp, x), (b, steps, last, 1))
        return imp.emit(ai.TransposeOp, x, perm=(0, 2, 1, 3))
    if last == heads * width and name == "decay":
        return _split_heads(imp, _float32(imp, x), heads)
    raise imp.error(f"{name}'s last dim {last} does not match {heads} heads")
