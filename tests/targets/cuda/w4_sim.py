"""Run under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) by test_w4a16.py
(``sim_client.run_simulator``): W4A16 layers (``w4_cases.w4a16_onnx``; the cases as JSON,
the first argument; a case's ``ring_chunks`` sets ``w4_mma.CHUNKS_PER_STEP``, its
``min_blocks`` ``w4_mma.MIN_BLOCKS_PER_SM``, its ``carveout`` ``w4_mma.SHARED_CARVEOUT``, its
``staggered`` ``w4_mma.STAGGERED_HALVES``, its ``x_sums`` ``w4_mma.SHARED_X_SUMS``, its
``producer`` ``w4_mma.PRODUCER_WARP``, its ``ring_scales`` ``w4_mma.RING_SCALES``, its
``loop`` ``$FUSEC_W4_KERNEL`` for that case)
through the cuda target, outputs poisoned first; prints one JSON line per case: its name,
the kernels' kinds, NaN count and rel L2 against the reference executor."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))  # tests/

import numpy as np  # noqa: E402
from w4_cases import w4a16_onnx  # noqa: E402

import fusec  # noqa: E402


def main() -> None:
    from fusec.targets.cuda.gemm import w4_mma

    default_loop = os.environ.get(w4_mma.KERNEL_CHOICE, "auto")
    for case in json.loads(sys.argv[1]):
        m, k, n, block, dtype, transposed, scales, *unsigned = case["layer"]
        model, x = w4a16_onnx(m, k, n, block, dtype, m + k, transposed, scales, *unsigned)
        # the block ring's chunks a warp a step (a case's "ring_chunks"; the default else)
        w4_mma.CHUNKS_PER_STEP = case.get("ring_chunks", 1)
        w4_mma.MIN_BLOCKS_PER_SM = case.get("min_blocks")  # (launch bounds: none simulated)
        w4_mma.SHARED_CARVEOUT = case.get("carveout")
        w4_mma.STAGGERED_HALVES = case.get("staggered", False)
        w4_mma.SHARED_X_SUMS = case.get("x_sums", False)
        w4_mma.PRODUCER_WARP = case.get("producer", False)
        w4_mma.RING_SCALES = case.get("ring_scales", False)
        os.environ[w4_mma.KERNEL_CHOICE] = case.get("loop", default_loop)
        compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
        got = np.asarray(compiled._runner([x], poison=True)[0]).astype(np.float64)
        want = fusec.compile(fusec.from_onnx(model), target="reference")(x).astype(np.float64)
        record = {
            "name": case["name"],
            "kinds": [kernel.kind for kernel in compiled.kernels],
            "nan": int(np.isnan(got).sum()),
            "rel_l2": float(np.linalg.norm(got - want) / np.linalg.norm(want)),
        }
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
