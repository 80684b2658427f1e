"""ONNX ``Attention`` (opset 23): scaled dot-product attention as ai ops.

The node is decomposed the way ONNX's own function body and reference define it, so
``recognize-patterns`` can still find the attention chain in it:

* 3-D ``Q``/``K``/``V`` (``[B, S, hidden]``) are split into heads (``q_num_heads``,
  ``kv_num_heads``): reshape to ``[B, S, H, D]``, transpose to ``[B, H, S, D]``;
* ``past_key``/``past_value`` are concatenated in front of ``K``/``V`` along the sequence
  (the ``present_*`` outputs);
* both ``Q`` and ``K`` are multiplied by ``sqrt(scale)`` in the input type (default scale
  ``1/sqrt(head size)``), then ``Q @ K^T``; ``softcap`` (> 0) gives
  ``softcap * tanh(scores / softcap)``;
* the additive bias: ``attn_mask`` (bool: 0 where true, -inf where false; float: as it
  is; padded with -inf / false up to the key length), plus, with ``is_causal``, -inf where
  a key comes after the query (bottom-right aligned: key ``j`` is allowed to query ``i``
  iff ``j <= i + past length``);
* grouped-query attention repeats each K/V head ``q_num_heads / kv_num_heads`` times in
  place (``[h0, h0, h1, h1, ...]``);
* softmax over the keys (in float32 with ``softmax_precision`` = FLOAT), and a row whose
  bias is -inf everywhere (no key allowed) is all zeros, as the reference defines it;
* the optional ``qk_matmul_output`` output is the value of one of those steps, by
  ``qk_matmul_output_mode``, in the order the node suite numbers them: 0 the scaled
  ``Q @ K^T``, 1 after softcap, 2 after adding the bias, 3 the (row-guarded) softmax.

* the sliding window (opset 25, ``left_window_size`` / ``right_window_size``, -1 for an
  unbounded side): key ``j`` is allowed to the query at absolute position ``p`` iff
  ``p - left <= j <= p + right``, -inf elsewhere, combined with the causal frontier;
* ``nonpad_kv_seqlen`` (an external, static cache): the keys at or past ``nonpad[b]`` are
  masked in batch ``b``, and the causal and window frontiers are aligned per batch at
  ``nonpad[b] - q_len`` (one constant mask when it is a constant; iota comparisons with
  ai ops when it is computed at run time).

Refused with a located error: another ``softmax_precision``, ``qk_matmul_output_mode`` 0
with a softcap (ONNX's definition and its reference disagree on whether it is capped),
``nonpad_kv_seqlen`` together with past key/value (ONNX forbids it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import _reshape_to, converter
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node

_ATTRS = (
    "is_causal",
    "kv_num_heads",
    "left_window_size",
    "right_window_size",
    "q_num_heads",
    "qk_matmul_output_mode",
    "scale",
    "softcap",
    "softmax_precision",
)


@converter("Attention", attrs=_ATTRS)
def _attention(imp: Importer, node: Node) -> list[SSAValue]:
    q, k, v = (imp.input(node, i) for i in range(3))
    rank = len(shape_of(q))
    if rank not in (3, 4) or {len(shape_of(k)), len(shape_of(v))} != {rank}:
        raise imp.error(f"Q, K and V must all be 3-D or all 4-D, got {q.type}, {k.type}")
    if rank == 3:
        q_heads, kv_heads = node.attrs.get("q_num_heads"), node.attrs.get("kv_num_heads")
        if q_heads is None or kv_heads is None:
            raise imp.error("3-D inputs need q_num_heads and kv_num_heads", "attribute")
        q, k, v = (_split_heads(imp, x, h) for x, h in ((q, q_heads), (k, kv_heads), (v, kv_heads)))
    past_k, past_v = imp.optional_input(node, 4), imp.optional_input(node, 5)
    if (past_k is None) != (past_v is None):
        raise imp.error("past_key and past_value come together")
    past = 0
    if past_k is not None and past_v is not None:
        past = shape_of(past_k)[2]
        k = imp.emit(ai.ConcatOp, past_k, k, axis=2)
        v = imp.emit(ai.ConcatOp, past_v, v, axis=2)
    present_k, present_v = k, v
    k, v = _repeat_kv_heads(imp, k, shape_of(q)[1]), _repeat_kv_heads(imp, v, shape_of(q)[1])
    raw = _scores(imp, node, q, k)
    capped = _softcap(imp, node, raw)
    bias = _bias(imp, node, q, shape_of(raw)[-2:], past)
    scores = capped if bias is None else imp.emit(ai.AddOp, capped, bias)
    probabilities = _softmax(imp, node, scores, dtype_of(q))
    if bias is not None:  # a row with no allowed key is zeros, not NaN
        probabilities = _zero_masked_rows(imp, probabilities, bias)
    y = imp.emit(ai.MatmulOp, probabilities, v)
    if rank == 3:
        b, h, s, d = shape_of(y)
        y = _reshape_to(imp, imp.emit(ai.TransposeOp, y, perm=(0, 2, 1, 3)), (b, s, h * d))
    outputs = [y, present_k, present_v]
    if len(node.proto.output) > 3 and node.proto.output[3]:
        outputs.append(_qk_output(imp, node, (raw, capped, scores, probabilities)))
    return outputs


def _qk_output(imp: Importer, node: Node, steps: tuple[SSAValue, ...]) -> SSAValue:
    """The ``qk_matmul_output`` output: the step ``qk_matmul_output_mode`` names."""
    mode = int(node.attrs.get("qk_matmul_output_mode", 0))
    if not 0 <= mode < len(steps):
        raise imp.error(f"qk_matmul_output_mode={mode} is not 0, 1, 2 or 3")
    if mode == 0 and float(node.attrs.get("softcap", 0.0)) > 0:
        raise imp.error(
            "qk_matmul_output_mode=0 with a softcap: ONNX's definition (the matmul) and its "
            "reference (capped) disagree",
            "attribute",
        )
    return steps[mode]


def _split_heads(imp: Importer, x: SSAValue, heads: int) -> SSAValue:
    """``[B, S, hidden]`` -> ``[B, heads, S, hidden / heads]``."""
    b, s, hidden = shape_of(x)
    if heads <= 0 or hidden % heads:
        raise imp.error(f"a hidden size of {hidden} does not split into {heads} heads")
    four = _reshape_to(imp, x, (b, s, heads, hidden // heads))
    return imp.emit(ai.TransposeOp, four, perm=(0, 2, 1, 3))


def _repeat_kv_heads(imp: Importer, x: SSAValue, q_heads: int) -> SSAValue:
    """Each of ``x``'s heads repeated in place to ``q_heads`` (grouped-query attention)."""
    b, heads, s, d = shape_of(x)
    if heads == q_heads:
        return x
    if q_heads % heads:
        raise imp.error(f"{q_heads} query heads are not a multiple of {heads} key/value heads")
    rep = q_heads // heads
    grouped = _reshape_to(imp, x, (b, heads, 1, s, d))
    wide = imp.emit(ai.ExpandOp, grouped, shape=(b, heads, rep, s, d))
    return _reshape_to(imp, wide, (b, q_heads, s, d))


def _scores(imp: Importer, node: Node, q: SSAValue, k: SSAValue) -> SSAValue:
    """``(Q * sqrt(scale)) @ (K * sqrt(scale))^T``."""
    scale = node.attrs.get("scale")
    scale = 1.0 / math.sqrt(shape_of(q)[-1]) if scale is None else float(scale)
    root = np.asarray(np.sqrt(scale), dtype=np.float64)
    factor = imp.constant(root, dtype_of(q))
    return imp.emit(
        ai.MatmulOp,
        imp.emit(ai.MulOp, q, factor),
        imp.emit(ai.MulOp, k, factor),
        transpose_b=True,
    )


def _softcap(imp: Importer, node: Node, scores: SSAValue) -> SSAValue:
    """``softcap * tanh(scores / softcap)`` for a positive ``softcap``, else the scores."""
    softcap = float(node.attrs.get("softcap", 0.0))
    if softcap > 0:
        cap = imp.scalar(softcap, scores)
        scores = imp.emit(ai.MulOp, imp.emit(ai.TanhOp, imp.emit(ai.DivOp, scores, cap)), cap)
    return scores


def _bias(
    imp: Importer, node: Node, q: SSAValue, grid: tuple[int, ...], past: int
) -> SSAValue | None:
    """The additive mask of the scores (None: none), in ``q``'s type: ``attn_mask`` plus
    0 / -inf where the causal frontier, the sliding window and ``nonpad_kv_seqlen``
    allow / forbid a key (each term of ONNX's sum is 0 or -inf, so one where is the same
    sum)."""
    queries, keys = grid
    mask = imp.optional_input(node, 3)
    if mask is not None:
        mask = _padded_mask(imp, mask, keys)
        if dtype_of(mask) == "i1":
            mask = imp.emit(ai.WhereOp, mask, imp.scalar(0.0, q), imp.scalar(-np.inf, q))
        elif dtype_of(mask) != dtype_of(q):
            raise imp.error(f"attn_mask is {mask.type}: bool or the inputs' type")
    allowed = _allowed_keys(imp, node, queries, keys, past)
    if allowed is None:
        return mask
    if isinstance(allowed, np.ndarray):
        frontier = imp.constant(np.where(allowed, 0.0, -np.inf), dtype_of(q))
    else:
        frontier = imp.emit(ai.WhereOp, allowed, imp.scalar(0.0, q), imp.scalar(-np.inf, q))
    return frontier if mask is None else imp.emit(ai.AddOp, mask, frontier)


def _allowed_keys(
    imp: Importer, node: Node, queries: int, keys: int, past: int
) -> np.ndarray | SSAValue | None:
    """Which keys each query may see under the causal frontier, the sliding window and
    ``nonpad_kv_seqlen``: ``[q, kv]`` for one offset (``past``), ``[B, 1, q, kv]`` for
    ``nonpad_kv_seqlen``'s per-batch ones; a numpy array when constant, a bool value when
    ``nonpad_kv_seqlen`` is computed at run time; None when every key is allowed."""
    causal = bool(node.attrs.get("is_causal", 0))
    left, right = (int(node.attrs.get(a, -1)) for a in ("left_window_size", "right_window_size"))
    if min(left, right) < -1:
        raise imp.error(f"window sizes {left}, {right} must be -1 or nonnegative")
    name = imp.optional_input_name(node, 6)
    if name is not None and past:
        raise imp.error("nonpad_kv_seqlen cannot be combined with past_key / past_value")
    if not causal and left < 0 and right < 0 and name is None:
        return None
    # diff[i, j] = (i + offset) - j: how far key j lies behind query i's absolute position
    diff = np.arange(queries)[:, None] - np.arange(keys)[None, :]
    if name is None:
        return _frontier(diff + past, causal, left, right)
    nonpad = imp.array(node, 6)
    if nonpad is not None:  # a constant: one constant mask
        offsets = np.asarray(nonpad, dtype=np.int64).reshape(-1, 1, 1, 1) - queries
        inside = np.arange(keys)[None, None, None, :] < offsets + queries
        return _frontier(diff + offsets, causal, left, right) & inside
    return _run_time_allowed(imp, node, diff - queries, causal, left, right)


def _frontier(diff: np.ndarray, causal: bool, left: int, right: int) -> np.ndarray:
    """Where ``diff`` (query position minus key position) is allowed."""
    allowed = diff >= 0 if causal else np.ones(diff.shape, dtype=bool)
    if left >= 0:
        allowed = allowed & (diff <= left)
    if right >= 0:
        allowed = allowed & (-diff <= right)
    return allowed


def _run_time_allowed(
    imp: Importer, node: Node, diff: np.ndarray, causal: bool, left: int, right: int
) -> SSAValue:
    """``_allowed_keys`` for a ``nonpad_kv_seqlen`` computed at run time: the constant
    ``i - j - q`` plus ``nonpad[b]`` compared with ai ops (int64), and ``j < nonpad[b]``."""
    nonpad = imp.input(node, 6)
    if dtype_of(nonpad) not in ("i64", "i32"):
        raise imp.error(f"nonpad_kv_seqlen is {nonpad.type}: an integer tensor expected")
    per_batch = _reshape_to(imp, nonpad, (math.prod(shape_of(nonpad)), 1, 1, 1))
    kind = dtype_of(nonpad)
    shifted = imp.emit(ai.AddOp, imp.constant(diff, kind), per_batch)

    def scalar(n: int) -> SSAValue:
        return imp.constant(np.asarray(n), kind)

    allowed = None
    if causal:
        allowed = imp.emit(ai.GreaterEqualOp, shifted, scalar(0))
    windows = []
    if left >= 0:  # i - j <= left
        windows.append(imp.emit(ai.LessEqualOp, shifted, scalar(left)))
    if right >= 0:  # j - i <= right
        windows.append(imp.emit(ai.GreaterEqualOp, shifted, scalar(-right)))
    for within in windows:
        allowed = within if allowed is None else imp.emit(ai.AndOp, allowed, within)
    inside = imp.emit(ai.LessOp, imp.constant(np.arange(diff.shape[1]), kind), per_batch)
    return inside if allowed is None else imp.emit(ai.AndOp, allowed, inside)


def _padded_mask(imp: Importer, mask: SSAValue, keys: int) -> SSAValue:
    """``mask`` padded along its last dim to ``keys`` (false / -inf: the keys it does not
    mention are masked)."""
    shape = shape_of(mask)
    missing = keys - shape[-1]
    if missing < 0:
        raise imp.error(f"attn_mask covers {shape[-1]} keys, more than the {keys} there are")
    if missing == 0:
        return mask
    fill = np.zeros if dtype_of(mask) == "i1" else (lambda s: np.full(s, -np.inf))
    block = imp.constant(fill((*shape[:-1], missing)), dtype_of(mask))
    return imp.emit(ai.ConcatOp, mask, block, axis=len(shape) - 1)


def _softmax(imp: Importer, node: Node, scores: SSAValue, dtype: str) -> SSAValue:
    """Softmax over the keys, in float32 when ``softmax_precision`` asks for it."""
    precision = node.attrs.get("softmax_precision")
    if precision is None or precision == _PRECISIONS.get(dtype):
        return imp.emit(ai.SoftmaxOp, scores, axis=-1)
    if precision != TensorProto.FLOAT:
        raise imp.error(f"softmax_precision={precision} is not supported", "attribute")
    wide = imp.emit(ai.SoftmaxOp, imp.emit(ai.CastOp, scores, "f32"), axis=-1)
    return imp.emit(ai.CastOp, wide, dtype)


_PRECISIONS = {"f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}


def _zero_masked_rows(imp: Importer, probabilities: SSAValue, bias: SSAValue) -> SSAValue:
    """``probabilities`` with every row whose ``bias`` is -inf throughout set to 0."""
    last = len(shape_of(bias)) - 1
    row_max = imp.emit(ai.ReduceMaxOp, bias, axes=(last,), keepdims=True)
    masked = imp.emit(ai.EqualOp, row_max, imp.scalar(-np.inf, row_max))
    return imp.emit(ai.WhereOp, masked, imp.scalar(0.0, probabilities), probabilities)
