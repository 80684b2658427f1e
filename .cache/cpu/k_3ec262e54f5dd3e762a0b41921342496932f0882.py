# fusec kernel for one ai.fused "conv" group of 1 op(s):
#   ai.conv2d
#   inputs : tensor<2x4x9x8xf32>, tensor<4x1x3x3xf32>
#   outputs: tensor<2x4x7x6xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# im2col: cols[n, c*9 + r*3 + s, oh*6 + ow] = padded input window
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_im2col(x, cols):
    for task in numba.prange(8):
        base_in = task * 72
        for r in range(3):
            for s in range(3):
                base = ((task * 3 + r) * 3 + s) * 42
                for oh in range(7):
                    ih = oh * 1 + r * 1 - 0
                    inside = ih >= 0 and ih < 9
                    for ow in range(6):
                        iw = ow * 1 + s * 1 - 0
                        if inside and iw >= 0 and iw < 8:
                            cols[base + oh * 6 + ow] = x[base_in + ih * 8 + iw]
                        else:
                            cols[base + oh * 6 + ow] = f32(0.0)


def launch(in0, in1, out0):
    """Run the group: every output element is written."""
    kernel_cols = np.empty(3024, dtype=np.float32)
    kernel_im2col(in0, kernel_cols)
    np.matmul(in1.reshape((4, 1, 9)), kernel_cols.reshape((2, 4, 9, 42)), out=out0.reshape((2, 4, 1, 42)))
