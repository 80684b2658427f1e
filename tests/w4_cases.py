"""Weight-only int4 (W4A16) layers for the tests (issue 31): ONNX models as exporters and
quantization tools write them, with fresh random codes, scales and zero points
(``w4a16_onnx``), and the IR of one whose codes are an argument (``w4a16_ir``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_ONNX = {"f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16, "f32": TensorProto.FLOAT}
_HOST = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def _tensor(name: str, array: np.ndarray, dtype: str) -> onnx.TensorProto:
    if dtype == "bf16":  # numpy_helper writes bfloat16 from float32 values
        proto = helper.make_tensor(name, TensorProto.BFLOAT16, array.shape, array.ravel())
        return proto
    return numpy_helper.from_array(array.astype(_HOST[dtype]), name)


def w4a16_onnx(
    m: int,
    k: int,
    n: int,
    block: int,
    dtype: str,
    seed: int,
    transposed: bool | str = False,
    scales: str = "block",
    unsigned: bool = False,
) -> tuple[onnx.ModelProto, np.ndarray]:
    """x (M x K) @ DequantizeLinear(INT4 codes, scales and zero points per ``block`` along
    K; ``scales`` "column": per output column, "tensor": one) + bias -> Relu, opset 21;
    ``transposed``: the codes stored N x K, read by a Gemm with transB ("matmul": by a
    Transpose and a MatMul); ``unsigned``:
    UINT4 codes and zero points. Returns the model and an input (host, the activations'
    type)."""
    rng = np.random.default_rng(seed)
    shape = (n, k) if transposed else (k, n)
    axis = 1 if transposed else 0
    if scales == "column":  # per output column: ONNX's per-axis form, block_size 0
        blocks, attrs = (n,), {"axis": 1 - axis}
    elif scales == "tensor":
        blocks, attrs = (), {}
    else:
        kb = -(-k // block)  # (a ragged last block when block does not divide K)
        blocks = (n, kb) if transposed else (kb, n)
        attrs = {"axis": axis, "block_size": block}
    if unsigned:  # UINT4 codes and zero points (the middle of their range)
        codes = rng.integers(0, 16, shape).astype(ml_dtypes.uint4)
        zeros = rng.integers(6, 11, blocks).astype(ml_dtypes.uint4)
    else:
        codes = rng.integers(-8, 8, shape).astype(ml_dtypes.int4)
        zeros = rng.integers(-2, 3, blocks).astype(ml_dtypes.int4)
    scales = rng.uniform(0.01, 0.05, blocks).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    inits = [
        numpy_helper.from_array(codes, "w_q"),
        _tensor("w_s", scales, dtype),
        numpy_helper.from_array(zeros, "w_z"),
        _tensor("bias", bias, dtype),
    ]
    dq = helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], **attrs)
    if transposed == "matmul":  # x @ W.T as a Transpose and a MatMul (exporters' Linear)
        nodes = [
            dq,
            helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
            helper.make_node("MatMul", ["x", "wt"], ["p"]),
            helper.make_node("Add", ["p", "bias"], ["a"]),
        ]
    elif transposed:
        product = helper.make_node("Gemm", ["x", "w", "bias"], ["a"], transB=1)
        nodes = [dq, product]
    else:
        nodes = [
            dq,
            helper.make_node("MatMul", ["x", "w"], ["p"]),
            helper.make_node("Add", ["p", "bias"], ["a"]),
        ]
    nodes.append(helper.make_node("Relu", ["a"], ["y"]))
    kind = _ONNX[dtype]
    graph = helper.make_graph(
        nodes,
        "w4a16",
        [helper.make_tensor_value_info("x", kind, [m, k])],
        [helper.make_tensor_value_info("y", kind, [m, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    x = rng.standard_normal((m, k)).astype(np.float32).astype(_HOST[dtype])
    return model, x


def w4a16_ir(m: int, k: int, n: int, block: int, dtype: str, zero: bool) -> str:
    """x (M x K) @ dequantize(codes K x N, scales and zero points per ``block`` rows) +
    bias -> gelu; codes, scales and zero points are arguments (fresh each case)."""
    x, w, y = f"tensor<{m}x{k}x{dtype}>", f"tensor<{k}x{n}x{dtype}>", f"tensor<{m}x{n}x{dtype}>"
    q, b = f"tensor<{k}x{n}xi4>", k // block
    s, z, bias = f"tensor<{b}x{n}x{dtype}>", f"tensor<{b}x{n}xi4>", f"tensor<{n}x{dtype}>"
    zp = "%zp" if zero else "%z0"
    args = f"%x: {x}, %q: {q}, %s: {s}, %bias: {bias}" + (f", %zp: {z}" if zero else "")
    return f"""func.func @w4a16({args}) -> {y} {{
  %z0 = arith.constant dense<0> : {z}
  %w = ai.dequantize %q, %s, {zp} {{axis = 0 : i64, block_size = {block} : i64}} : {q} * {s} * {z}
  %p = ai.matmul %x, %w : {x} * {w}
  %a = ai.bias_add %p, %bias {{axis = 1 : i64}} : {y} * {bias}
  %g = ai.gelu %a : {y}
  return %g : {y}
}}
"""
