# fusec kernel for one ai.fused "conv" group of 1 op(s):
#   ai.conv2d
#   inputs : tensor<1x1x7x5xf32>, tensor<1x1x3x3xf32>
#   outputs: tensor<1x1x4x2xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# im2col: cols[n, c*9 + r*3 + s, oh*2 + ow] = padded input window
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_im2col(x, cols):
    for task in numba.prange(1):
        base_in = task * 35
        for r in range(3):
            for s in range(3):
                base = ((task * 3 + r) * 3 + s) * 8
                for oh in range(4):
                    ih = oh * 2 + r * 1 - 1
                    inside = ih >= 0 and ih < 7
                    for ow in range(2):
                        iw = ow * 2 + s * 1 - 0
                        if inside and iw >= 0 and iw < 5:
                            cols[base + oh * 2 + ow] = x[base_in + ih * 5 + iw]
                        else:
                            cols[base + oh * 2 + ow] = f32(0.0)


def launch(in0, in1, out0):
    """Run the group: every output element is written."""
    kernel_cols = np.empty(72, dtype=np.float32)
    kernel_im2col(in0, kernel_cols)
    np.matmul(in1.reshape((1, 1, 9)), kernel_cols.reshape((1, 1, 9, 8)), out=out0.reshape((1, 1, 1, 8)))
