"""Float8 GEMM graphs for the cuda tests (issue 31): ``dequantize`` of float8 codes on both
matmul operands, the scales per tensor (A) and per tensor or per column (B), then a tail.

``fp8_gemm_ir`` writes what an fp8 linear layer is in the dialect: A (M x K) and B (N x K,
``transpose_b``) as float8 codes, dequantized with their scales (zero points 0), the
matmul, and ``tail``: "" (the f32 product), "bf16"/"f16" (a cast), "bias_relu_bf16".
"""

from __future__ import annotations


def _t(dims: tuple[int, ...], dtype: str) -> str:
    return f"tensor<{'x'.join([*map(str, dims), dtype])}>" if dims else f"tensor<{dtype}>"


def fp8_gemm_ir(
    m: int,
    n: int,
    k: int,
    *,
    dtype: str = "f8E4M3FN",
    b_dtype: str | None = None,
    per_column: bool = True,
    tail: str = "bf16",
    transpose_b: bool = True,
    batch: tuple[int, ...] = (),
) -> str:
    b_dtype = b_dtype or dtype
    a = _t((*batch, m, k), dtype)
    b = _t((n, k) if transpose_b else (k, n), b_dtype)
    f32_out = _t((*batch, m, n), "f32")
    sb_dims = (n,) if per_column else ()
    b_axis = 0 if transpose_b else 1
    params = [f"%a: {a}", f"%b: {b}"]
    lines = [
        f"%sa = arith.constant dense<0.0625> : {_t((), 'f32')}",
        f"%za = arith.constant dense<0.0> : {_t((), dtype)}",
        f"%sb = arith.constant dense<0.125> : {_t(sb_dims, 'f32')}",
        f"%zb = arith.constant dense<0.0> : {_t(sb_dims, b_dtype)}",
        f"%x = ai.dequantize %a, %sa, %za : {a} * {_t((), 'f32')} * {_t((), dtype)}",
        f"%w = ai.dequantize %b, %sb, %zb {{axis = {b_axis} : i64}} : {b} * "
        f"{_t(sb_dims, 'f32')} * {_t(sb_dims, b_dtype)}",
        f"%y = ai.matmul %x, %w{' {transpose_b = true}' if transpose_b else ''} : "
        f"{_t((*batch, m, k), 'f32')} * {_t((n, k) if transpose_b else (k, n), 'f32')}",
    ]
    result, out = "%y", f32_out
    if tail.startswith("bias_relu"):
        params.append(f"%c: {_t((n,), 'f32')}")
        lines += [
            f"%yb = ai.bias_add %y, %c : {f32_out} * {_t((n,), 'f32')}",
            f"%yr = ai.relu %yb : {f32_out}",
        ]
        result = "%yr"
    cast = tail.rsplit("_", 1)[-1] if tail else ""
    if cast.startswith("f8"):  # the result quantized to float8 codes (scale 0.5, zero 0)
        out = _t((*batch, m, n), cast)
        so, zo = _t((), "f32"), _t((), cast)
        lines += [
            f"%so = arith.constant dense<0.5> : {so}",
            f"%zo = arith.constant dense<0.0> : {zo}",
            f"%q = ai.quantize {result}, %so, %zo : {f32_out} * {so} * {zo}",
        ]
        result = "%q"
    if cast in ("bf16", "f16"):
        out = _t((*batch, m, n), cast)
        lines.append(f"%z = ai.cast {result} : {f32_out} to {out}")
        result = "%z"
    body = "\n  ".join(lines)
    return (
        f"func.func @g({', '.join(params)}) -> {out} {{\n  {body}\n  return {result} : {out}\n}}\n"
    )


def fp8_qdq_onnx(m: int, k: int, n: int, seed: int = 0, quantized_output: bool = False):
    """(an fp8 linear layer as ONNX writes it, an input): x (M x K, f32) Q->DQ per tensor
    to e4m3, a K x N e4m3 weight initializer DQ per column, MatMul (opset 21);
    ``quantized_output``: then Relu and a QuantizeLinear of the result to e4m3 (per tensor),
    the layer's output the codes the next layer dequantizes."""
    import ml_dtypes
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) * 2).astype(ml_dtypes.float8_e4m3fn)
    e4m3 = TensorProto.FLOAT8E4M3FN
    inits = [
        numpy_helper.from_array(w, "w_q"),
        helper.make_tensor("w_s", TensorProto.FLOAT, [n], rng.uniform(0.01, 0.1, n).tolist()),
        helper.make_tensor("w_z", e4m3, [n], [0.0] * n),
        helper.make_tensor("x_s", TensorProto.FLOAT, [], [0.02]),
        helper.make_tensor("x_z", e4m3, [], [0.0]),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["y" if not quantized_output else "p"]),
    ]
    out_type = TensorProto.FLOAT
    if quantized_output:
        inits += [
            helper.make_tensor("y_s", TensorProto.FLOAT, [], [0.25]),
            helper.make_tensor("y_z", e4m3, [], [0.0]),
        ]
        nodes += [
            helper.make_node("Relu", ["p"], ["r"]),
            helper.make_node("QuantizeLinear", ["r", "y_s", "y_z"], ["y"]),
        ]
        out_type = e4m3
    graph = helper.make_graph(
        nodes,
        "fp8_linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", out_type, [m, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model, (rng.standard_normal((m, k)) * 3).astype(np.float32)
