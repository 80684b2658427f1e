"""Run under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) by test_quant_cuda.py: the
cuda pointwise kernel of ``quantize -> dequantize -> add`` for each quantized type, on
fresh random inputs with NaN, infinities, a huge value and -0.0 among them, outputs
poisoned first; prints one JSON line per case: whether its codes and its values equal the
reference executor's bit for bit, and the kernels' kinds."""

from __future__ import annotations

import json
import sys

import numpy as np

import fusec

TYPES = [("f8E4M3FN", True), ("f8E4M3FN", False), ("f8E5M2", True), ("f8E5M2", False)]
TYPES += [("i8", True), ("ui8", True)]


def qdq_ir(dtype: str, saturate: bool, rows: int = 37, cols: int = 53) -> str:
    """x -> quantize (per column of x) -> dequantize -> + x, returning the codes and sum."""
    x, s = f"tensor<{rows}x{cols}xf32>", f"tensor<{cols}xf32>"
    q, z = f"tensor<{rows}x{cols}x{dtype}>", f"tensor<{cols}x{dtype}>"
    zero = "3" if dtype in ("i8", "ui8") else "0.0"
    sat = "true" if saturate else "false"
    return f"""func.func @g(%x: {x}) -> ({q}, {x}) {{
  %s = arith.constant dense<0.37> : {s}
  %z = arith.constant dense<{zero}> : {z}
  %q = ai.quantize %x, %s, %z {{axis = 1 : i64, saturate = {sat}}} : {x} * {s} * {z}
  %d = ai.dequantize %q, %s, %z {{axis = 1 : i64}} : {q} * {s} * {z}
  %y = ai.add %d, %x : {x} * {x}
  return %q, %y : {q}, {x}
}}
"""


def main() -> None:
    rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    x = (rng.standard_normal((37, 53)) * 200).astype(np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, 1e30, -0.0, 300.0]
    for dtype, saturate in TYPES:
        text = qdq_ir(dtype, saturate)
        compiled = fusec.compile(text, target="cuda")
        got = compiled._runner([x], poison=True)
        want = fusec.compile(text, target="reference")(x)
        codes = np.asarray(got[0]).view(np.uint8)
        record = {
            "case": f"{dtype}{'_sat' if saturate else ''}",
            "kinds": [k.kind for k in compiled.kernels],
            "codes_equal": bool(np.array_equal(codes, np.asarray(want[0]).view(np.uint8))),
            "values_equal": bool(np.array_equal(got[1], want[1], equal_nan=True)),
        }
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
