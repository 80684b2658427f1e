"""Every float32 in [-86.5, 0] through ``exp_nonpos_f32``, against float64 ``exp`` (a check).

Prints the largest error in float32 ulps (where it is), the share of correctly
rounded results, and checks the flush to 0 below -86.5 on every float32 in
[-104, -86.5). About 1.1e9 inputs in chunks; a few minutes on one core.

    python tools/exp_nonpos_exhaustive.py
"""

from __future__ import annotations

import math
import time

import numba
import numpy as np
from numpy import float32 as f32

from fusec.codegen.expr import helper_source

CHUNK = 1 << 24


def _loop():
    ns = {"math": math, "numba": numba, "np": np, "f32": f32}
    exec(  # noqa: S102 - the generator's own helper source
        helper_source(["exp_nonpos_f32"], '@numba.njit(fastmath=False, error_model="numpy")'), ns
    )
    exp = ns["exp_nonpos_f32"]

    @numba.njit(fastmath=False, error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = exp(x[i])

    return loop


def main() -> None:
    loop = _loop()
    start = time.time()
    # negative float32 bit patterns: 0x80000000 (-0.0) up to -86.5
    last = int(np.array([-86.5], np.float32).view(np.uint32)[0])
    worst, worst_x, exact, total = 0.0, 0.0, 0, 0
    for lo in range(0x80000000, last + 1, CHUNK):
        bits = np.arange(lo, min(lo + CHUNK, last + 1), dtype=np.uint32)
        x = bits.view(np.float32)
        y = np.empty_like(x)
        loop(x, y)
        ref = np.exp(x.astype(np.float64))
        exponent = np.frexp(ref)[1]
        ulp = np.ldexp(1.0, np.maximum(exponent - 24, -149))
        err = np.abs(y.astype(np.float64) - ref) / ulp
        k = int(np.argmax(err))
        if err[k] > worst:
            worst, worst_x = float(err[k]), float(x[k])
        exact += int((y == ref.astype(np.float32)).sum())
        total += x.size
    below = np.arange(last + 1, int(np.array([-104.0], np.float32).view(np.uint32)[0]) + 1)
    xb = below.astype(np.uint32).view(np.float32)
    yb = np.empty_like(xb)
    loop(xb, yb)
    print(f"inputs in [-86.5, 0]: {total}")
    print(f"max error {worst:.4f} ulp at x = {worst_x!r}")
    print(f"correctly rounded: {exact / total:.4%}")
    print(f"[-104, -86.5): {xb.size} inputs, all 0: {bool((yb == 0).all())}")
    print(f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
