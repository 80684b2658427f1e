# fusec kernel for one ai.fused "pool" group of 1 op(s):
#   ai.max_pool2d
#   inputs : tensor<1x1x5x5xf32>
#   outputs: tensor<1x1x2x2xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# max pooling: one task per (n, c) plane
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pool(x, y):
    for task in numba.prange(1):
        base = task * 25
        obase = task * 4
        for i in range(2):
            for j in range(2):
                acc = f32(-math.inf)
                count = 0
                for r in range(2):
                    ih = i * 2 + r * 1 - 0
                    for s in range(2):
                        iw = j * 2 + s * 1 - 0
                        if ih >= 0 and ih < 5 and iw >= 0 and iw < 5:
                            v = x[base + ih * 5 + iw]
                            if v > acc or v != v:
                                acc = v
                y[obase + i * 2 + j] = acc


def launch(in0, out0):
    """Run the group: every output element is written."""
    kernel_pool(in0, out0)
