"""ONNX's language-model operators as ai ops: ``SwiGLU`` (opset 28),
``RotaryEmbedding`` (opset 23) and ``CausalConvWithState`` (opset 27).

* ``SwiGLU(A, B) = Swish_alpha(A) * B`` (ai.silu when alpha is 1), A and B of one shape.
* ``RotaryEmbedding``: the input as ``[batch, seq, heads, head_size]`` (a 4-D
  ``[batch, heads, seq, head_size]`` transposed, a 3-D ``[batch, seq, hidden]`` split into
  ``num_heads``); its first ``rotary_embedding_dim`` values (all by default) are split into
  halves, or into even and odd positions with ``interleaved`` (strided slices), and
  rotated: ``real = cos * x1 - sin * x2``, ``imag = sin * x1 + cos * x2``, put back in the
  same layout and followed by the values not rotated. ``cos_cache``/``sin_cache`` rows are
  taken at ``position_ids`` (constant ids: ai.gather; run-time ids: ai.take) or are given
  per ``[batch, seq]`` when there are no ids.
* ``CausalConvWithState`` (Mamba, Gated DeltaNet): the carried state (zeros without
  one) concatenated before the input, a depthwise valid convolution (ai.conv2d of
  height-1 views), bias, SiLU with ``activation``; the new state is the last ``k - 1``
  positions of the concatenation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import _reshape_to, converter
from fusec.frontend.onnx_elementwise import swish
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node


@converter("SwiGLU", attrs=("alpha",))
def _swiglu(imp: Importer, node: Node) -> list[SSAValue]:
    gate, value = imp.input(node, 0), imp.input(node, 1)
    if gate.type != value.type:
        raise imp.error(f"A ({gate.type}) and B ({value.type}) must have one type and shape")
    return [imp.emit(ai.MulOp, swish(imp, gate, float(node.attrs.get("alpha", 1.0))), value)]


@converter("RotaryEmbedding", attrs=("interleaved", "num_heads", "rotary_embedding_dim"))
def _rotary_embedding(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    shape = shape_of(x)
    rows = _token_major(imp, node, x)
    batch, seq, _, head = shape_of(rows)
    dim = int(node.attrs.get("rotary_embedding_dim", 0)) or head
    if dim % 2 or dim > head:
        raise imp.error(f"rotary_embedding_dim {dim} must be even and at most the head size {head}")
    cos, sin = (_cache(imp, node, i, batch, seq, dim // 2) for i in (1, 2))
    rotated = _rotate(imp, _last(imp, rows, 0, dim, 1), cos, sin, node)
    if dim < head:
        rotated = imp.emit(ai.ConcatOp, rotated, _last(imp, rows, dim, head - dim, 1), axis=3)
    if len(shape) == 3:
        return [_reshape_to(imp, rotated, shape)]
    return [imp.emit(ai.TransposeOp, rotated, perm=(0, 2, 1, 3))]


def _token_major(imp: Importer, node: Node, x: SSAValue) -> SSAValue:
    """The input as ``[batch, seq, heads, head_size]``."""
    shape = shape_of(x)
    if len(shape) == 4:
        return imp.emit(ai.TransposeOp, x, perm=(0, 2, 1, 3))
    if len(shape) != 3:
        raise imp.error(f"the input must be 3-D or 4-D, got {x.type}")
    heads = int(node.attrs.get("num_heads", 0))
    if heads <= 0 or shape[2] % heads:
        raise imp.error(f"a 3-D input needs num_heads dividing its hidden size {shape[2]}")
    return _reshape_to(imp, x, (shape[0], shape[1], heads, shape[2] // heads))


def _last(imp: Importer, x: SSAValue, start: int, count: int, step: int) -> SSAValue:
    """``count`` values of the last dim from ``start``, ``step`` apart."""
    shape = shape_of(x)
    if start == 0 and count == shape[-1] and step == 1:
        return x
    offsets = [0] * (len(shape) - 1) + [start]
    sizes = [*shape[:-1], count]
    strides = [1] * (len(shape) - 1) + [step]
    return imp.emit(ai.SliceOp, x, offsets=offsets, sizes=sizes, strides=strides)


def _cache(imp: Importer, node: Node, index: int, batch: int, seq: int, half: int) -> SSAValue:
    """Input ``index`` (cos or sin cache) as ``[batch, seq, 1, half]``: its rows at the
    position ids, or as given without ids."""
    cache = imp.input(node, index)
    if shape_of(cache)[-1] != half:
        raise imp.error(f"input #{index} ({cache.type}) must end in rotary_embedding_dim / 2")
    ids_name = imp.optional_input_name(node, 3)
    if ids_name is None:
        if shape_of(cache) != (batch, seq, half):
            raise imp.error(f"without position_ids, input #{index} must be {batch}x{seq}x{half}")
        return _reshape_to(imp, cache, (batch, seq, 1, half))
    if len(shape_of(cache)) != 2:
        raise imp.error(f"with position_ids, input #{index} must be 2-D, got {cache.type}")
    known = imp.array(node, 3)
    if known is None:
        picked = imp.emit(ai.TakeOp, cache, imp.input(node, 3), axis=0)
    else:
        ids = np.asarray(known, dtype=np.int64).reshape(-1)
        rows = shape_of(cache)[0]
        if ((ids < 0) | (ids >= rows)).any():
            raise imp.error(f"a position id is out of range for the {rows} rows of the caches")
        picked = imp.emit(ai.GatherOp, cache, axis=0, indices=[int(i) for i in ids])
    if shape_of(picked)[:-1] not in ((batch, seq), (batch * seq,)):
        raise imp.error(f"position_ids must be {batch}x{seq}")
    return _reshape_to(imp, picked, (batch, seq, 1, half))


def _rotate(imp: Importer, x: SSAValue, cos: SSAValue, sin: SSAValue, node: Node) -> SSAValue:
    """The rotation of ``x`` (``[..., dim]``) by the angles of ``cos``/``sin``."""
    dim = shape_of(x)[-1]
    half = dim // 2
    interleaved = bool(node.attrs.get("interleaved", 0))
    if interleaved:
        x1, x2 = _last(imp, x, 0, half, 2), _last(imp, x, 1, half, 2)
    else:
        x1, x2 = _last(imp, x, 0, half, 1), _last(imp, x, half, half, 1)
    real = imp.emit(ai.SubOp, imp.emit(ai.MulOp, cos, x1), imp.emit(ai.MulOp, sin, x2))
    imag = imp.emit(ai.AddOp, imp.emit(ai.MulOp, sin, x1), imp.emit(ai.MulOp, cos, x2))
    if not interleaved:
        return imp.emit(ai.ConcatOp, real, imag, axis=3)
    pairs = [_reshape_to(imp, v, (*shape_of(v), 1)) for v in (real, imag)]
    woven = imp.emit(ai.ConcatOp, *pairs, axis=4)
    return _reshape_to(imp, woven, shape_of(x))


@converter("CausalConvWithState", attrs=("activation",))
def _causal_conv_with_state(imp: Importer, node: Node) -> list[SSAValue]:
    """The input after the carried state (zeros without one), a depthwise valid 1-D
    convolution of it (a 2-D one of height-1 views), bias and SiLU; the new state is
    the last ``k - 1`` positions."""
    x, w = imp.input(node, 0), imp.input(node, 1)
    if len(shape_of(x)) != 3 or len(shape_of(w)) != 3:
        raise imp.error(f"input and weight must be 3-D, got {x.type} and {w.type}")
    n, c, length = shape_of(x)
    k = shape_of(w)[2]
    if shape_of(w)[:2] != (c, 1):
        raise imp.error(f"the weight must be {c} x 1 x k (depthwise), got {w.type}")
    if k < 2:
        raise imp.error("a kernel of size 1 carries an empty state", "shape")
    activation = node.attrs.get("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise imp.error(f"activation '{activation}' is not none, silu or swish", "attribute")
    past = imp.optional_input(node, 3)
    if past is None:
        past = imp.constant(np.zeros((n, c, k - 1)), dtype_of(x))
    elif shape_of(past) != (n, c, k - 1):
        raise imp.error(f"past_state must be {n}x{c}x{k - 1}, got {past.type}")
    padded = imp.emit(ai.ConcatOp, past, x, axis=2)
    rows, taps = (_reshape_to(imp, v, (*shape_of(v)[:2], 1, shape_of(v)[2])) for v in (padded, w))
    y = imp.emit(ai.Conv2DOp, rows, taps, groups=c)
    bias = imp.optional_input(node, 2)
    if bias is not None:
        y = imp.emit(ai.BiasAddOp, y, bias, axis=1)
    y = _reshape_to(imp, y, (n, c, length))
    if activation != "none":
        y = imp.emit(ai.SiluOp, y)
    state = imp.emit(
        ai.SliceOp, padded, offsets=[0, 0, length], sizes=[n, c, k - 1], strides=[1, 1, 1]
    )
    return [y, state]
