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
    if cast in ("bf16", "f16"):
        out = _t((*batch, m, n), cast)
        lines.append(f"%z = ai.cast {result} : {f32_out} to {out}")
        result = "%z"
    body = "\n  ".join(lines)
    return (
        f"func.func @g({', '.join(params)}) -> {out} {{\n  {body}\n  return {result} : {out}\n}}\n"
    )
