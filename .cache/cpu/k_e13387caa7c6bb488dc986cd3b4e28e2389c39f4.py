# fusec kernel for one ai.fused "conv" group of 1 op(s):
#   ai.conv2d
#   inputs : tensor<2x4x9x8xf32>, tensor<5x4x2x2xf32>
#   outputs: tensor<2x5x5x3xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# im2col: cols[n, c*4 + r*2 + s, oh*3 + ow] = padded input window
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_im2col(x, cols):
    for task in numba.prange(8):
        base_in = task * 72
        for r in range(2):
            for s in range(2):
                base = ((task * 2 + r) * 2 + s) * 15
                for oh in range(5):
                    ih = oh * 2 + r * 1 - 0
                    inside = ih >= 0 and ih < 9
                    for ow in range(3):
                        iw = ow * 3 + s * 1 - 0
                        if inside and iw >= 0 and iw < 8:
                            cols[base + oh * 3 + ow] = x[base_in + ih * 8 + iw]
                        else:
                            cols[base + oh * 3 + ow] = f32(0.0)


def launch(in0, in1, out0):
    """Run the group: every output element is written."""
    kernel_cols = np.empty(480, dtype=np.float32)
    kernel_im2col(in0, kernel_cols)
    np.matmul(in1.reshape((1, 5, 16)), kernel_cols.reshape((2, 1, 16, 15)), out=out0.reshape((2, 1, 5, 15)))
