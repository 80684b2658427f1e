"""Run under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) by test_quant_cuda.py
(``sim_client.run_simulator``, one record: the seed): the
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
#: Per-block scales (issue 31): (type, axis of the blocks); 37 x 53 in blocks of 8, the
#: last block of each axis ragged. Axis 0 is the weight-only int4 form (blocks along K of
#: a K x N weight: a vector of the kernel reads a row of scales), axis 1 one scale a vector.
BLOCKS = [("i4", 0), ("ui4", 1), ("i8", 1), ("f8E4M3FN", 0)]


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


def block_ir(dtype: str, axis: int, rows: int = 37, cols: int = 53, block: int = 8) -> str:
    """x -> quantize (scales per block of 8 along ``axis``, an argument) -> dequantize -> +
    x, returning the codes and the sum."""
    blocks = (-(-rows // block), cols) if axis == 0 else (rows, -(-cols // block))
    x, s = f"tensor<{rows}x{cols}xf32>", f"tensor<{blocks[0]}x{blocks[1]}xf32>"
    q, z = f"tensor<{rows}x{cols}x{dtype}>", f"tensor<{blocks[0]}x{blocks[1]}x{dtype}>"
    zero = "0.0" if dtype.startswith("f8") else "1"
    attrs = f"{{axis = {axis} : i64, block_size = {block} : i64}}"
    return f"""func.func @g(%x: {x}, %s: {s}) -> ({q}, {x}) {{
  %z = arith.constant dense<{zero}> : {z}
  %q = ai.quantize %x, %s, %z {attrs} : {x} * {s} * {z}
  %d = ai.dequantize %q, %s, %z {attrs} : {q} * {s} * {z}
  %y = ai.add %d, %x : {x} * {x}
  return %q, %y : {q}, {x}
}}
"""


def _same_codes(got: np.ndarray, want: np.ndarray) -> bool:
    """Float8 codes bit for bit; integers by value (a 4-bit code is a byte on the device,
    its own 4 bits in ml_dtypes)."""
    if want.dtype.kind in "iu" or want.dtype.name in ("int4", "uint4"):
        return bool(np.array_equal(got.astype(np.int32), want.astype(np.int32)))
    return bool(np.array_equal(got.view(np.uint8), want.view(np.uint8)))


def _record(name: str, text: str, args: list) -> dict:
    compiled = fusec.compile(text, target="cuda")
    got = compiled._runner(args, poison=True)
    want = fusec.compile(text, target="reference")(*args)
    return {
        "name": name,
        "kinds": [k.kind for k in compiled.kernels],
        "codes_equal": _same_codes(np.asarray(got[0]), np.asarray(want[0])),
        "values_equal": bool(np.array_equal(got[1], want[1], equal_nan=True)),
    }


def main() -> None:
    (run,) = json.loads(sys.argv[1]) if len(sys.argv) > 1 else [{"seed": 0}]
    rng = np.random.default_rng(int(run["seed"]))
    x = (rng.standard_normal((37, 53)) * 200).astype(np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, 1e30, -0.0, 300.0]
    for dtype, saturate in TYPES:
        record = _record(f"{dtype}{'_sat' if saturate else ''}", qdq_ir(dtype, saturate), [x])
        print(json.dumps(record), flush=True)
    for dtype, axis in BLOCKS:
        text = block_ir(dtype, axis)
        shape = (5, 53) if axis == 0 else (37, 7)
        scales = rng.uniform(0.5, 60.0, shape).astype(np.float32)
        print(json.dumps(_record(f"{dtype}_blocks_axis{axis}", text, [x, scales])), flush=True)


if __name__ == "__main__":
    main()
