"""ONNX ``MatMul`` and ``Gemm`` as ``ai.matmul`` (Gemm's alpha a multiply, its C a
bias or a broadcast add)."""

from __future__ import annotations

import numpy as np
from xdsl.ir import SSAValue

from fusec.dialect import ops as ai
from fusec.dialect.shapes import (
    ShapeError,
    broadcast_shapes,
)
from fusec.frontend.onnx_core import Importer, Node, converter
from fusec.ir.tensors import shape_of


@converter("MatMul")
def _matmul(imp: Importer, node: Node) -> list[SSAValue]:
    return [imp.emit(ai.MatmulOp, imp.input(node, 0), imp.input(node, 1))]


@converter("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"))
def _gemm(imp: Importer, node: Node) -> list[SSAValue]:
    a, b = imp.input(node, 0), imp.input(node, 1)
    for name, value in (("A", a), ("B", b)):
        if len(shape_of(value)) != 2:
            raise imp.error(f"input {name} must be 2-D, got {value.type}")
    alpha, beta = node.attrs.get("alpha", 1.0), node.attrs.get("beta", 1.0)
    y = imp.emit(
        ai.MatmulOp,
        a,
        b,
        transpose_a=bool(node.attrs.get("transA", 0)),
        transpose_b=bool(node.attrs.get("transB", 0)),
    )
    if alpha != 1.0:
        y = imp.emit(ai.MulOp, y, imp.scalar(alpha, y))
    if imp.optional_input(node, 2) is not None and beta != 0.0:
        y = _add_gemm_bias(imp, node, y, beta)
    return [y]


def _add_gemm_bias(imp: Importer, node: Node, y: SSAValue, beta: float) -> SSAValue:
    """y + beta * C: a 1-D (or 1 x N) C becomes ai.bias_add, other shapes broadcast."""
    n = shape_of(y)[1]
    known = imp.array(node, 2)
    if known is not None:
        c_dtype = imp.dtype_of_array(node.proto.input[2], known)
        scaled = known.astype(np.float64) * beta if beta != 1.0 else known
        if scaled.shape in ((n,), (1, n)):
            return imp.emit(ai.BiasAddOp, y, imp.constant(scaled.reshape(n), c_dtype), axis=1)
        c = imp.constant(scaled, c_dtype) if beta != 1.0 else imp.input(node, 2)
    else:
        c = imp.input(node, 2)
        if beta != 1.0:
            c = imp.emit(ai.MulOp, c, imp.scalar(beta, c))
    try:
        out = broadcast_shapes("Gemm", shape_of(y), shape_of(c))
    except ShapeError:
        out = None
    if out != shape_of(y):
        raise imp.error(f"C ({c.type}) does not broadcast to the result {y.type}")
    if shape_of(c) == (n,):
        return imp.emit(ai.BiasAddOp, y, c, axis=1)
    return imp.emit(ai.AddOp, y, c)
