"""Run under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) by test_w4a16.py: W4A16
layers (``w4_cases.w4a16_onnx``) through the cuda target, outputs poisoned first; prints
one JSON line per case: the kernels' kinds, NaN count and rel L2 against the reference
executor."""

from __future__ import annotations

import json

import numpy as np
from w4_cases import w4a16_onnx

import fusec

#: (M, K, N, block, type, transposed): the W4A16 route (M <= 16; N not a multiple of the
#: block's 8 warps, K's words not a multiple of a warp's 32 lanes, and 136 of them: the
#: unrolled loop and the rest). Past M = 16 the Tensor Core GEMM, which the simulator
#: cannot run (test_w4a16_gpu.py).
CASES = [
    (2, 256, 40, 32, "bf16", False),
    (3, 128, 20, 16, "f16", True),
    (1, 1088, 8, 64, "bf16", False),
    (16, 64, 9, 8, "f16", False),
]


def main() -> None:
    for m, k, n, block, dtype, transposed in CASES:
        model, x = w4a16_onnx(m, k, n, block, dtype, seed=m + k, transposed=transposed)
        compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
        got = np.asarray(compiled._runner([x], poison=True)[0]).astype(np.float64)
        want = fusec.compile(fusec.from_onnx(model), target="reference")(x).astype(np.float64)
        record = {
            "case": [m, k, n, block, dtype, transposed],
            "kinds": [kernel.kind for kernel in compiled.kernels],
            "nan": int(np.isnan(got).sum()),
            "rel_l2": float(np.linalg.norm(got - want) / np.linalg.norm(want)),
        }
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
